"""The searches over many runs of a scenario: `tune` (per-step cutoffs, hedge delays and
fallbacks; the tuned scenario written) and `stress` (each policy's storm margin)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import yaml

from sim.api.inputs import ScenarioLike, file_path, optional_path, plan_of, scenario_path
from sim.api.run import chosen_policies
from sim.model.config import AdaptivePolicy
from sim.model.errors import ScenarioError
from sim.model.scenario import parse_yaml, scenario_from_dict, with_includes
from sim.model.words import plural
from sim.output.results import check_writable, default_folder, write_stress_results
from sim.plan import Plan, compile_scenario
from sim.study.runner import run as run_policies

if TYPE_CHECKING:
    from sim.study.stress import StressPlan
    from sim.study.tune import TuneOutcome


def tune(
    scenario: str | Path,
    out: str | Path,
    *,
    requests: int | None = None,
    seed: int | None = None,
    max_cost: float | None = None,
    min_quality: float = 0.0,
    slo_target: float | None = None,
    nines_budget_s: float = 0.0,
    progress: Callable[[str, int, int], None] | None = None,
) -> TuneOutcome:
    """Tune the scenario at `scenario` (a YAML path: the tuned file is written beside its
    includes), write it to `out` with the winner as policy `tuned` (only once it validates and
    reproduces the searched policy), and run every policy of it on the scenario's seed for
    comparison. `slo_target` (else the scenario's `slo`) makes the search find the cheapest
    candidate that meets it; `nines_budget_s` > 0 lets importance sampling judge the finalists."""
    from sim.study.tune import (  # noqa: PLC0415 - the search's code only when tuning
        TUNED,
        TuneOutcome,
        search_slo,
        slo_note,
        tuned_scenario_data,
    )
    from sim.study.tune import tune as search_tune  # noqa: PLC0415

    source = scenario_path(scenario)
    out_file = file_path(out, "out")
    plan = plan_of(source)
    if out_file.is_dir():
        raise ScenarioError(str(out_file), [("", "is a folder, expected a file name to write")])
    parent = out_file.absolute().parent
    if not parent.is_dir():
        raise ScenarioError(str(out_file), [("", f"cannot be written: no folder {parent}")])
    check = None
    if nines_budget_s:
        from sim.rare.finalists import check_finalists  # noqa: PLC0415 - only when judging

        check = partial(check_finalists, budget_s=nines_budget_s)
    n = requests or plan.requests
    slo = search_slo(plan, slo_target)
    result = search_tune(
        plan, requests=n, seed=seed, max_cost=max_cost, min_quality=min_quality,
        progress=progress, slo=slo, check=check,
    )  # fmt: skip
    data = parse_yaml(source.read_text(encoding="utf-8"), str(source))
    data = with_includes(data, str(source), source.parent)  # the tuned file stands alone
    out_dir = out_file.resolve().parent
    fresh = tuned_scenario_data(data, result.policy, str(source.resolve().parent), str(out_dir))
    if slo_target is not None:
        fresh["slo"] = {**(fresh.get("slo") or {}), "target": slo_target}
    tuned = compile_scenario(scenario_from_dict(fresh, source=str(out_file), base_dir=out_dir))
    written = tuned.policies[TUNED].written
    for step, scored in result.step_specs.items():  # the file runs what was scored
        if written[step] != AdaptivePolicy.model_validate(scored):
            raise AssertionError(f"written policy differs from the scored one at step {step}")
    header = (
        f"# {plan.name} with policy `{TUNED}` added by `tailsim tune` "
        f"({plural(result.evaluations, 'candidate')} scored on {plural(n, 'request')}).\n"
    )
    out_file.write_text(
        header + yaml.safe_dump(fresh, sort_keys=False, allow_unicode=True), encoding="utf-8"
    )
    report = run_policies(tuned, requests=n, seed=seed)
    cap = "none" if max_cost is None else f"{max_cost:g} USD"
    note = (
        f"{plan.name}: {plural(n, 'request')}, seed {report.seed} "
        "(the search ran on other draws); "
        f"cost cap {cap}, quality floor {max(min_quality, plan.quality_floor):g}"
    )
    if slo is not None:
        note += "; " + slo_note(slo, result.score, n, result.check)
    return TuneOutcome(result, report.summary, note, slo)


def check_lines(outcome: TuneOutcome) -> list[str]:
    """What the finalists' importance-sampling check found, as lines (none without one)."""
    if outcome.result.check is None:
        return []
    from sim.rare.finalists import check_lines as lines  # noqa: PLC0415

    return lines(outcome.result.check)


@dataclass(frozen=True)
class Stressed:
    """A stress search: every burst tried (`table`, stress.csv), each policy's margin
    (`margins`, margins.csv), the search's plan and the folder written."""

    table: pd.DataFrame
    margins: pd.DataFrame
    plan: StressPlan
    scenario: Plan
    folder: Path


def stress(
    scenario: ScenarioLike,
    policies: Sequence[str] | None = None,
    *,
    durations: Sequence[float] = (),
    multipliers: Sequence[float] = (),
    window: float | None = None,
    out: str | Path | None = None,
    figures: bool = True,
) -> Stressed:
    """Find each policy's storm margin: the largest burst (base rate x multiplier, held for a
    duration) after which its goodput is back to its pre-burst level within the recovery
    window; stress.csv, margins.csv (and figures/stress.png) written to `out` (default
    results/<name>/stress-<UTC time>/). Empty `durations`/`multipliers`: the defaults."""
    from sim.study.stress import StressPlan, default_plan, margins  # noqa: PLC0415
    from sim.study.stress import stress as search  # noqa: PLC0415

    spec = plan_of(scenario)
    names = chosen_policies(spec, policies)
    base = default_plan(spec)
    plan = StressPlan(
        durations_s=tuple(durations) or base.durations_s,
        multipliers=tuple(sorted(multipliers)) or base.multipliers,
        calm_s=base.calm_s,
        window_s=window or base.window_s,
    )
    given = optional_path(out, "out=")
    folder = given if given is not None else default_folder(spec.name, prefix="stress-")
    check_writable(folder)
    table = search(spec, names, plan)
    best = margins(table)
    write_stress_results(table, best, plan.window_s, spec.name, folder, figures=figures)
    return Stressed(table, best, plan, spec, folder)
