"""What reads a results folder (a run's or a sweep's): `plot` redraws its figures, `report`
writes its report.html, `explain` gives a run's comparison and breakdown."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sim.api.inputs import file_path, optional_path
from sim.output.explain import read_breakdown
from sim.output.results import read_result_tables


def check_results_folder(folder: str | Path) -> Path:
    """Refuse a folder that is not a finished run or sweep folder, naming what is expected."""
    from sim.output.store import is_sweep_folder, read_sweep  # noqa: PLC0415

    path = file_path(folder, "folder")
    if is_sweep_folder(path):
        read_sweep(path)  # refuses an unfinished sweep, saying how to finish it
    else:
        read_result_tables(path)
    return path


def plot(folder: str | Path, svg: bool = False) -> list[Path]:
    """Redraw every figure of a run or sweep folder from its result files into folder/figures/
    (with SVG copies if `svg`); returns the figures written."""
    path = check_results_folder(folder)
    from sim.output.plots import write_figures  # noqa: PLC0415 - slow import, on demand

    return list(write_figures(path, svg=svg))


def report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write folder/report.html (or `out`) for a run or sweep folder; returns its path."""
    path = check_results_folder(folder)
    from sim.output.report_html import write_report  # noqa: PLC0415 - slow import, on demand

    return write_report(path, optional_path(out, "out"))


@dataclass(frozen=True)
class Explained:
    """A run folder's comparison (`summary`), its deadline and seed, and why each policy did
    as it did (`breakdown`: failures by reason and step, load per provider)."""

    summary: pd.DataFrame
    deadline_s: float
    seed: int | str
    breakdown: pd.DataFrame


def explain(folder: str | Path) -> Explained:
    """The comparison and breakdown of a `tailsim run` folder, from its result files."""
    path = file_path(folder, "folder")
    tables = read_result_tables(path, need_requests=False)
    reasons = read_breakdown(path)
    seed = json.loads((path / "run.json").read_text(encoding="utf-8")).get("seed", "?")
    return Explained(tables.summary, tables.deadline_s, seed, reasons)
