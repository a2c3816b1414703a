"""The vectorized engine's tables: its columns as the requests and calls tables of the metrics.

`tables` turns one policy's per-request columns and `CallArrays` (`sim.engine.vectorized`) into
the two DataFrames `sim.analysis.metrics` builds from the event engine's records: the same
columns, dtypes and row order (calls by request, start, step name, attempt), with the
per-request figures the event engine keeps on its `Run` objects (first signal, delivered
quality) recomputed from the calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.analysis.metrics import CALL_COLUMNS, REQUEST_COLUMNS
from sim.analysis.user_signal import fill_user_first_token
from sim.engine.vector_calls import O_OK, CallArrays
from sim.model.rows import OUTCOMES
from sim.plan import Plan
from sim.policy.deadlines import ENDED_BY


@dataclass
class VectorTables:
    """The requests and calls tables of one policy, as `sim.analysis.metrics` builds them."""

    requests: pd.DataFrame
    calls: pd.DataFrame


def tables(plan: Plan, policy: str, runs: dict[str, np.ndarray], calls: CallArrays) -> VectorTables:
    """The requests and calls tables of `sim.analysis.metrics` (same columns, dtypes and row
    order)."""
    call_table = _call_table(plan, policy, calls)
    request_table = _request_table(plan, policy, runs, calls)
    fill_user_first_token(request_table, call_table, plan.signal_step)
    return VectorTables(request_table, call_table)


def _strings(values: np.ndarray) -> pd.Series:
    return pd.Series(values, dtype="string")


def _named(names: Sequence[str], codes: np.ndarray) -> pd.Series:
    """`_strings(names[codes])`, taken from the few names (no per-row string objects)."""
    return pd.Series(pd.array(np.asarray(names, dtype=object), dtype="string").take(codes))


def _call_table(plan: Plan, policy: str, calls: CallArrays) -> pd.DataFrame:
    """The calls table, in its row order (`_call_order`)."""
    ids = np.asarray([s.id for s in plan.workflow.steps], dtype=object)
    by_name = np.argsort(np.argsort(ids.astype(str)))  # step order as strings sort
    order, ordered = _call_order(calls, by_name)
    count = len(order)

    request = ordered["request"]
    call_table = pd.DataFrame(
        {
            "policy": _named([policy], np.zeros(count, dtype=np.intp)),
            "request_id": request,
            "resend": np.zeros(count, dtype=np.int64),
            "step": _named(ids, ordered["step"]),
            "attempt": ordered["attempt"].astype(np.int64),
            "provider": _named(list(plan.providers), calls.provider[order]),
            "model": _named(list(plan.models), calls.model[order]),
            "start_s": ordered["start"],
            "queue_s": np.zeros(count),
            "ttft_s": calls.ttft[order],
            "end_s": calls.end[order],
            "outcome": _named(OUTCOMES, calls.outcome[order]),
            "input_tokens": calls.billed_input[order].astype(np.int64, copy=False),
            "output_tokens": calls.billed_output[order].astype(np.int64, copy=False),
            "cost_usd": calls.cost[order],
            "retry_after_s": np.full(count, math.nan),
            "quota_tokens": calls.quota_tokens[order].astype(np.int64, copy=False),
            "sdk_retry": (
                np.zeros(count, dtype=np.int64)
                if calls.sdk_retry is None
                else calls.sdk_retry[order].astype(np.int64, copy=False)
            ),
            "valid": np.ones(count, dtype=bool),  # no validator: junk is caught, never delivered
            "ended_by": _named(ENDED_BY, calls.ended_by[order]),
            "orphan": np.zeros(count, dtype=bool),  # the deadline propagates (whitelisted)
            "tokens_streamed": calls.tokens_streamed[order].astype(np.int64, copy=False),
            "iteration": np.zeros(count, dtype=np.int64),  # no workflow keys here (refused)
        },
        columns=list(CALL_COLUMNS),
        copy=False,  # every column is a fresh array: no copy, no consolidating copy either
    )
    if calls.overhead is not None and calls.overhead.any():  # as `calls_frame`: only then
        call_table["overhead_s"] = calls.overhead[order]
    return call_table


def _request_table(
    plan: Plan, policy: str, runs: dict[str, np.ndarray], calls: CallArrays
) -> pd.DataFrame:
    """The requests table: one row per request, in request order."""
    n = len(runs["arrival"])
    per_request = np.bincount(calls.request, minlength=n)
    cost = np.bincount(calls.request, weights=calls.cost, minlength=n)
    tokens = np.bincount(
        calls.request, weights=calls.billed_input + calls.billed_output, minlength=n
    )
    ok = runs["ok"]
    request_table = pd.DataFrame(
        {
            "policy": _named([policy], np.zeros(n, dtype=np.intp)),
            "request_id": np.arange(n, dtype=np.int64),
            "resend": np.zeros(n, dtype=np.int64),
            "arrival_s": runs["arrival"].copy(),
            "latency_s": np.where(ok, runs["end"], runs["deadline"]) - runs["arrival"],
            "ok": ok.astype(bool),
            "cost_usd": cost,
            "tokens": np.rint(tokens).astype(np.int64),
            "calls": per_request.astype(np.int64),
            "end_s": runs["end"].copy(),
            "fail_reason": _strings(runs["fail_reason"]),
            "fail_step": _strings(runs["fail_step"]),
            "valid": ok.astype(bool),
            "quality": _delivered_quality(plan, calls, ok, n),
            "valid_hit": ok.astype(bool),  # no validator and quality_floor 0 (whitelisted)
            "draft_kept": np.zeros(n, dtype=np.int64),
            "draft_upgraded": np.zeros(n, dtype=np.int64),
            "first_signal_s": _first_signal(calls, runs["arrival"], n),
            "refused_retries": np.zeros(n, dtype=np.int64),  # no admission (whitelisted)
            "refused_starts": np.zeros(n, dtype=np.int64),
            "user_ttft_s": np.full(n, np.nan),  # filled by `tables` from the calls table
        },
        columns=list(REQUEST_COLUMNS),
        copy=False,  # fresh arrays, as above
    )
    return request_table


def _call_order(calls: CallArrays, by_name: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The calls table's row order: by request, start, step name (`by_name`: each step's rank),
    attempt (then SDK retry); with the request, start, step and attempt columns in that order.
    The calls are logged step by step, each slot's rows in request order, so a stable sort by
    request alone usually gives it (a run's calls in time order); checked, else the full sort.
    Every (request, step, attempt, SDK retry) is one call, so the order is the same either way
    (and the event engine's, whose ties keep its records' order: SDK retries in turn)."""
    order = np.argsort(calls.request, kind="stable")
    names = ("request", "start", "step", "attempt")
    cols = {name: getattr(calls, name)[order] for name in names}
    request, start, attempt = cols["request"], cols["start"], cols["attempt"]
    rank = by_name.astype(np.int32)[cols["step"]]
    same_run = request[1:] == request[:-1]
    later = start[1:] > start[:-1]
    tied = start[1:] == start[:-1]
    after = (rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (attempt[1:] > attempt[:-1]))
    sdk = calls.sdk_retry
    if sdk is not None:
        retry = sdk[order]
        same = (rank[1:] == rank[:-1]) & (attempt[1:] == attempt[:-1])
        after |= same & (retry[1:] > retry[:-1])
    if np.all(~same_run | later | (tied & after)):
        return order, cols
    keys = (calls.attempt, by_name[calls.step], calls.start, calls.request)
    order = np.lexsort(keys if sdk is None else (sdk, *keys))
    return order, {name: getattr(calls, name)[order] for name in names}


