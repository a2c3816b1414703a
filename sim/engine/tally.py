"""Summaries without records: the summary and breakdown of a policy, aggregated chunk by chunk.

A run too big to keep its requests and calls tables (`records: none`) feeds them here a chunk at
a time and drops them. A `PolicyTally` keeps counts and sums, two floats per run (latency and
first signal, so percentiles stay exact), two bits per request and the calls of the last minute
(for peak token windows): memory grows with requests by ~18 bytes, not with calls.
`summary_row` equals `sim.analysis.metrics.summarize`'s row on the whole tables and
`breakdown_table` equals
`sim.analysis.breakdown.breakdown` (floats up to summation order; tests hold them to it).

A chunk must hold every run of its requests and every call of those runs, and the calls of later
chunks must start at or after the `horizon` it is given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from sim.analysis.breakdown import (
    BREAKDOWN_COLUMNS,
    TOP_FAILURES,
    ProviderLimits,
    failure_row,
    provider_row,
    stream_endings,
)
from sim.analysis.metrics import (
    MINUTE_S,
    SUMMARY_METRICS,
    RunCounts,
    breach_flags,
    calls_frame,
    count_row,
    requests_frame,
)
from sim.analysis.user_signal import USER_TTFT, fill_user_first_token, user_ttft_row
from sim.engine.simulation import Simulation
from sim.model.config import FirstSignalSpec
from sim.model.rows import (
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TIMEOUT,
    OUTCOME_TRUNCATED,
    Action,
    Records,
)
from sim.policy.actions import action_counts, actions_frame
from sim.policy.deadlines import BUDGETS

#: Call outcomes counted per policy (summary) and per provider (breakdown).
_COUNTED_OUTCOMES = (
    OUTCOME_TIMEOUT,
    OUTCOME_CANCELLED,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TRUNCATED,
    OUTCOME_ERROR,
)


class PeakWindow:
    """The largest sum of amounts over events in any window (t - window, t], events given in
    chunks: a chunk's events may come in any order, but none before the previous `horizon`."""

    def __init__(self, window: float = MINUTE_S) -> None:
        self.window = window
        self.best = 0.0
        self.horizon = -math.inf
        self._times = np.empty(0)
        self._amounts = np.empty(0)

    def add(self, times: np.ndarray, amounts: np.ndarray, horizon: float = math.inf) -> None:
        """Take a chunk of events; no later chunk will hold an event before `horizon`."""
        times, amounts = np.asarray(times, float), np.asarray(amounts, float)
        if len(times) and float(times.min()) < self.horizon:
            raise ValueError("an event came before the horizon promised by an earlier chunk")
        t = np.concatenate((self._times, times))
        a = np.concatenate((self._amounts, amounts))
        order = np.argsort(t, kind="stable")
        t, a = t[order], a[order]
        if len(t):
            cumulative = np.cumsum(a)
            first = np.searchsorted(t, t - self.window, side="right")
            before = np.where(first > 0, cumulative[np.maximum(first - 1, 0)], 0.0)
            final = t < horizon  # windows ending here hold every event they ever will
            if final.any():
                self.best = max(self.best, float(np.max((cumulative - before)[final])))
        keep = t > horizon - self.window  # the events later windows can still contain
        self._times, self._amounts = t[keep], a[keep]
        self.horizon = max(self.horizon, horizon)

    def peak(self) -> float:
        """The peak over every event given so far (closing the stream)."""
        self.add(np.empty(0), np.empty(0), math.inf)
        return self.best


class _ProviderLoad:
    """One provider's calls under one policy, as the breakdown reports them."""

    def __init__(self) -> None:
        self.calls = 0
        self.outcomes = dict.fromkeys(_COUNTED_OUTCOMES, 0)
        self.held_s = 0.0
        self.tokens = PeakWindow()
        self.stream = (0, 0, 0)  # first-token cuts, idle cuts, broken streams

    def add(self, calls: pd.DataFrame, horizon: float) -> None:
        self.calls += len(calls)
        outcome = calls["outcome"]
        for name in self.outcomes:
            self.outcomes[name] += int((outcome == name).sum())
        held = (calls["end_s"] - calls["start_s"] - calls["queue_s"].fillna(0.0)).clip(lower=0.0)
        self.held_s += float(held.sum())
        more = stream_endings(calls, outcome)
        self.stream = tuple(a + b for a, b in zip(self.stream, more, strict=True))  # type: ignore[assignment]
        self.tokens.add(calls["start_s"].to_numpy(float), calls["quota_tokens"].to_numpy(float),
                        horizon)  # fmt: skip


