"""Why a policy wins or loses: where its runs failed, and what each provider saw.

`breakdown` turns a run's requests and calls tables into one long table (breakdown.csv): per
policy, the top (fail_reason, fail_step) pairs with their share of runs, and per provider the
calls, 429s, timeouts, errors, mean busy slots against `concurrency` and the peak one-minute
tokens admitted against `tpm`. Pure tables in, table out: the CLI prints it, `tailsim explain`
recomputes it from result files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from sim.analysis.metrics import MINUTE_S, peak_window_sum
from sim.model.rows import OUTCOME_BROKEN, OUTCOME_ERROR, OUTCOME_RATE_LIMITED, OUTCOME_TIMEOUT
from sim.policy.deadlines import BY_IDLE, BY_TTFT

#: Failure rows kept per policy (the rest are summed into one `other` row).
TOP_FAILURES = 5

BREAKDOWN_COLUMNS = (
    "policy", "section", "provider", "fail_reason", "fail_step", "runs", "share_of_runs",
    "calls", "rate_limited", "timeouts", "errors", "busy_slots_mean", "concurrency",
    "busy_share", "peak_minute_tokens", "tpm", "peak_tpm_share", "first_token_cuts", "idle_cuts",
    "broken",
)  # fmt: skip


@dataclass(frozen=True)
class ProviderLimits:
    """What a provider allows: slots and tokens per minute (None = unlimited)."""

    concurrency: int
    tpm: int | None


def breakdown(
    requests: pd.DataFrame,
    calls: pd.DataFrame,
    limits: Mapping[str, ProviderLimits],
    top: int = TOP_FAILURES,
) -> pd.DataFrame:
    """The breakdown table of every policy, in the order the policies appear in `requests`.

    `section` is `failure` (one row per reason x step, share of all runs) or `provider` (one row
    per provider the scenario defines, even one the policy never called)."""
    rows: list[dict[str, object]] = []
    span = _span(requests, calls)
    for policy in pd.unique(requests["policy"]):
        runs = requests[requests["policy"] == policy]
        rows += _failure_rows(str(policy), runs, top)
        its_calls = calls[calls["policy"] == policy]
        for name, limit in limits.items():
            rows.append(_provider_row(str(policy), name, its_calls, limit, span))
    return pd.DataFrame(rows, columns=list(BREAKDOWN_COLUMNS))


def _span(requests: pd.DataFrame, calls: pd.DataFrame) -> float:
    """Simulated seconds from the first arrival to the last moment anything ended."""
    if requests.empty:
        return 0.0
    ends = [requests["end_s"].max()]
    if not calls.empty:
        ends.append(calls["end_s"].max())
    return float(max(ends) - requests["arrival_s"].min())


def _failure_rows(policy: str, runs: pd.DataFrame, top: int) -> list[dict[str, object]]:
    failed = runs[~runs["ok"].astype(bool)]
    if failed.empty:
        return []
    counts = (
        failed.groupby(["fail_reason", "fail_step"], dropna=False, sort=False)
        .size()
        .sort_values(ascending=False, kind="stable")
    )
    kept, rest = counts.iloc[:top], counts.iloc[top:]
    rows = [
        failure_row(policy, str(reason), str(step), int(n), len(runs))
        for (reason, step), n in kept.items()
    ]
    if len(rest):
        rows.append(failure_row(policy, "other", "", int(rest.sum()), len(runs)))
    return rows


def failure_row(policy: str, reason: str, step: str, n: int, total: int) -> dict[str, object]:
    """A `failure` row: `n` of `total` runs failed for `reason` at `step`."""
    return {
        "policy": policy,
        "section": "failure",
        "fail_reason": reason,
        "fail_step": step,
        "runs": n,
        "share_of_runs": n / total if total else math.nan,
    }


def _provider_row(
    policy: str, name: str, calls: pd.DataFrame, limit: ProviderLimits, span: float
) -> dict[str, object]:
    mine = calls[calls["provider"] == name]
    outcome = mine["outcome"]
    # a call holds its slot from the end of its queue wait to its end (0 for a 429 or a call
    # dropped while queued)
    held = (mine["end_s"] - mine["start_s"] - mine["queue_s"].fillna(0.0)).clip(lower=0.0)
    busy = float(held.sum()) / span if span > 0 else 0.0
    peak = peak_window_sum(
        mine["start_s"].to_numpy(float), mine["quota_tokens"].to_numpy(float), MINUTE_S
    )
    return provider_row(
        policy,
        name,
        limit,
        calls=len(mine),
        rate_limited=int((outcome == OUTCOME_RATE_LIMITED).sum()),
        timeouts=int((outcome == OUTCOME_TIMEOUT).sum()),
        errors=int((outcome == OUTCOME_ERROR).sum()),
        busy=busy,
        peak=peak,
        stream=stream_endings(mine, outcome),
    )


def stream_endings(calls: pd.DataFrame, outcome: pd.Series) -> tuple[int, int, int]:
    """Calls ended by watching their stream: (first-token cuts, idle cuts, broken streams); a
    calls table without `ended_by` (hand-made, or written before it) has no cuts."""
    ended_by = calls["ended_by"] if "ended_by" in calls else pd.Series("", index=calls.index)
    return (
        int((ended_by == BY_TTFT).sum()),
        int((ended_by == BY_IDLE).sum()),
        int((outcome == OUTCOME_BROKEN).sum()),
    )


def provider_row(
    policy: str,
    name: str,
    limit: ProviderLimits,
    *,
    calls: int,
    rate_limited: int,
    timeouts: int,
    errors: int,
    busy: float,
    peak: float,
    stream: tuple[int, int, int] = (0, 0, 0),
) -> dict[str, object]:
    """A `provider` row: its calls and failures, `busy` mean slots held, `peak` tokens admitted
    in any minute, each against the provider's limit, and the calls its stream cuts ended
    (`stream_endings`) (from whole tables or `sim.engine.tally`)."""
    return {
        "policy": policy,
        "section": "provider",
        "provider": name,
        "calls": calls,
        "rate_limited": rate_limited,
        "timeouts": timeouts,
        "errors": errors,
        "busy_slots_mean": busy,
        "concurrency": limit.concurrency,
        "busy_share": busy / limit.concurrency,
        "peak_minute_tokens": peak,
        "tpm": limit.tpm if limit.tpm is not None else math.nan,
        "peak_tpm_share": peak / limit.tpm if limit.tpm else math.nan,
        "first_token_cuts": stream[0],
        "idle_cuts": stream[1],
        "broken": stream[2],
    }


def provider_limits(scenario_providers: Mapping[str, object]) -> dict[str, ProviderLimits]:
    """Limits from the scenario's providers (ProviderSpec objects or their dumped dicts)."""
    limits = {}
    for name, spec in scenario_providers.items():
        get = spec.get if isinstance(spec, dict) else lambda key, s=spec: getattr(s, key, None)
        limits[name] = ProviderLimits(int(get("concurrency") or 1_000_000), get("tpm"))
    return limits
