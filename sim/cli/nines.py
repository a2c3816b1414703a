"""`tailsim nines`: each policy's deadline-miss probability down to 1e-5 and below, by
importance sampling (`sim.rare.nines`), as a table, nines.csv and a figure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from rich.table import Table

from sim import api
from sim.api.faces import (
    NinesResult,
    as_nines,
    nines_lines,
    nines_note,
    nines_view,
    scenario_slo,
    slo_table,
)
from sim.cli.common import bad_input_exits, err, option, out, policy_names


@click.command()
@click.argument("scenario", required=False, type=click.Path(path_type=Path))
@option("policies")
@click.option(
    "--target-rel-error",
    type=click.FloatRange(min=0, min_open=True),
    default=0.1,
    show_default=True,
    help="Stop when every policy's 95% CI half-width / estimate is at most this.",
)
@click.option(
    "--budget-s",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Stop after this many seconds of wall time at most (checked between batches); the "
    "output then says the numbers depend on the machine.",
)
@option("seed")
@click.option(
    "--plain", is_flag=True, help="Plain Monte Carlo instead of importance sampling (checks)."
)
@option("engine")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Results folder.")
@click.option("--no-plot", is_flag=True, help="Skip figures/nines.png.")
def nines(
    scenario: Path | None,
    policies: tuple[str, ...],
    target_rel_error: float,
    budget_s: float,
    seed: int | None,
    plain: bool,
    engine: str | None,
    out_dir: Path | None,
    no_plot: bool,
) -> None:
    """Estimate each policy's probability of missing the deadline (and of failing outright),
    with a 95% CI, by importance sampling: rare misses (1e-4, 1e-5) in seconds."""
    with bad_input_exits():
        result, folder = api.nines_to_folder(
            scenario, out_dir, policies=policy_names(policies) or None,
            target_rel_error=target_rel_error, budget_s=budget_s, figures=not no_plot,
            seed=seed, method="plain" if plain else "importance", engine=engine,
        )  # fmt: skip
    spec = result.plan
    out.print(_table(result, as_nines))
    slo = scenario_slo(spec)  # the scenario's `slo: {target}`: the verdicts (sim.output.slo_view)
    view = nines_view(result.table, slo)
    if view is not None:
        out.print(slo_table(view))
        for note in filter(None, [nines_note(spec)]):
            out.print(note, markup=False)
    lines, stops, notes = nines_lines(result)
    for line in lines:
        out.print(line, markup=False)
    if result.tilts:
        out.print(
            f"tilt: cross-entropy per policy ({result.pilot_seconds:.1f} s of pilot), mixed with "
            f"the plain law (share {result.defensive:g}) for every policy alike; in "
            f"{folder}/tilt.txt",
            markup=False,
        )
    for line in stops:
        out.print(line, markup=False)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    figure = "" if no_plot else ", figures/nines.png"
    out.print(f"results: {folder}/ (nines.csv, tilt.txt, {notes}{figure})", markup=False)


def _table(result: NinesResult, as_nines: Callable[[float, float, float], str]) -> Table:
    """Per policy: hit rate as nines, the miss probability with its CI, how it was reached."""
    scenario = result.plan
    table = Table(
        title=f"deadline {scenario.deadline_s:g} s, seed {result.seed}, {result.method}: P(miss) "
        "= late or failed, per request (first send), 95% CI",
        title_justify="left",
    )
    headers = ("policy", "hit rate [95% CI]", "P(miss)", "95% CI", "rel err", "P(fail)",
               "runs", "s", "ESS", "max w", "engine")  # fmt: skip
    for header in headers:
        table.add_column(header, justify="left" if header == "policy" else "right")
    for row in result.table.to_dict("records"):
        table.add_row(
            row["policy"],
            as_nines(row["miss_probability"], row["ci_lo"], row["ci_hi"]),
            f"{row['miss_probability']:.3g}",
            f"[{row['ci_lo']:.3g}, {row['ci_hi']:.3g}]",
            f"{row['rel_error']:.2f}",
            f"{row['fail_probability']:.2g}",
            f"{row['runs']:,}",
            f"{row['seconds']:.1f}",
            f"{row['ess']:.0f}",
            f"{row['max_weight_share']:.3f}",
            row["engine"],
        )
    return table