class PolicyTally:
    """Everything the summary row and breakdown of one policy need, fed chunk by chunk.

    `first_arrival[i]` is request i's first send as the clock saw it (the warm-up rule counts a
    request, re-sends included, when it is at or after `warmup_s`)."""

    def __init__(
        self,
        policy: str,
        first_arrival: np.ndarray,
        *,
        limits: Mapping[str, ProviderLimits],
        tpm: Mapping[tuple[str, str | None], int] | None = None,
        warmup_s: float = 0.0,
        first_signal_s: float | None = None,
        first_signal: FirstSignalSpec | None = None,
    ) -> None:
        self.policy = policy
        self.counted_request = np.asarray(first_arrival) >= warmup_s if warmup_s > 0 else None
        n = len(first_arrival)
        self.seen = np.zeros(n, dtype=bool)
        self.ok_any = np.zeros(n, dtype=bool)
        self.tpm = dict(tpm or {})
        self.first_signal_s = first_signal_s
        self.first_signal = first_signal
        self._user: list[np.ndarray] = []  # runs' user_ttft_s, when a step is named
        self._latency: list[np.ndarray] = []
        self._signal: list[np.ndarray] = []
        self.sums: dict[str, float] = {}
        self.first_arrival_s, self.last_end_s = math.inf, -math.inf
        self.quota_windows = {quota: PeakWindow() for quota in self.tpm}
        # the breakdown's view: every run and call, warm-up included
        self.failures: dict[tuple[str, str], int] = {}
        #: Each pair's first failed run (request, re-send): ties rank as the whole table's do.
        self.failure_first: dict[tuple[str, str], tuple[int, int]] = {}
        self.all_runs = 0
        self.span_start, self.span_end = math.inf, -math.inf
        self.providers = {name: _ProviderLoad() for name in limits}
        self.limits = dict(limits)

    # ------------------------------------------------------------------ feeding

    def add(
        self,
        requests: pd.DataFrame,
        calls: pd.DataFrame,
        actions: pd.DataFrame | None = None,
        horizon: float = math.inf,
    ) -> None:
        """Take one chunk of this policy's tables (see the module docstring for what a chunk
        must hold); `horizon`: no later chunk has a call starting before it."""
        self._add_breakdown(requests, calls, horizon)
        if self.counted_request is not None:
            requests = requests[self.counted_request[requests["request_id"].to_numpy()]]
            calls = calls[self.counted_request[calls["request_id"].to_numpy()]]
            if actions is not None and len(actions):
                actions = actions[self.counted_request[actions["request_id"].to_numpy()]]
        self._add_runs(requests)
        self._add_calls(calls, horizon)
        self._add_breaches(requests, calls, actions)

    def _add(self, name: str, value: float) -> None:
        self.sums[name] = self.sums.get(name, 0) + value

    def _add_runs(self, runs: pd.DataFrame) -> None:
        ids, ok = runs["request_id"].to_numpy(), runs["ok"].to_numpy(bool)
        self.seen[ids] = True
        self.ok_any[ids[ok]] = True
        latency = runs["latency_s"].to_numpy(float)
        self._latency.append(latency)
        signal = runs["first_signal_s"].to_numpy(float)
        self._signal.append(np.where(np.isnan(signal), latency, signal))
        if self.first_signal is not None:
            self._user.append(runs[USER_TTFT].to_numpy(float))
        if self.first_signal_s:
            met = (~np.isnan(signal)) & (signal <= self.first_signal_s)
            self._add("first_signal_met", int(met.sum()))
        if len(runs):
            self.first_arrival_s = min(self.first_arrival_s, float(runs["arrival_s"].min()))
            self.last_end_s = max(self.last_end_s, float(runs["end_s"].max()))
        self._add("runs", len(runs))
        self._add("successes", int(ok.sum()))
        self._add("shed", int((runs["fail_reason"] == "shed").sum()))
        quality = runs.loc[ok, "quality"].to_numpy(float)
        self._add("quality_sum", float(np.nansum(quality)))
        self._add("quality_n", int((~np.isnan(quality)).sum()))
        self._add("valid_hits", int(runs["valid_hit"].sum()))
        self._add("invalid_delivered", int((ok & ~runs["valid"].to_numpy(bool)).sum()))
        for name in ("draft_kept", "draft_upgraded", "refused_retries", "refused_starts"):
            self._add(name, int(runs[name].sum()))

    def _add_calls(self, calls: pd.DataFrame, horizon: float) -> None:
        outcome = calls["outcome"]
        cost = calls["cost_usd"]
        tokens = calls["input_tokens"] + calls["output_tokens"]
        sdk = calls["sdk_retry"].to_numpy() > 0
        self._add("calls", len(calls))
        self._add("cost", float(cost.sum()))
        self._add("tokens", float(tokens.sum()))
        self._add("first_attempts", int(((calls["attempt"].to_numpy() == 0) & ~sdk).sum()))
        self._add("sdk_retries", int(sdk.sum()))
        self._add("wasted", float(cost[outcome != OUTCOME_OK].sum()))
        for name in _COUNTED_OUTCOMES:
            self._add(f"outcome_{name}", int((outcome == name).sum()))
        orphan = calls["orphan"].to_numpy(bool)
        self._add("orphan_calls", int(orphan.sum()))
        self._add("orphan_tokens", int(tokens[orphan].sum()))
        self._add("orphan_cost", float(cost[orphan].sum()))
        for (provider, model), window in self.quota_windows.items():
            mask = calls["provider"] == provider
            if model is not None:
                mask &= calls["model"] == model
            part = calls.loc[mask]
            window.add(part["start_s"].to_numpy(float), part["quota_tokens"].to_numpy(float),
                       horizon)  # fmt: skip

    def _add_breaches(
        self, runs: pd.DataFrame, calls: pd.DataFrame, actions: pd.DataFrame | None
    ) -> None:
        """Runs with a call or action cut by each budget (and runs failed at the deadline)."""
        for budget, breached in breach_flags(runs, calls, actions).items():
            self._add(f"breach_{budget}", int(breached.sum()))
        if actions is not None and len(actions):
            for name, count in action_counts(actions).items():
                self._add(name, count)

    def _add_breakdown(self, runs: pd.DataFrame, calls: pd.DataFrame, horizon: float) -> None:
        self.all_runs += len(runs)
        if len(runs):
            self.span_start = min(self.span_start, float(runs["arrival_s"].min()))
            self.span_end = max(self.span_end, float(runs["end_s"].max()))
        if len(calls):
            self.span_end = max(self.span_end, float(calls["end_s"].max()))
        failed = runs[~runs["ok"].astype(bool)]
        if len(failed):
            by = ["fail_reason", "fail_step"]
            counts = failed.groupby(by, dropna=False, sort=False).size()
            firsts = failed.drop_duplicates(by)  # each pair's first run (runs are sorted)
            for reason, step, n, rid, resend in zip(
                counts.index.get_level_values(0),
                counts.index.get_level_values(1),
                counts,
                firsts["request_id"],
                firsts["resend"],
                strict=True,
            ):
                key = (str(reason), str(step))
                self.failures[key] = self.failures.get(key, 0) + int(n)
                first = (int(rid), int(resend))
                self.failure_first[key] = min(self.failure_first.get(key, first), first)
        provider = calls["provider"]
        for name, load in self.providers.items():
            load.add(calls[provider == name], horizon)

    # ------------------------------------------------------------------ reading

    def latencies(self) -> np.ndarray:
        """Every counted run's latency_s (a failed run at its deadline), in the order fed."""
        return np.concatenate(self._latency) if self._latency else np.empty(0)

    def summary_row(self, breaker_open_s: float | None = None) -> dict[str, object]:
        """The row `sim.analysis.metrics.summarize` gives this policy on the whole tables."""
        s = self.sums
        n_requests = int(self.seen.sum())
        n_runs, successes = int(s.get("runs", 0)), int(s.get("successes", 0))
        latency = self.latencies()
        signal = np.concatenate(self._signal) if self._signal else np.empty(0)
        sig50, sig99 = np.percentile(signal, [50, 99]) if n_runs else (np.nan,) * 2
        per_request = max(1, n_requests)  # the answer metrics' guard (summarize's)
        span = self.last_end_s - self.first_arrival_s
        counts = RunCounts(
            requests=n_requests,
            runs=n_runs,
            successes=successes,
            calls=int(s.get("calls", 0)),
            first_attempts=int(s.get("first_attempts", 0)),
            sdk_retries=int(s.get("sdk_retries", 0)),
            timeouts=int(s.get(f"outcome_{OUTCOME_TIMEOUT}", 0)),
            cancelled=int(s.get(f"outcome_{OUTCOME_CANCELLED}", 0)),
            rate_limited=int(s.get(f"outcome_{OUTCOME_RATE_LIMITED}", 0)),
            cost=float(s.get("cost", 0.0)),
            wasted=float(s.get("wasted", 0.0)),
            tokens=float(s.get("tokens", 0.0)),
            customer_success_rate=float(self.ok_any[self.seen].mean()),
            goodput_per_s=successes / span if n_runs and span > 0 else np.nan,
            shed=int(s.get("shed", 0)),
        )
        row = count_row(self.policy, counts, latency)
        row |= {
            "quality_mean": s["quality_sum"] / s["quality_n"]
            if s.get("quality_n") and successes
            else math.nan,
            "valid_hit_rate": s.get("valid_hits", 0) / n_runs if n_runs else math.nan,
            "invalid_delivered_rate": s.get("invalid_delivered", 0) / n_runs
            if n_runs
            else math.nan,
            "truncated_per_request": s.get(f"outcome_{OUTCOME_TRUNCATED}", 0) / per_request,
            "draft_kept": s.get("draft_kept", 0) / per_request,
            "draft_upgraded": s.get("draft_upgraded", 0) / per_request,
            "peak_tpm_share": self._peak_tpm_share(),
            "breaker_open_s": float(breaker_open_s) if breaker_open_s is not None else np.nan,
            "first_signal_p50_s": float(sig50),
            "first_signal_p99_s": float(sig99),
            "first_signal_hit_rate": s.get("first_signal_met", 0) / n_runs
            if self.first_signal_s and n_runs
            else np.nan,
            **user_ttft_row(_joined(self._user), latency, self.first_signal),
            "orphan_calls": int(s.get("orphan_calls", 0)),
            "orphan_tokens": int(s.get("orphan_tokens", 0)),
            "orphan_cost_usd": float(s.get("orphan_cost", 0.0)),
        }
        for budget in BUDGETS:
            breached = s.get(f"breach_{budget}", 0)
            row[f"breach_{budget}"] = breached / n_runs if n_runs else np.nan
        for name in ("refused_retries", "refused_starts"):
            row[name] = int(s.get(name, 0))
        for name in ("duplicate_actions", "late_actions", "unknown_actions"):
            row[name] = int(s.get(name, 0))
        return {name: row[name] for name in SUMMARY_METRICS}

    def _peak_tpm_share(self) -> float:
        best = np.nan
        for quota, window in self.quota_windows.items():
            best = np.nanmax([best, window.peak() / self.tpm[quota]])
        return float(best)

    def breakdown_rows(self, span: float, top: int = TOP_FAILURES) -> list[dict[str, object]]:
        """This policy's rows of `sim.analysis.breakdown.breakdown`; `span`: seconds from the first
        arrival to the last end over every policy of the run (see `span_of`)."""
        rows: list[dict[str, object]] = []
        first = self.failure_first
        ranked = sorted(self.failures.items(), key=lambda item: (-item[1], first[item[0]]))
        kept, rest = ranked[:top], ranked[top:]
        total = self.all_runs
        for (reason, step), n in kept:
            rows.append(failure_row(self.policy, reason, step, n, total))
        if rest:
            rows.append(failure_row(self.policy, "other", "", sum(n for _, n in rest), total))
        for name, load in self.providers.items():
            limit = self.limits[name]
            rows.append(
                provider_row(
                    self.policy,
                    name,
                    limit,
                    calls=load.calls,
                    rate_limited=load.outcomes[OUTCOME_RATE_LIMITED],
                    timeouts=load.outcomes[OUTCOME_TIMEOUT],
                    errors=load.outcomes[OUTCOME_ERROR],
                    busy=load.held_s / span if span > 0 else 0.0,
                    peak=load.tokens.peak(),
                    stream=load.stream,
                )
            )
        return rows


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The chunks' arrays end to end (empty without any)."""
    return np.concatenate(parts) if parts else np.empty(0)


