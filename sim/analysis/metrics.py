"""Records to tables, tables to the summary: every metric's name, unit and definition live here.

Units: seconds (`_s`), US dollars (`_usd`), tokens, counts. A *request* is a unique customer
request; a *run* is one send of it through the workflow (customers may re-send failed ones).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import pandas as pd

from sim.analysis.analytic import wilson_interval
from sim.analysis.user_signal import USER_TTFT, user_ttft_row
from sim.model.config import FirstSignalSpec
from sim.model.rows import (
    FAIL_DEADLINE,
    OUTCOME_CANCELLED,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TIMEOUT,
    OUTCOME_TRUNCATED,
    Records,
)
from sim.policy.actions import action_counts
from sim.policy.deadlines import BUDGETS, BY_DEADLINE

CALL_COLUMNS = (
    "policy", "request_id", "resend", "step", "attempt", "provider", "model", "start_s",
    "queue_s", "ttft_s", "end_s", "outcome", "input_tokens", "output_tokens", "cost_usd",
    "retry_after_s", "quota_tokens", "sdk_retry", "valid", "ended_by", "orphan", "tokens_streamed",
    "iteration",
)  # fmt: skip
REQUEST_COLUMNS = (
    "policy", "request_id", "resend", "arrival_s", "latency_s", "ok", "cost_usd", "tokens",
    "calls", "end_s", "fail_reason", "fail_step", "valid", "quality", "valid_hit", "draft_kept",
    "draft_upgraded", "first_signal_s", "refused_retries", "refused_starts", "user_ttft_s",
)  # fmt: skip

#: Seconds of the rolling window a per-minute quota is compared with.
MINUTE_S = 60.0

#: Summary columns with their unit and meaning (the docs table is generated from this).
SUMMARY_METRICS: dict[str, tuple[str, str]] = {
    "policy": ("", "policy name from the scenario"),
    "requests": ("count", "unique customer requests"),
    "runs": ("count", "workflow runs: requests plus customer re-sends of failed ones"),
    "hit_rate": (
        "fraction",
        "runs that returned every required step validly within deadline_s (as far as the steps' "
        "checks tell: see valid_hit_rate)",
    ),
    "hit_rate_lo": ("fraction", "lower end of the 95% Wilson interval of hit_rate"),
    "hit_rate_hi": ("fraction", "upper end of the 95% Wilson interval of hit_rate"),
    "p50_s": (
        "s",
        "median time to a delivered answer over runs; a failed run (early or late) counts at "
        "deadline_s",
    ),
    "p95_s": ("s", "95th percentile of the same"),
    "p99_s": ("s", "99th percentile of the same"),
    "mean_s": ("s", "mean of the same"),
    "std_s": ("s", "standard deviation of the same (population, ddof=0)"),
    "cost_per_request_usd": ("USD", "billed cost of all calls / requests (re-sends included)"),
    "cost_per_success_usd": ("USD", "billed cost of all calls / successful runs"),
    "tokens_per_request": ("tokens", "billed input + output tokens / requests"),
    "calls_per_request": ("calls", "calls sent (429s included) / requests"),
    "customer_success_rate": ("fraction", "requests with at least one successful run"),
    "retry_amplification": ("ratio", "runs / requests: how much customer re-sends add"),
    "extra_attempts_per_request": ("calls", "calls beyond each step's first attempt / requests"),
    "timeouts_per_request": ("calls", "calls cut at their cutoff or timeout / requests"),
    "cancelled_per_request": ("calls", "calls cancelled (race losers, deadline) / requests"),
    "rate_limited_per_request": ("calls", "calls refused with a 429 / requests"),
    "sdk_retries_per_request": (
        "calls",
        "calls made by a provider's SDK retrying on its own (sdk.retries), below the policy / "
        "requests; included in calls_per_request",
    ),
    "wasted_cost_share": ("fraction", "share of the cost billed for calls that did not answer ok"),
    "quality_mean": (
        "score",
        "mean over successful runs of their `quality`: the mean `quality` of the models that "
        "answered each step, 0 if a required answer was invalid",
    ),
    "valid_hit_rate": (
        "fraction",
        "runs on time with every required answer valid and quality >= quality_floor, over runs",
    ),
    "invalid_delivered_rate": (
        "fraction",
        "runs on time whose answer was invalid (a validator let junk through), over runs",
    ),
    "truncated_per_request": ("calls", "answers cut at the step's max_tokens / requests"),
    "draft_kept": ("steps", "draft race steps answered by the draft model / requests"),
    "draft_upgraded": (
        "steps",
        "draft race steps whose draft was replaced by the primary's answer / requests",
    ),
    "calls_per_success": ("calls", "calls sent (429s included) / successful runs"),
    "goodput_per_s": (
        "runs/s",
        "successful runs / seconds from the first arrival to the last run's end",
    ),
    "hedge_rate": (
        "ratio",
        "extra policy attempts (hedges, race extras, retries; not SDK retries) / primary calls",
    ),
    "peak_tpm_share": (
        "fraction",
        "highest token use admitted in any 60 s window over the TPM quota, any provider or "
        "model quota (NaN without a TPM quota); above 1 when a full bucket is spent at once",
    ),
    "shed_requests": ("runs", "runs shed at arrival by the policy's controls.shed"),
    "breaker_open_s": ("s", "seconds any provider's breaker was open, summed over providers"),
    "first_signal_p50_s": (
        "s",
        "median over runs of the time from arrival to the first token of the first answer "
        "accepted (the first step's, in a chain); a run without one counts at deadline_s",
    ),
    "first_signal_p99_s": ("s", "99th percentile of the same"),
    "first_signal_hit_rate": (
        "fraction",
        "runs whose first signal came within the scenario's first_signal_s (NaN without one)",
    ),
    "user_ttft_p50_s": (
        "s",
        "median over runs of the time from arrival to the first token of the answer of the step "
        "first_signal.step names (the one the person sees stream); a run whose step delivered "
        "none counts at its latency_s (deadline_s when it failed); NaN without first_signal",
    ),
    "user_ttft_p90_s": ("s", "90th percentile of the same"),
    "user_ttft_p99_s": ("s", "99th percentile of the same"),
    "user_ttft_hit_rate": (
        "fraction",
        "runs whose named step's first token came within first_signal.target_s (a run whose "
        "step delivered no answer misses); NaN without a target",
    ),
    "breach_queue": (
        "fraction",
        "runs in which a call waited past its step's queue_budget_s for a slot and was dropped",
    ),
    "breach_attempt": (
        "fraction",
        "runs in which an attempt was cut at its attempt budget (the policy's cutoff or "
        "timeout_s, or the step's attempt_budget_s)",
    ),
    "breach_step": (
        "fraction",
        "runs in which an attempt or action was cut when its step's budget_s ran out",
    ),
    "breach_deadline": (
        "fraction",
        "runs that ran out of their deadline: still going at it, or an attempt or action cut at "
        "the deadline less workflow.reserve_s",
    ),
    "refused_retries": (
        "attempts",
        "attempts other than a step's first (policy retries, race attempts, hedges, SDK "
        "retries, tool re-submits) refused because the time left could not fund them",
    ),
    "refused_starts": (
        "attempts",
        "steps' first attempts refused because the time left could not fund them (picked up "
        "too late), including calls refused when granted a slot too late",
    ),
    "orphan_calls": (
        "calls",
        "calls still running after their run was given up (deadline, caller disconnect): work "
        "nobody waits for",
    ),
    "orphan_tokens": ("tokens", "billed input + output tokens of the orphan calls"),
    "orphan_cost_usd": ("USD", "billed cost of the orphan calls (in cost_per_request_usd too)"),
    "duplicate_actions": (
        "actions",
        "tool effects committed again for a request's step that already had one",
    ),
    "late_actions": ("actions", "tool effects committed after their run's deadline"),
    "unknown_actions": (
        "actions",
        "tool submits whose outcome the workflow never learnt (to be reconciled)",
    ),
}


#: Call attributes read into the calls table, with their types (dotted names reach the run).
_CALL_FIELDS = (
    ("run.index", "i8"), ("run.resend", "i8"), ("step", "O"), ("attempt", "i8"),
    ("provider", "O"), ("model", "O"), ("start", "f8"), ("queue", "f8"), ("ttft", "f8"),
    ("end", "f8"), ("outcome", "O"), ("billed_input", "i8"), ("billed_output", "i8"),
    ("cost", "f8"), ("retry_after", "f8"), ("quota_tokens", "i8"), ("sdk_retry", "i8"),
    ("valid", "?"), ("ended_by", "O"), ("run.given_up_at", "f8"), ("overhead", "f8"),
    ("tokens_streamed", "i8"), ("iteration", "i8"),
)  # fmt: skip
#: Run attributes read into the requests table, with their types.
_RUN_FIELDS = (
    ("index", "i8"), ("resend", "i8"), ("arrival", "f8"), ("end", "f8"), ("ok", "?"),
    ("deadline_at", "f8"), ("cost", "f8"), ("tokens", "i8"), ("calls", "i8"),
    ("fail_reason", "O"), ("fail_step", "O"), ("valid", "?"), ("quality", "f8"),
    ("valid_hit", "?"), ("drafts_kept", "i8"), ("drafts_upgraded", "i8"),
    ("first_signal", "f8"), ("refused_retries", "i8"), ("refused_starts", "i8"),
)  # fmt: skip


def _read(objects: list, fields: tuple[tuple[str, str], ...]) -> np.ndarray:
    """Every listed attribute of every object, in one pass and in C (a `map` of one
    `attrgetter` into `np.fromiter`), as a structured array with a field per attribute."""
    dtype = np.dtype(list(fields))
    return np.fromiter(map(attrgetter(*dtype.names), objects), dtype, len(objects))


def _strings(values: np.ndarray, order: np.ndarray | None = None) -> pd.Series:
    """A string column from few distinct values: factorized, then built by taking from the
    distinct values (much faster than converting every row), reordered by `order` if given."""
    codes, uniques = pd.factorize(values)
    if order is not None:
        codes = codes[order]
    return pd.Series(pd.array(uniques, dtype="string").take(codes))


def _constant(value: str, n: int) -> pd.Series:
    """A string column holding `value` in every one of `n` rows."""
    return pd.Series(pd.array([value], dtype="string").take(np.zeros(n, np.intp)))


def calls_frame(records: Records) -> pd.DataFrame:
    """One row per call (units: seconds, tokens billed, USD), sorted by request, re-send, start,
    step and attempt."""
    calls = records.calls
    n = len(calls)
    c = _read(calls, _CALL_FIELDS)
    request_id, resend, attempt, start = c["run.index"], c["run.resend"], c["attempt"], c["start"]
    # the stable sort of the records by (request_id, resend, start_s, step, attempt, iteration), as
    # sort_values does it (np.lexsort on the numbers and the steps' ranks; ties stay in the
    # records' order), done once before the columns are built
    step_codes, step_names = pd.factorize(c["step"])
    rank = np.argsort(np.argsort(np.asarray(step_names, dtype=object), kind="stable"))
    order = np.lexsort((c["iteration"], attempt, rank[step_codes], start, resend, request_id))
    end = c["end"]
    frame = pd.DataFrame(
        {
            "policy": _constant(records.policy, n),
            "request_id": request_id[order],
            "resend": resend[order],
            "step": pd.Series(pd.array(step_names, dtype="string").take(step_codes[order])),
            "attempt": attempt[order],
            "provider": _strings(c["provider"], order),
            "model": _strings(c["model"], order),
            "start_s": start[order],
            "queue_s": c["queue"][order],
            "ttft_s": c["ttft"][order],
            "end_s": end[order],
            "outcome": _strings(c["outcome"], order),
            "input_tokens": c["billed_input"][order],
            "output_tokens": c["billed_output"][order],
            "cost_usd": c["cost"][order],
            "retry_after_s": c["retry_after"][order],
            "quota_tokens": c["quota_tokens"][order],
            "sdk_retry": c["sdk_retry"][order],
            "valid": c["valid"][order],
            "ended_by": _strings(c["ended_by"], order),
            "orphan": (end > c["run.given_up_at"])[order],
            "tokens_streamed": c["tokens_streamed"][order],
            "iteration": c["iteration"][order],
        },
        copy=False,  # every column is a fresh array already
    )
    overhead = c["overhead"]
    if overhead.any():  # the provider's `overhead_s` is on: the client's part of each call
        frame["overhead_s"] = overhead[order]
    return frame


def requests_frame(records: Records) -> pd.DataFrame:
    """One row per run (units: seconds from the simulation start, USD, billed tokens).

    `latency_s` is the time to a delivered answer: a run that failed, early or at its deadline,
    delivered none and counts at the deadline, so no failure ever looks fast. `end_s`,
    `fail_reason` and `fail_step` keep what really happened."""
    runs = records.runs
    n = len(runs)
    r = _read(runs, _RUN_FIELDS)
    request_id, resend = r["index"], r["resend"]
    order = np.lexsort((resend, request_id))  # in (request, re-send) order, ties kept
    arrival = r["arrival"]
    end = r["end"]
    ok = r["ok"]
    latency = np.where(ok, end, r["deadline_at"]) - arrival
    return pd.DataFrame(
        {
            "policy": _constant(records.policy, n),
            "request_id": request_id[order],
            "resend": resend[order],
            "arrival_s": arrival[order],
            "latency_s": latency[order],
            "ok": ok[order],
            "cost_usd": r["cost"][order],
            "tokens": r["tokens"][order],
            "calls": r["calls"][order],
            "end_s": end[order],
            "fail_reason": _strings(r["fail_reason"], order),
            "fail_step": _strings(r["fail_step"], order),
            "valid": r["valid"][order],
            "quality": r["quality"][order],
            "valid_hit": r["valid_hit"][order],
            "draft_kept": r["drafts_kept"][order],
            "draft_upgraded": r["drafts_upgraded"][order],
            "first_signal_s": r["first_signal"][order],
            "refused_retries": r["refused_retries"][order],
            "refused_starts": r["refused_starts"][order],
            USER_TTFT: np.full(n, np.nan),  # filled from the calls: `fill_user_first_token`
        },
        copy=False,
    )


def summarize(
    requests: pd.DataFrame,
    calls: pd.DataFrame,
    quality: Mapping[str, float] | None = None,
    *,
    tpm: Mapping[tuple[str, str | None], int] | None = None,
    breaker_open: Mapping[str, float] | None = None,
    actions: pd.DataFrame | None = None,
    first_signal_s: float | None = None,
    first_signal: FirstSignalSpec | None = None,
) -> pd.DataFrame:
    """One row per policy with every metric of `SUMMARY_METRICS`, in the policies' order.

    `quality` maps model names to their quality score (NaN `quality_mean` without it); `tpm`
    maps (provider, None) and (provider, model) to TPM quotas (for `peak_tpm_share`);
    `breaker_open` maps policies to their breakers' open seconds (NaN without it); `actions` is
    the tool steps' actions table (none: no tool steps); `first_signal_s` the scenario's
    first-signal target (NaN `first_signal_hit_rate` without it); `first_signal` the scenario's
    named step and target (`sim.analysis.user_signal`; NaN `user_ttft_*` without it)."""
    rows = []
    for policy in pd.unique(requests["policy"]):
        runs, its_calls = requests[requests["policy"] == policy], calls[calls["policy"] == policy]
        its_actions = None if actions is None else actions[actions["policy"] == policy]
        row = _summary_row(runs, its_calls, str(policy))
        if _has_answers(runs):  # per-run quality, validity included (from the engine)
            delivered = runs.loc[runs["ok"], "quality"]
            row["quality_mean"] = float(delivered.mean()) if len(delivered) else math.nan
        else:
            row["quality_mean"] = _quality_mean(runs, its_calls, quality)
        row.update(_answer_metrics(runs, its_calls))
        row["peak_tpm_share"] = peak_tpm_share(its_calls, tpm or {})
        row["breaker_open_s"] = (
            float(breaker_open.get(str(policy), 0.0)) if breaker_open is not None else np.nan
        )
        row |= _deadline_row(runs, its_calls, its_actions, first_signal_s)
        user = runs[USER_TTFT].to_numpy(float) if USER_TTFT in runs else np.full(len(runs), np.nan)
        row |= user_ttft_row(user, runs["latency_s"].to_numpy(float), first_signal)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(SUMMARY_METRICS))


def _quality_mean(
    runs: pd.DataFrame, calls: pd.DataFrame, quality: Mapping[str, float] | None
) -> float:
    """Mean over successful runs of the mean quality of the models that answered their steps."""
    if quality is None:
        return math.nan
    answers = calls[calls["outcome"] == OUTCOME_OK]
    scores = answers["model"].astype(str).map(dict(quality)).astype(float)
    per_run = scores.groupby([answers["request_id"], answers["resend"]]).mean()
    good = runs.loc[runs["ok"], ["request_id", "resend"]]
    index = pd.MultiIndex.from_frame(good)
    return float(per_run.reindex(index).mean()) if len(good) else math.nan


#: Requests columns and summary metrics about answers (validity, quality, drafts).
ANSWER_COLUMNS = ("valid", "quality", "valid_hit", "draft_kept", "draft_upgraded")
ANSWER_METRICS = (
    "valid_hit_rate",
    "invalid_delivered_rate",
    "truncated_per_request",
    "draft_kept",
    "draft_upgraded",
)


def _has_answers(runs: pd.DataFrame) -> bool:
    """True if the runs carry the engine's answer columns (valid, quality, valid_hit, ...)."""
    return all(c in runs for c in ANSWER_COLUMNS) and runs["valid_hit"].dtype == bool


