"""A short plain-language reading of a results table, generated from the numbers only.

Who meets the deadline most often (with its 95% interval), which differences are within noise
(intervals that overlap), what a delivered answer costs, which policies sit on the Pareto
frontier, and warnings a reader must not miss (a policy failing most runs, 429s). Nothing here
flatters a failing policy: costs are per success, and a policy with no success has none.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.model.words import percent
from sim.plan import Plan

#: 429s per request above which the reading mentions them.
RATE_LIMIT_NOTE = 0.05


def _pct(value: float) -> str:
    return percent(value)  # a rare miss is never rounded away (99.98% is not "100.0%")


def _ci(row: pd.Series) -> str:
    return f"{_pct(row['hit_rate'])} [{_pct(row['hit_rate_lo'])}, {_pct(row['hit_rate_hi'])}]"


def _usd(value: float) -> str:
    return "n/a (no success)" if pd.isna(value) else f"${value:.4f}"


def price_note(plan: Plan) -> str | None:
    """The line a run prints under its table when a model has no price (`price_per_mtok` not
    set: a placeholder, as `tailsim import litellm` leaves a model whose list price it does not
    know), so a $0.0000 is never read as free; None when every model is priced."""
    unpriced = [name for name, model in plan.models.items() if not model.priced]
    if not unpriced:
        return None
    names = ", ".join(unpriced)
    return (
        f"prices: PLACEHOLDER for {names} (no price_per_mtok set): their calls count $0 in "
        f"$/request and $/success; set models.<name>.price_per_mtok before trusting the costs"
    )


def shows_valid_hits(summary: pd.DataFrame) -> bool:
    """Whether a comparison table shows the valid hit rate beside the hit rate: where answers can
    be wrong (a validator, a quality floor) an on-time run is not yet a good one, so junk
    delivered fast never flatters; where the two are equal everywhere the column says nothing."""
    if "valid_hit_rate" not in summary:
        return False
    return bool((summary["valid_hit_rate"] - summary["hit_rate"]).abs().max() > 0)


#: The first token as the person sees it (`first_signal: {step, target_s}`), as a comparison
#: table shows it: (summary column, header, is a share).
USER_TTFT_COLUMNS = (
    ("user_ttft_p50_s", "user TTFT p50 s", False),
    ("user_ttft_p90_s", "user TTFT p90 s", False),
    ("user_ttft_hit_rate", "user TTFT hit", True),
)


def shown_user_ttft(summary: pd.DataFrame) -> list[tuple[str, str, bool]]:
    """The user TTFT columns a comparison table shows: those the run measured (a scenario that
    names no step has them all NaN, and the table stays as it was)."""
    return [c for c in USER_TTFT_COLUMNS if c[0] in summary and summary[c[0]].notna().any()]


def overlaps(a: pd.Series, b: pd.Series) -> bool:
    """Whether two rows' hit-rate intervals overlap (the difference is within noise)."""
    return bool(a["hit_rate_lo"] <= b["hit_rate_hi"] and b["hit_rate_lo"] <= a["hit_rate_hi"])


