"""The commands that read a results folder (a run's or a sweep's): `plot` redraws its
figures, `report` writes its report.html, `explain` prints a run's comparison and breakdown."""

from __future__ import annotations

from pathlib import Path

import click

from sim import api
from sim.api.faces import breakdown_table, folder_view, slo_table
from sim.cli.common import bad_input_exits, out, summary_table


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--svg", is_flag=True, help="Write SVG copies beside the PNGs.")
def plot(folder: Path, svg: bool) -> None:
    """Redraw every figure of FOLDER (a `tailsim run` or `tailsim sweep` folder) from its
    result files into FOLDER/figures/."""
    with bad_input_exits():
        paths = api.plot(folder, svg=svg)
    for path in paths:
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
        path = api.report(folder, out_file)
    view = folder_view(folder)
    if view is not None:  # the verdicts in text too, not only inside the page
        out.print(slo_table(view))
    out.print(f"report: {path}", markup=False)


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
def explain(folder: Path) -> None:
    """Print, from the result files of a `tailsim run` in FOLDER, the comparison and why each
    policy did as it did (failures by reason and step, load per provider)."""
    with bad_input_exits():
        explained = api.explain(folder)
    out.print(summary_table(explained.summary, explained.deadline_s, explained.seed))  # type: ignore[arg-type]
    view = folder_view(folder)
    if view is not None:
        out.print(slo_table(view))
    out.print(breakdown_table(explained.breakdown))