def _answer_metrics(runs: pd.DataFrame, calls: pd.DataFrame) -> dict[str, float]:
    """Valid hits, junk delivered, truncations and draft races (NaN without the columns)."""
    n_runs, n_requests = len(runs), max(1, int(runs["request_id"].nunique()))
    if not _has_answers(runs) or not n_runs:
        return dict.fromkeys(ANSWER_METRICS, math.nan)
    return {
        "valid_hit_rate": float(runs["valid_hit"].mean()),
        "invalid_delivered_rate": float((runs["ok"] & ~runs["valid"]).mean()),
        "truncated_per_request": float((calls["outcome"] == OUTCOME_TRUNCATED).sum()) / n_requests,
        "draft_kept": float(runs["draft_kept"].sum()) / n_requests,
        "draft_upgraded": float(runs["draft_upgraded"].sum()) / n_requests,
    }


def _deadline_row(
    runs: pd.DataFrame,
    calls: pd.DataFrame,
    actions: pd.DataFrame | None,
    first_signal_s: float | None,
) -> dict[str, object]:
    """The deadline metrics of one policy: first signal, budget breaches (share of runs),
    refused attempts, orphan work and tool actions (counts)."""
    row: dict[str, object] = {}
    n_runs = len(runs)
    if "first_signal_s" in runs:
        signal = runs["first_signal_s"].to_numpy(float)
        counted = np.where(np.isnan(signal), runs["latency_s"].to_numpy(float), signal)
        p50, p99 = np.percentile(counted, [50, 99]) if n_runs else (np.nan, np.nan)
        row["first_signal_p50_s"], row["first_signal_p99_s"] = float(p50), float(p99)
        met = (~np.isnan(signal)) & (signal <= first_signal_s) if first_signal_s else None
        row["first_signal_hit_rate"] = float(met.mean()) if met is not None and n_runs else np.nan
    for budget, breached in breach_flags(runs, calls, actions).items():
        row[f"breach_{budget}"] = float(breached.mean()) if n_runs else np.nan
    for name in ("refused_retries", "refused_starts"):
        row[name] = int(runs[name].sum()) if name in runs else 0
    orphan = calls["orphan"].to_numpy(bool) if "orphan" in calls else np.zeros(len(calls), bool)
    row["orphan_calls"] = int(orphan.sum())
    row["orphan_tokens"] = int((calls["input_tokens"] + calls["output_tokens"])[orphan].sum())
    row["orphan_cost_usd"] = float(calls.loc[orphan, "cost_usd"].sum())
    if actions is not None:
        row |= action_counts(actions)
    else:
        row |= {"duplicate_actions": 0, "late_actions": 0, "unknown_actions": 0}
    return row


