"""`nines`: each policy's deadline-miss probability down to 1e-5 and below, by importance
sampling (`sim.rare.nines`), in memory or written as `tailsim nines` writes it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sim.api.inputs import ScenarioLike, optional_path, plan_of
from sim.api.run import chosen_policies
from sim.output.results import check_writable, default_folder
from sim.rare.nines import NinesResult, estimate_nines


def nines(
    scenario: ScenarioLike,
    policies: Sequence[str] | None = None,
    target_rel_error: float = 0.1,
    budget_s: float = 60.0,
    **options: Any,
) -> NinesResult:
    """Each policy's deadline-miss probability with its 95% CI by importance sampling, as
    `tailsim nines` prints it (`.table` is nines.csv; `.stopped_by` says whether the target or
    the wall-clock `budget_s` ended it, `.machine_dependent` whether the budget shaped the
    numbers); `options` are `sim.rare.nines.estimate_nines`'s (seed, method, batch, pilot,
    attempts, engine, max_runs)."""
    plan = plan_of(scenario)
    names = chosen_policies(plan, policies) if policies else None
    return estimate_nines(plan, names, target_rel_error, budget_s, **options)


def nines_to_folder(
    scenario: ScenarioLike,
    out: str | Path | None = None,
    *,
    policies: Sequence[str] | None = None,
    target_rel_error: float = 0.1,
    budget_s: float = 60.0,
    figures: bool = True,
    **options: Any,
) -> tuple[NinesResult, Path]:
    """`nines`, with nines.csv, tilt.txt, the notes (and figures/nines.png) written to `out`
    (default results/<name>/nines-<UTC time>/), checked writable before any work."""
    from sim.rare.output import write_nines  # noqa: PLC0415 - matplotlib only when asked for

    plan = plan_of(scenario)
    names = chosen_policies(plan, policies)
    given = optional_path(out, "out=")
    folder = given if given is not None else default_folder(plan.name, prefix="nines-")
    check_writable(folder)
    result = estimate_nines(plan, names, target_rel_error, budget_s, **options)
    write_nines(result, folder, figures=figures)
    return result, folder
