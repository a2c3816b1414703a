"""`tailsim stress`: how big a burst each policy can take and still recover (its storm margin).

A burst is the scenario's base arrival rate times a multiplier, held for a duration, after a
calm stretch at the base rate. A policy recovers from it when its goodput (runs delivered per
second) is back within 10% of its pre-burst level within the recovery window after the burst
ends. For each policy and burst duration the multiplier is searched upward on a grid, then
narrowed by bisection between the last burst recovered from and the first one not; every burst
of every policy runs on the same seed and streams (common random numbers: the arrivals of two
schedules differ only where their rates do).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from sim.analysis.capacity import ALL
from sim.analysis.timeseries import recovery
from sim.model.errors import ScenarioError
from sim.plan import Plan, recompile
from sim.study.runner import chosen_policies, run

#: Multipliers tried first, in order (the search stops at the first burst not recovered from).
MULTIPLIERS = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
#: Bisection steps between the last multiplier recovered from and the first one not.
BISECTIONS = 3
#: Goodput is "back" when a burst-length window of it averages at least (1 - TOLERANCE) x the
#: pre-burst level.
TOLERANCE = 0.1


@dataclass(frozen=True)
class StressPlan:
    """The bursts to try and how recovery is judged."""

    durations_s: tuple[float, ...]
    multipliers: tuple[float, ...] = MULTIPLIERS
    calm_s: float = 0.0  # base-rate stretch before the burst (0: chosen from the scenario)
    window_s: float = 0.0  # recovery window after the burst (0: chosen from the scenario)
    bisections: int = BISECTIONS


def default_plan(plan: Plan) -> StressPlan:
    """Bursts of 1 and 2 minutes (one only if the deadline is long), a calm stretch of
    max(120 s, 4 deadlines) and a recovery window of max(60 s, 4 deadlines)."""
    deadline = plan.deadline_s
    return StressPlan(
        durations_s=(60.0, 120.0),
        calm_s=max(120.0, 4 * deadline),
        window_s=max(60.0, 4 * deadline),
    )


def base_rate(plan: Plan) -> float:
    """The scenario's calm arrival rate (Poisson or schedule arrivals only)."""
    if plan.arrivals.kind not in ("poisson", "schedule"):
        raise ScenarioError(
            plan.source,
            [("arrivals.kind", "stress needs poisson or schedule arrivals (a base rate to burst)")],
        )
    return plan.arrivals.rate_per_s


def burst_scenario(
    plan: Plan, multiplier: float, duration_s: float, calm_s: float, after_s: float
) -> tuple[Plan, int, tuple[float, float]]:
    """The plan with its arrivals replaced by calm, burst, calm (and no warmup); the requests
    that cover it with room to spare; and the burst's (start, end)."""
    rate = base_rate(plan)
    segments = [
        {"duration_s": calm_s, "rate_per_s": rate},
        {"duration_s": duration_s, "rate_per_s": rate * multiplier},
    ]
    arrivals = {"kind": "schedule", "rate_per_s": rate, "segments": segments}
    expected = rate * (calm_s + after_s) + rate * multiplier * duration_s
    n = math.ceil(expected + 6 * math.sqrt(expected) + 10)
    bursty = recompile(plan, {"arrivals": arrivals, "warmup_s": 0.0})
    return bursty, n, (calm_s, calm_s + duration_s)


def recovery_after(
    plan: Plan, policy: str, multiplier: float, duration_s: float, search: StressPlan
) -> tuple[float, float, float]:
    """(pre-burst goodput per s, goodput one burst-length after the burst, seconds until
    goodput is back; inf if not within the window) of one policy after one burst."""
    after_s = search.window_s + 2 * duration_s
    bursty, n, burst = burst_scenario(plan, multiplier, duration_s, search.calm_s, after_s)
    result = run(bursty, requests=n, policies=[policy], records=ALL)  # timeseries needs calls
    series = result.timeseries
    horizon = burst[1] + after_s
    series = series[series["t_s"] + bursty.timeseries_bin_s <= horizon + 1e-9]
    level, after, back = recovery(series, policy, burst, TOLERANCE)
    return level, after, back if back <= search.window_s else math.inf