def breach_flags(
    runs: pd.DataFrame, calls: pd.DataFrame, actions: pd.DataFrame | None = None
) -> dict[str, np.ndarray]:
    """Per budget of `BUDGETS`, which runs had a call or action cut by it (the deadline's also
    counts runs that failed at the deadline), aligned with `runs`."""
    parts = [calls] if actions is None or not len(actions) else [calls, actions]
    # a run is (request_id, resend); numbered request_id * span + resend, matched with np.isin
    # (pandas MultiIndex matching cost more than the simulation on small runs)
    span = 1 + max([int(frame["resend"].max()) for frame in [runs, *parts] if len(frame)] or [0])
    run_codes = _run_codes(runs, span)
    ended_codes = np.concatenate([_run_codes(frame, span) for frame in parts])
    ended_by = np.concatenate(
        [
            frame["ended_by"].to_numpy(object) if "ended_by" in frame else np.full(len(frame), "")
            for frame in parts
        ]
    )
    flags = {}
    for budget in BUDGETS:
        breached = np.isin(run_codes, ended_codes[ended_by == budget])
        if budget == BY_DEADLINE and "fail_reason" in runs:
            breached |= (runs["fail_reason"] == FAIL_DEADLINE).to_numpy(bool)
        flags[budget] = breached
    return flags