def read_policies(summary: pd.DataFrame, baseline: str = "wait") -> list[str]:
    """Sentences about one table of policies (a run, or one sweep point)."""
    rows = summary.reset_index(drop=True)
    best = rows.loc[rows["hit_rate"].idxmax()]
    lines = [
        f"{best['policy']} meets the deadline most often: {_ci(best)}, at "
        f"{_usd(best['cost_per_success_usd'])} per delivered answer "
        f"({_usd(best['cost_per_request_usd'])} per request)."
    ]
    ties = [r for _, r in rows.iterrows() if r["policy"] != best["policy"] and overlaps(r, best)]
    if ties:
        names = ", ".join(f"{r['policy']} ({_ci(r)})" for r in ties)
        lines.append(
            f"Within noise of {best['policy']} (95% intervals overlap): {names}; do not read "
            "their order as a ranking."
        )
    else:
        lines.append(
            f"Every other policy's interval lies below {best['policy']}'s: the lead is not noise."
        )
    succeeded = rows[rows["cost_per_success_usd"].notna()]
    if len(succeeded):
        cheap = succeeded.loc[succeeded["cost_per_success_usd"].idxmin()]
        lines.append(
            f"Cheapest per delivered answer: {cheap['policy']} at "
            f"{_usd(cheap['cost_per_success_usd'])} (hit rate {_ci(cheap)})."
        )
    front = pareto_frontier(
        rows["cost_per_success_usd"].to_numpy(dtype=float), rows["hit_rate"].to_numpy(dtype=float)
    )
    if len(front):
        names = ", ".join(str(rows.loc[i, "policy"]) for i in front)
        lines.append(
            f"On the Pareto frontier (no other policy is both more reliable and cheaper per "
            f"success): {names}."
        )
    base = rows[rows["policy"] == baseline]
    if len(base):
        b = base.iloc[0]
        for _, r in rows.iterrows():
            if r["policy"] == baseline or pd.isna(b["cost_per_request_usd"]):
                continue
            gain = (r["hit_rate"] - b["hit_rate"]) * 100
            extra = r["cost_per_request_usd"] / b["cost_per_request_usd"] - 1
            noise = " (within noise)" if overlaps(r, b) else ""
            lines.append(
                f"{r['policy']} vs {baseline}: {gain:+.1f} points of hit rate{noise} for "
                f"{extra:+.0%} cost per request."
            )
    for _, r in rows.iterrows():
        if r["hit_rate"] < 0.5:
            lines.append(
                f"Warning: {r['policy']} fails most runs ({_ci(r)}); its latency percentiles "
                "sit at the deadline and its cost per success is what each rare answer cost."
            )
        limited = r.get("rate_limited_per_request", 0.0)
        if pd.notna(limited) and limited > RATE_LIMIT_NOTE:
            lines.append(f"{r['policy']} met {limited:.2f} rate-limited calls (429s) per request.")
    return lines


def read_sweep(aggregate: pd.DataFrame, keys: list[str]) -> list[str]:
    """Sentences about a sweep: who wins at each point of the first swept key, and where the
    winners change; then the whole-sweep Pareto frontier."""
    x = keys[0]
    lines = []
    for value, part in aggregate.groupby(keys, sort=False):
        label = ", ".join(
            f"{k}={v}"
            for k, v in zip(keys, value if isinstance(value, tuple) else (value,), strict=True)
        )
        best = part.loc[part["hit_rate"].idxmax()]
        ties = [
            r["policy"]
            for _, r in part.iterrows()
            if r["policy"] != best["policy"] and overlaps(r, best)
        ]
        tie_text = f"; within noise: {', '.join(ties)}" if ties else "; clear of the others"
        lines.append(
            f"At {label}: {best['policy']} leads with {_ci(best)} at "
            f"{_usd(best['cost_per_success_usd'])} per success{tie_text}."
        )
    for policy, part in aggregate.groupby("policy", sort=False):
        first, last = part.iloc[0], part.iloc[-1]
        if len(part) > 1 and not overlaps(first, last):
            lines.append(
                f"{policy} moves from {_pct(first['hit_rate'])} at {x}={first[x]} to "
                f"{_pct(last['hit_rate'])} at {x}={last[x]}: a real change, not noise."
            )
    return lines


def pareto_frontier(cost: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both (cheaper per success and a higher hit
    rate), sorted by cost: the Pareto frontier."""
    finite = np.flatnonzero(np.isfinite(cost) & np.isfinite(hit))
    order = finite[np.lexsort((-hit[finite], cost[finite]))]
    frontier, best = [], -np.inf
    for i in order:
        if hit[i] > best:
            frontier.append(i)
            best = hit[i]
    return np.array(frontier, dtype=int)