def stress(
    plan: Plan,
    policies: Sequence[str] | None = None,
    search: StressPlan | None = None,
    progress: Callable[[str, float, float], None] | None = None,
) -> pd.DataFrame:
    """Every burst tried, one row each: policy, duration_s, multiplier, extra_requests (the
    burst's requests beyond the base rate), level_per_s, after_per_s, recovery_s (inf: not
    back within the window), recovered."""
    search = search or default_plan(plan)
    names = chosen_policies(plan, policies, "--policy")
    rate = base_rate(plan)
    rows = []
    for policy in names:
        for duration in search.durations_s:
            tried: dict[float, tuple[float, float, float]] = {}

            def attempt(
                m: float,
                policy: str = policy,
                duration: float = duration,
                tried: dict[float, tuple[float, float, float]] = tried,
            ) -> bool:
                if progress is not None:
                    progress(policy, duration, m)
                tried[m] = recovery_after(plan, policy, m, duration, search)
                return math.isfinite(tried[m][2])

            good, bad = 1.0, None
            for m in search.multipliers:
                if not attempt(m):
                    bad = m
                    break
                good = m
            for _ in range(search.bisections if bad is not None and good > 1.0 else 0):
                mid = round((good + bad) / 2, 3)
                if attempt(mid):
                    good = mid
                else:
                    bad = mid
            for m, (level, after, back) in sorted(tried.items()):
                rows.append(
                    {
                        "policy": policy,
                        "duration_s": duration,
                        "multiplier": m,
                        "extra_requests": (m - 1) * rate * duration,
                        "level_per_s": level,
                        "after_per_s": after,
                        "recovery_s": back,
                        "recovered": math.isfinite(back),
                    }
                )
    return pd.DataFrame(rows)


def margins(table: pd.DataFrame) -> pd.DataFrame:
    """Per policy and burst duration: the largest multiplier recovered from with every smaller
    one tried also recovered, its recovery time, and the first multiplier not recovered from;
    per policy, `margin_requests` = the largest such burst's extra requests (its storm margin)."""
    rows = []
    for (policy, duration), group in table.groupby(["policy", "duration_s"], sort=False):
        part = group.sort_values("multiplier")
        failed = part[~part["recovered"]]
        first_bad = float(failed["multiplier"].min()) if len(failed) else math.nan
        ok = part[part["recovered"] & ~(part["multiplier"] > first_bad)]
        best = ok.iloc[-1] if len(ok) else None
        rows.append(
            {
                "policy": policy,
                "duration_s": duration,
                "largest_multiplier": float(best["multiplier"]) if best is not None else 1.0,
                "recovery_s": float(best["recovery_s"]) if best is not None else math.nan,
                "first_failed": first_bad,
                "extra_requests": float(best["extra_requests"]) if best is not None else 0.0,
            }
        )
    frame = pd.DataFrame(rows)
    frame["margin_requests"] = frame.groupby("policy", sort=False)["extra_requests"].transform(
        "max"
    )
    return frame


def lower_bounds(best: pd.DataFrame) -> set[str]:
    """Policies whose storm margin is only a lower bound: at some burst length no burst tried
    beat them (`first_failed` NaN), so a larger one might not either. Such a margin is printed
    `>= N`, and policies that tie at it are not told apart by the search."""
    unbounded = best[best["first_failed"].isna()]
    return set(unbounded["policy"].astype(str))


def margin_text(margin: float, bounded: bool) -> str:
    """'420', or '>= 420' for a lower bound."""
    return f"{margin:.0f}" if bounded else f">= {margin:.0f}"


def bound_lines(best: pd.DataFrame) -> list[str]:
    """What a reader must know under the table: which margins are lower bounds, and which of
    them tie (the search tried no burst that told them apart)."""
    open_ended = lower_bounds(best)
    if not open_ended:
        return []
    margin = best.groupby("policy", sort=False)["margin_requests"].max()
    names = [p for p in dict.fromkeys(best["policy"].astype(str)) if p in open_ended]
    largest = best.loc[best["first_failed"].isna(), "largest_multiplier"].max()
    lines = [
        f">= N: {', '.join(names)} recovered from every burst tried (up to x{largest:g}): "
        "the margin is at least N, not measured; try a larger --multiplier to bound it"
    ]
    ties: dict[float, list[str]] = {}
    for name in names:
        ties.setdefault(float(margin[name]), []).append(name)
    for value, tied in ties.items():
        if len(tied) > 1:
            lines.append(f"{', '.join(tied)} tie at >= {value:.0f}: not ranked against each other")
    return lines