def _run_codes(frame: pd.DataFrame, span: int) -> np.ndarray:
    """One integer per row naming its run: request_id * span + resend (span > every resend)."""
    return frame["request_id"].to_numpy(np.int64) * span + frame["resend"].to_numpy(np.int64)


def _summary_row(runs: pd.DataFrame, calls: pd.DataFrame, policy: str) -> dict[str, object]:
    outcome = calls["outcome"]
    sdk_retries = calls["sdk_retry"] > 0 if "sdk_retry" in calls else outcome.isna()
    successes = int(runs["ok"].sum())
    return count_row(
        policy,
        RunCounts(
            requests=int(runs["request_id"].nunique()),
            runs=len(runs),
            successes=successes,
            calls=len(calls),
            first_attempts=int(((calls["attempt"] == 0) & ~sdk_retries).sum()),
            sdk_retries=int(sdk_retries.sum()),
            timeouts=int((outcome == OUTCOME_TIMEOUT).sum()),
            cancelled=int((outcome == OUTCOME_CANCELLED).sum()),
            rate_limited=int((outcome == OUTCOME_RATE_LIMITED).sum()),
            cost=float(calls["cost_usd"].sum()),
            wasted=float(calls.loc[outcome != OUTCOME_OK, "cost_usd"].sum()),
            tokens=float((calls["input_tokens"] + calls["output_tokens"]).sum()),
            customer_success_rate=float(runs.groupby("request_id")["ok"].any().mean()),
            goodput_per_s=_goodput(runs, successes),
            shed=int((runs["fail_reason"] == "shed").sum()) if "fail_reason" in runs else 0,
        ),
        runs["latency_s"].to_numpy(dtype=float),
    )


