"""A scenario's SLO read from a run's or a sweep's hit rates: nines with their 95% interval and
whether the target is met, printed so that rounding never flatters a policy.

The interval is the one the tables already use: Wilson over a run's runs, and for a sweep point
the pooled Wilson widened by the replications' dispersion (`sim.analysis.aggregate`). A target
is *met* when the interval lies wholly at or above it, *missed* when wholly below, else
*undecided*; and *not resolved* when the sample is too small for even a perfect record (no miss
at all) to show the target met: fewer than target * z^2 / (1 - target) effective runs (38,411
for 0.9999). Plain Monte Carlo cannot tell such a policy's nines; `tailsim nines` can.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pandas as pd

from sim.analysis.aggregate import hit_rate_interval, wilson_score
from sim.model.words import percent_digits

Z95 = 1.959963984540054
MET, MISSED, UNDECIDED, UNRESOLVED = "met", "missed", "undecided", "not resolved"
NINES_HINT = "run `tailsim nines`"


def nines(share: float) -> float:
    """How many nines a success share holds: -log10(1 - share) (4 for 0.9999; inf for 1)."""
    return math.inf if share >= 1 else -math.log10(1.0 - share)


def decimals_for(target: float) -> int:
    """Decimals of a percentage that show a target's nines and one digit more: 3 for 0.9999
    (99.987%), 2 for 0.999, 1 for 0.99 or 0.95; at least 1."""
    return max(1, math.ceil(nines(target) - 1e-9) - 1)


def runs_to_resolve(target: float, z: float = Z95) -> int:
    """The fewest runs whose Wilson interval, with no miss at all, lies wholly at or above
    `target`: n / (n + z^2) >= target, so n >= target z^2 / (1 - target)."""
    return math.ceil(target * z * z / (1.0 - target) - 1e-9)


def percent(value: float, target: float, decimals: int) -> str:
    """`value` (a share) as a percentage without the % sign, with `decimals` decimals or more:
    as many as it takes for the printed figure to stay on the same side of `target` and of 100%
    as the value itself (99.9949% is never printed 99.995% against a target of 99.995%, nor
    99.99996% as 100.000%). Exactly 1 prints as 100."""
    if value >= 1.0:
        return "100"
    return percent_digits(value, decimals, below=(target, 1.0))


@dataclass(frozen=True)
class SloReading:
    """One policy's success share against a target: the estimate, its 95% interval, the runs
    behind it (effective: divided by a sweep's dispersion) and the verdict."""

    target: float
    rate: float
    lo: float
    hi: float
    runs: int
    misses: int
    effective_runs: float
    status: str
    why: str = ""  # why undecided, where not because the CI straddles the target

    @property
    def estimate(self) -> str:
        """'99.987% [99.985, 99.989]', or, for a record without a miss too small to resolve
        the target, 'no miss in 2,000 runs [99.808, 100]' (never a bare 100.000%)."""
        if math.isnan(self.rate):
            return "n/a"
        d = decimals_for(self.target)
        band = f"[{percent(self.lo, self.target, d)}, {percent(self.hi, self.target, d)}]"
        if self.status == UNRESOLVED and self.misses == 0:
            return f"no miss in {self.runs:,} runs {band}"
        return f"{percent(self.rate, self.target, d)}% {band}"

    @property
    def verdict(self) -> str:
        """met, missed, 'undecided: CI straddles 99.99%' or 'not resolved: run `tailsim
        nines`' (with the runs a plain sample would need)."""
        if self.status == UNDECIDED:
            return f"undecided: {self.why or 'CI straddles ' + target_text(self.target)}"
        if self.status == UNRESOLVED:
            need = runs_to_resolve(self.target)
            return f"not resolved: {NINES_HINT} (plain runs need >= {need:,})"
        return self.status

    @property
    def text(self) -> str:
        """The estimate and the verdict in one cell."""
        return f"{self.estimate} {self.verdict}"


def target_text(target: float) -> str:
    """A target as people write it: 99.99% (the shortest exact percentage)."""
    return f"{Decimal(str(target)) * 100:f}".rstrip("0").rstrip(".") + "%"


def judge(
    successes: int,
    runs: int,
    target: float,
    *,
    interval: tuple[float, float] | None = None,
    effective_runs: float | None = None,
) -> SloReading:
    """The reading of `successes` in `runs` against `target`: the Wilson interval unless a
    (wider, e.g. dispersion-widened) `interval` over `effective_runs` is given."""
    if runs <= 0:
        return SloReading(target, math.nan, math.nan, math.nan, 0, 0, 0.0, UNRESOLVED)
    n_eff = float(runs if effective_runs is None else effective_runs)
    rate = successes / runs
    lo, hi = interval if interval is not None else wilson_score(rate, float(runs))
    if lo >= target:
        status = MET
    elif hi < target:
        status = MISSED
    elif n_eff < runs_to_resolve(target):
        status = UNRESOLVED
    else:
        status = UNDECIDED
    return SloReading(target, rate, lo, hi, runs, runs - successes, n_eff, status)


#: The largest relative error (95% half-width / estimate) of an estimator at which a target is
#: believed met: a normal interval over a handful of weighted misses is too weak to certify.
TRUSTED_REL_ERROR = 0.5


def miss_reading(
    miss: float, lo: float, hi: float, runs: int, target: float, rel_error: float = math.nan
) -> SloReading:
    """The reading of an estimated miss probability with its 95% interval [lo, hi] (e.g. by
    importance sampling, `tailsim nines`): success share 1 - miss in [1 - hi, 1 - lo]; met,
    missed or undecided by the same rule (an estimator's interval has no "not resolved"),
    except that a target met by an estimate whose `rel_error` exceeds `TRUSTED_REL_ERROR` is
    undecided (not converged)."""
    rate, low, high = 1.0 - miss, 1.0 - hi, 1.0 - lo
    if math.isnan(rate) or math.isnan(low) or math.isnan(high):
        return SloReading(target, math.nan, math.nan, math.nan, runs, 0, 0.0, UNDECIDED)
    status = MET if low >= target else MISSED if high < target else UNDECIDED
    why = ""
    if status == MET and math.isfinite(rel_error) and rel_error > TRUSTED_REL_ERROR:
        status = UNDECIDED
        why = f"estimate not converged (relative error {rel_error:.2f}); give it more time"
    return SloReading(target, rate, low, high, runs, 0, float(runs), status, why)


def run_readings(summary: pd.DataFrame, target: float, metric: str) -> list[SloReading]:
    """One reading per row of a run's summary (its `metric` over its `runs`, Wilson)."""
    readings = []
    for row in summary.to_dict("records"):
        runs = int(row["runs"])
        rate = float(row.get(metric, math.nan))
        if math.isnan(rate):
            readings.append(judge(0, 0, target))
            continue
        readings.append(judge(round(rate * runs), runs, target))
    return readings


def sweep_readings(
    aggregate: pd.DataFrame,
    replications: pd.DataFrame,
    keys: Sequence[str],
    target: float,
    metric: str,
) -> list[SloReading]:
    """One reading per row of a sweep's pooled summary: the pooled `metric` with the interval
    the sweep uses (Wilson on the pooled runs widened by the replications' dispersion), taken
    pooled from the replications as `aggregate` pools the hit rate."""
    readings = []
    by = [*keys, "policy"]
    groups = {
        (group if isinstance(group, tuple) else (group,)): part
        for group, part in replications.groupby(by, sort=False)
    }
    for row in aggregate.to_dict("records"):
        part = groups.get(tuple(row[k] for k in by))
        if part is None or metric not in part or part[metric].isna().any():
            readings.append(judge(0, 0, target))
            continue
        rates = part[metric].to_numpy(dtype=float)
        runs = part["runs"].to_numpy(dtype=float)
        lo, hi, phi = hit_rate_interval(rates, runs)
        total = int(runs.sum())
        successes = int(np.round(rates * runs).sum())
        n_eff = total / max(1.0, phi if math.isfinite(phi) else 1.0)
        readings.append(judge(successes, total, target, interval=(lo, hi), effective_runs=n_eff))
    return readings


def slo_header(target: float, metric: str) -> str:
    """The column header: 'SLO 99.99%: hit rate [95% CI]'."""
    return f"SLO {target_text(target)}: {metric.replace('_', ' ')} [95% CI]"


def slo_lines(names: Sequence[str], readings: Sequence[SloReading], metric: str) -> list[str]:
    """Plain-language lines: which policies meet the target, miss it, or cannot be told."""
    if not readings:
        return []
    target = readings[0].target
    what = "runs answered within the deadline" + ("" if metric == "hit_rate" else ", validly")
    groups: dict[str, list[str]] = {}
    for name, reading in zip(names, readings, strict=True):
        groups.setdefault(reading.status, []).append(name)
    parts = [
        f"{label} by {', '.join(groups[status])}"
        for status, label in ((MET, "met"), (MISSED, "missed"), (UNDECIDED, "undecided"))
        if status in groups
    ]
    line = f"SLO {target_text(target)} of {what}, by the 95% CI: " + "; ".join(parts)
    if UNRESOLVED in groups:
        line += ("; " if parts else "") + (
            f"not resolved by plain runs for {', '.join(groups[UNRESOLVED])}: {NINES_HINT} "
            f"(a plain sample needs >= {runs_to_resolve(target):,} runs without a miss)"
        )
    return [line]