def span_of(tallies: Sequence[PolicyTally]) -> float:
    """Simulated seconds from the first arrival to the last end, over every policy."""
    start = min((t.span_start for t in tallies), default=math.inf)
    end = max((t.span_end for t in tallies), default=-math.inf)
    return end - start if math.isfinite(start) else 0.0


def summary_table(
    tallies: Sequence[PolicyTally], breaker_open: Mapping[str, float] | None = None
) -> pd.DataFrame:
    """The summary table (`sim.analysis.metrics.summarize`'s) of the tallied policies."""
    rows = [
        t.summary_row(None if breaker_open is None else breaker_open.get(t.policy, 0.0))
        for t in tallies
    ]
    return pd.DataFrame(rows, columns=list(SUMMARY_METRICS))


def breakdown_table(tallies: Sequence[PolicyTally]) -> pd.DataFrame:
    """The breakdown table (`sim.analysis.breakdown.breakdown`'s) of the tallied policies."""
    span = span_of(tallies)
    rows = [row for t in tallies for row in t.breakdown_rows(span)]
    return pd.DataFrame(rows, columns=list(BREAKDOWN_COLUMNS))


class SettledRuns:
    """Moves an event simulation's settled runs and their calls into a tally while it runs, so
    its records do not grow with the run (`records: none | requests`).

    A run is settled once closed (nothing new starts) with no process left (no call in flight),
    seen so at two checks at different instants, so that the interrupts of its cancelled calls,
    delivered at the instant it closed, have been recorded. Tool steps' actions can still change
    after their run closes (a remote commits late), so a simulation with tool steps is not
    flushed. `check` runs inside the simulation (from its progress hook), between events."""

    #: Recorded calls that make a check worth its cost.
    EVERY_CALLS = 50_000

    def __init__(
        self,
        sim: Simulation,
        tally: PolicyTally,
        keep: list[pd.DataFrame] | None = None,
        every_calls: int | None = None,
    ) -> None:
        self.sim, self.tally, self.keep = sim, tally, keep
        self.every = every_calls or self.EVERY_CALLS
        self.flushable = not any(step.tool is not None for step in sim.workflow.steps)
        self._seen: set[int] = set()  # ids of runs found settled at the previous check
        self._seen_at = -math.inf

    def check(self) -> None:
        """Flush the runs settled at two checks, if enough calls are waiting."""
        sim = self.sim
        if not self.flushable or len(sim.calls) < self.every:
            return
        now = sim.env.now
        settled = {id(r) for r in sim.runs if r.closed and not r.active}
        if now > self._seen_at:
            ready, self._seen, self._seen_at = settled & self._seen, settled, now
        else:
            ready = set()
        if not ready:
            return
        runs = [r for r in sim.runs if id(r) in ready]
        calls = [c for c in sim.calls if id(c.run) in ready]
        sim.runs[:] = [r for r in sim.runs if id(r) not in ready]  # in place: the engine's list
        sim.calls[:] = [c for c in sim.calls if id(c.run) not in ready]
        self._seen -= ready
        # later calls belong to runs still here or still to come: none starts before either
        horizon = min([now, *(r.arrival for r in sim.runs)])
        self._add(Records(self.tally.policy, runs, calls), horizon)

    def finish(self, records: Records) -> None:
        """Tally what is left when the simulation has ended."""
        self._add(records, math.inf, records.actions)

    def _add(self, records: Records, horizon: float, actions: list[Action] | None = None) -> None:
        calls = calls_frame(records)
        requests = fill_user_first_token(requests_frame(records), calls, self.sim.plan.signal_step)
        frame = actions_frame(records) if actions else None
        self.tally.add(requests, calls, frame, horizon)
        if self.keep is not None:
            self.keep.append(requests)