@dataclass(frozen=True)
class RunCounts:
    """The counts and sums one policy's run-and-call metrics are made of (from whole tables, or
    tallied chunk by chunk in `sim.engine.tally`); costs in USD, tokens billed."""

    requests: int
    runs: int
    successes: int
    calls: int
    first_attempts: int
    sdk_retries: int
    timeouts: int
    cancelled: int
    rate_limited: int
    cost: float
    wasted: float
    tokens: float
    customer_success_rate: float
    goodput_per_s: float
    shed: int


def count_row(policy: str, c: RunCounts, latency: np.ndarray) -> dict[str, object]:
    """The summary's run, latency, cost and call metrics from `c` and every run's latency_s:
    one set of formulas for the whole tables and for the tally."""
    n_requests, n_runs, successes = c.requests, c.runs, c.successes
    lo, hi = wilson_interval(successes, n_runs)
    p50, p95, p99 = np.percentile(latency, [50, 95, 99]) if n_runs else (np.nan,) * 3
    return {
        "policy": policy,
        "requests": n_requests,
        "runs": n_runs,
        "hit_rate": successes / n_runs if n_runs else np.nan,
        "hit_rate_lo": lo,
        "hit_rate_hi": hi,
        "p50_s": float(p50),
        "p95_s": float(p95),
        "p99_s": float(p99),
        "mean_s": float(latency.mean()) if n_runs else np.nan,
        "std_s": float(latency.std()) if n_runs else np.nan,
        "cost_per_request_usd": c.cost / n_requests,
        "cost_per_success_usd": c.cost / successes if successes else np.nan,
        "tokens_per_request": c.tokens / n_requests,
        "calls_per_request": c.calls / n_requests,
        "customer_success_rate": c.customer_success_rate,
        "retry_amplification": n_runs / n_requests,
        "extra_attempts_per_request": (c.calls - c.first_attempts) / n_requests,
        "timeouts_per_request": float(c.timeouts) / n_requests,
        "cancelled_per_request": float(c.cancelled) / n_requests,
        "rate_limited_per_request": float(c.rate_limited) / n_requests,
        "sdk_retries_per_request": float(c.sdk_retries) / n_requests,
        "wasted_cost_share": c.wasted / c.cost if c.cost > 0 else 0.0,
        "calls_per_success": c.calls / successes if successes else np.nan,
        "goodput_per_s": c.goodput_per_s,
        "hedge_rate": (c.calls - c.first_attempts - c.sdk_retries) / c.first_attempts
        if c.first_attempts
        else np.nan,
        "shed_requests": c.shed,
    }


