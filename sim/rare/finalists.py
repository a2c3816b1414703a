"""`tune` against an SLO that plain runs cannot resolve: the search's best few finalists judged by
`tailsim nines` (importance sampling, `sim.rare.nines`), and the cheapest whose 95% interval
shows the target met kept.

Plain runs can show a target met only from target z^2 / (1 - target) runs without a miss
(38,411 for 99.99%, `sim.analysis.slo.runs_to_resolve`), far more than a search can spend per
candidate. So the search ranks candidates on plain runs as usual (the highest lower 95% bound,
then the lowest cost) and hands its finalists here: their miss probabilities are estimated
together (common random numbers: the same inputs and weights for each), each becomes a
reading against the target (success share 1 - p, interval [1 - hi, 1 - lo]), and the cheapest
(on the search's plain cost) that meets it wins; where none does, the one with the highest
lower end. The estimator counts misses of the deadline (late or failed runs): for a
`valid_hit_rate` SLO a finalist that delivered an invalid answer on the search's draws cannot
be shown to meet it this way, and stays undecided; so does one whose estimate has not
converged (relative error above 0.5 when the budget ran out: a normal interval on a handful of
weighted misses is too weak to certify a target with).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

from sim.analysis.slo import MET, UNDECIDED, SloReading, miss_reading, target_text
from sim.model.words import plural
from sim.plan import Plan, recompile
from sim.rare.nines import estimate_nines
from sim.study.tune import TUNED, Score, policy_mapping

#: Default wall-time budget of the finalists' estimate, seconds, and its relative error goal.
BUDGET_S = 60.0
REL_ERROR = 0.1


@dataclass
class NinesCheck:
    """The finalists as `tailsim nines` saw them, and the one kept."""

    names: list[str]
    costs: list[float]  # USD per request on the search's plain draws
    readings: list[SloReading]
    chosen: int
    method: str
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One sentence for `tune`'s note."""
        kept = self.readings[self.chosen]
        how = "importance sampling" if self.method == "importance" else "plain sampling (fallback)"
        verdict = (
            "meets it, the cheapest that does"
            if kept.status == MET
            else "comes closest (none shown to meet it)"
        )
        return (
            f"plain runs cannot show it; `tailsim nines` ({how}, {self.seconds:.0f} s) on "
            f"{plural(len(self.names), 'finalist')}: the winner {verdict}: {kept.text}"
        )


def nines_reading(
    miss: float, lo: float, hi: float, runs: int, target: float, *, junk: bool, rel_error: float
) -> SloReading:
    """A finalist's reading (`sim.analysis.slo.miss_reading`: a met target from an estimate
    that has not converged is undecided), where a `valid_hit_rate` target met on time by a
    finalist that delivered junk in the search is undecided too."""
    reading = miss_reading(miss, lo, hi, runs, target, rel_error)
    if junk and reading.status == MET:
        why = "invalid answers on time in the search; `tailsim nines` counts deadline misses only"
        return replace(reading, status=UNDECIDED, why=why)
    return reading


def check_finalists(
    plan: Plan,
    finalists: list[tuple[dict[str, dict[str, Any]], Score]],
    slo: tuple[float, str],
    *,
    budget_s: float = BUDGET_S,
    rel_error: float = REL_ERROR,
    seed: int | None = None,
) -> tuple[int, NinesCheck]:
    """Estimate every finalist's miss probability in one `estimate_nines` run and pick (see
    the module docstring); returns the index kept and the check's report."""
    target, metric = slo
    began = time.perf_counter()
    names = [f"{TUNED}_{i + 1}" for i in range(len(finalists))]
    specs = [step_specs for step_specs, _ in finalists]
    policies = {name: policy_mapping(spec) for name, spec in zip(names, specs, strict=True)}
    candidates = recompile(plan, {"policies": policies})
    result = estimate_nines(candidates, names, rel_error, budget_s, seed=seed)
    table = result.table.set_index("policy")
    readings = []
    for name, (_, score) in zip(names, finalists, strict=True):
        row = table.loc[name]
        junk = metric == "valid_hit_rate" and score.slo is not None and score.slo.junk
        readings.append(
            nines_reading(
                float(row["miss_probability"]),
                float(row["ci_lo"]),
                float(row["ci_hi"]),
                int(row["runs"]),
                target,
                junk=junk,
                rel_error=float(row.get("rel_error", math.nan)),
            )
        )
    costs = [score.cost for _, score in finalists]
    meeting = [i for i, r in enumerate(readings) if r.status == MET]
    if meeting:
        chosen = min(meeting, key=lambda i: (costs[i], -readings[i].lo))
    else:
        chosen = max(range(len(readings)), key=lambda i: (_finite(readings[i].lo), -costs[i]))
    seconds = time.perf_counter() - began
    check = NinesCheck(names, costs, readings, chosen, result.method, seconds, result.warnings)
    return chosen, check


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def check_lines(check: NinesCheck) -> list[str]:
    """Per finalist: its cost, nines and verdict, the kept one marked."""
    target = check.readings[0].target if check.readings else math.nan
    lines = [f"finalists against SLO {target_text(target)} by `tailsim nines`:"]
    for i, (name, cost, reading) in enumerate(
        zip(check.names, check.costs, check.readings, strict=True)
    ):
        mark = " <- kept as `tuned`" if i == check.chosen else ""
        lines.append(f"  {name}: ${cost:.4f}/request, {reading.text}{mark}")
    return lines + [f"  warning: {w}" for w in check.warnings]
