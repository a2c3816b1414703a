"""The commands that read a results folder (a run's or a sweep's): `plot` redraws its
figures, `report` writes its report.html, `explain` prints a run's comparison and breakdown."""

from __future__ import annotations

import json
from pathlib import Path

import click

from sim.cli.common import bad_input_exits, out, summary_table
from sim.output.explain import breakdown_table, read_breakdown
from sim.output.results import read_result_tables
from sim.output.slo_view import folder_view, slo_table


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--svg", is_flag=True, help="Write SVG copies beside the PNGs.")
def plot(folder: Path, svg: bool) -> None:
    """Redraw every figure of FOLDER (a `tailsim run` or `tailsim sweep` folder) from its
    result files into FOLDER/figures/."""
    with bad_input_exits():
        check_results_folder(folder)
    from sim.output.plots import write_figures  # noqa: PLC0415 - slow import, on demand

    for path in write_figures(folder, svg=svg):
        out.print(f"figure: {path}", markup=False)


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option(
    "--out", "out_file", type=click.Path(path_type=Path), help="Default: FOLDER/report.html."
)
def report(folder: Path, out_file: Path | None) -> None:
    """Write one self-contained report.html for FOLDER (a run or a sweep): the comparison table,
    every figure (embedded), the breakdown, the resolved scenario and a plain-language reading."""
    with bad_input_exits():
        check_results_folder(folder)
    from sim.output.report_html import write_report  # noqa: PLC0415 - slow import, on demand

    with bad_input_exits():
        path = write_report(folder, out_file)
    view = folder_view(folder)
    if view is not None:  # the verdicts in text too, not only inside the page
        out.print(slo_table(view))
    out.print(f"report: {path}", markup=False)


def check_results_folder(folder: Path) -> None:
    """Refuse a folder that is not a finished run or sweep folder, naming what is expected."""
    from sim.output.store import is_sweep_folder, read_sweep  # noqa: PLC0415

    if is_sweep_folder(folder):
        read_sweep(folder)  # refuses an unfinished sweep, saying how to finish it
        return
    read_result_tables(folder)


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
def explain(folder: Path) -> None:
    """Print, from the result files of a `tailsim run` in FOLDER, the comparison and why each
    policy did as it did (failures by reason and step, load per provider)."""
    with bad_input_exits():
        tables = read_result_tables(folder, need_requests=False)
        reasons = read_breakdown(folder)
        seed = json.loads((folder / "run.json").read_text(encoding="utf-8")).get("seed", "?")
    out.print(summary_table(tables.summary, tables.deadline_s, seed))
    view = folder_view(folder)
    if view is not None:
        out.print(slo_table(view))
    out.print(breakdown_table(reasons))