def _goodput(runs: pd.DataFrame, successes: int) -> float:
    """Successful runs per second from the first arrival to the last run's end."""
    if not len(runs):
        return np.nan
    span = float(runs["end_s"].max()) - float(runs["arrival_s"].min())
    return successes / span if span > 0 else np.nan


def peak_tpm_share(calls: pd.DataFrame, tpm: Mapping[tuple[str, str | None], int]) -> float:
    """Highest quota tokens admitted within any 60 s window (by call start) over the quota, over
    every (provider, model-or-None) quota in `tpm`; NaN when there is none."""
    best = np.nan
    for (provider, model), limit in tpm.items():
        mask = calls["provider"] == provider
        if model is not None:
            mask &= calls["model"] == model
        part = calls.loc[mask]
        peak = peak_window_sum(
            part["start_s"].to_numpy(float), part["quota_tokens"].to_numpy(float), MINUTE_S
        )
        best = np.nanmax([best, peak / limit])
    return float(best)


def peak_window_sum(times: np.ndarray, amounts: np.ndarray, window: float) -> float:
    """The largest sum of `amounts` over the events in any half-open window (t - window, t]."""
    if len(times) == 0:
        return 0.0
    order = np.argsort(times, kind="stable")
    t, cumulative = times[order], np.cumsum(amounts[order])
    first = np.searchsorted(t, t - window, side="right")  # first event inside each window
    before = np.where(first > 0, cumulative[np.maximum(first - 1, 0)], 0.0)
    return float(np.max(cumulative - before))