def _first_signal(calls: CallArrays, arrival: np.ndarray, n: int) -> np.ndarray:
    """Per run, the event engine's `Run.first_signal`: from its arrival to the earliest first
    token of a call that answered ok (no call queues here); NaN without one."""
    answered = calls.outcome == O_OK
    request = calls.request[answered]
    first = np.full(n, np.inf)
    np.minimum.at(first, request, calls.start[answered] + calls.ttft[answered])
    return np.where(np.isfinite(first), first - arrival, np.nan)


def _delivered_quality(plan: Plan, calls: CallArrays, ok: np.ndarray, n: int) -> np.ndarray:
    """Per delivered run, the mean `quality` of the models whose answer each step kept (as the
    event engine's `Run.quality`: its last valid answer per step); NaN for a failed run."""
    quality = np.asarray([m.quality for m in plan.models.values()], dtype=float)
    answered = np.flatnonzero(calls.outcome == O_OK)
    steps = len(plan.workflow.steps)
    request, step = calls.request[answered], calls.step[answered]
    cell = step.astype(np.int64) * n + request  # (step, run)
    if not len(cell) or np.bincount(cell, minlength=steps * n).max() <= 1:
        # one valid answer per step and run at most (the usual case): it is the one kept; sum
        # per run in step order, as the sorted bincount below adds them
        kept = np.zeros((steps, n))
        kept[step, request] = quality[calls.model[answered]]
        total = np.zeros(n)
        for row in kept:
            total += row
        count = np.bincount(request, minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / np.maximum(count, 1), 1.0)
        return np.where(ok, mean, np.nan)
    # the answer a step kept is its valid call that ended last
    order = answered[
        np.lexsort((calls.end[answered], calls.step[answered], calls.request[answered]))
    ]
    keys = calls.request[order] * (len(plan.workflow.steps) + 1) + calls.step[order]
    last = np.r_[keys[1:] != keys[:-1], True] if len(keys) else np.zeros(0, dtype=bool)
    kept = order[last]
    total = np.bincount(calls.request[kept], weights=quality[calls.model[kept]], minlength=n)
    count = np.bincount(calls.request[kept], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), 1.0)
    return np.where(ok, mean, np.nan)
