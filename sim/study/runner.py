"""The library's front door: run every policy of a plan on the same arrivals and draws.

`run(plan)` resolves 'pNN' thresholds with a pilot run, then simulates each policy on common
random numbers (same arrivals, same per-call draws) and returns the summary, requests and calls
tables as DataFrames: the same tables `tailsim run` writes. One policy's share of the work is
`sim.study.policy_run`'s; the result type is `sim.study.result.RunResult` (data only: saving
and drawing it are the output layer's, through `sim.api`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import pandas as pd

from sim.analysis.capacity import ALL, RECORDS, check_fits, default_records
from sim.analysis.metrics import CALL_COLUMNS, REQUEST_COLUMNS, summarize
from sim.engine.tally import breakdown_table as tally_breakdown
from sim.engine.tally import summary_table as tally_summary
from sim.model.errors import ScenarioError
from sim.plan import Plan, with_seed
from sim.policy.actions import no_actions
from sim.study.pilot import prepare
from sim.study.policy_run import PolicyOutcome, RunJob, run_policy
from sim.study.result import RunResult


def chosen_policies(
    plan: Plan, policies: Sequence[str] | None, argument: str = "policies="
) -> list[str]:
    """The policies to run, each once, in the order given (all of the plan's by default); an
    unknown name is reported against `argument` (the caller's spelling of the option)."""
    if isinstance(policies, str):
        policies = [policies]
    names = list(dict.fromkeys(policies)) if policies else list(plan.policies)
    unknown = [p for p in names if p not in plan.policies]
    if unknown:
        known = ", ".join(plan.policies)
        raise ScenarioError(
            argument, [("", f"unknown policy {unknown[0]!r} in {plan.name} (known: {known})")]
        )
    return names


def run(
    plan: Plan,
    *,
    requests: int | None = None,
    seed: int | None = None,
    policies: Sequence[str] | None = None,
    progress: Callable[[str, int], None] | None = None,
    stop: Callable[[], bool] | None = None,
    engine: str | None = None,
    records: str | None = None,
    executor: str = "inline",
    workers: int | None = None,
    scheduler: str | None = None,
) -> RunResult:
    """Simulate the chosen policies (all by default) and return their tables.

    `progress(policy, n)` is told each time `n` more requests of `policy` have arrived; `stop()`
    is asked now and then, and a yes ends the run with KeyboardInterrupt at a safe point.
    `engine` overrides the scenario's `engine:` (auto | des | vectorized). `records` says which
    tables to keep: all; requests (no calls table); none (summary, breakdown and latencies
    only, aggregated as the run goes, the vectorized engine a chunk of requests at a time, so
    memory does not grow with calls). Default: all, or none when all would not fit
    (`sim.analysis.capacity.default_records`). `executor` ('inline', 'processes' or 'dask', with
    `workers` and a dask `scheduler` as for `sim.study.sweep`) runs the policies side by side: each
    worker draws what this process would, so the tables are the same to the last bit.
    """
    n = plan.requests if requests is None else requests
    if n < 1:
        raise ScenarioError(plan.source, [("requests", f"must be >= 1, got {n}")])
    names = chosen_policies(plan, policies)
    if records is None:
        records = default_records(plan, n, names)
    if records not in RECORDS:
        raise ScenarioError(plan.source, [("records", f"got {records!r}, allowed: {RECORDS}")])
    if executor != "inline" or workers is not None or scheduler is not None:
        from sim.study.executors import check_executor  # noqa: PLC0415 - only when asked for

        check_executor(executor, workers, scheduler)
    check_fits(plan, n, names, records=records)

    started = time.perf_counter()
    plan = with_seed(plan, plan.seed if seed is None else seed)
    plan, _ = prepare(plan)  # one pilot run for the thresholds and admission's expected times
    wall = {"pilot": time.perf_counter() - started}

    plan = replace(plan, requests=n, engine=engine or plan.engine)
    job = RunJob(plan, names, records)
    if executor == "inline":
        context = job.context()  # records all: one draw bank, each policy reuses the last's
        outcomes = [run_policy(context, name, progress, stop) for name in names]
    else:
        from sim.study.policy_pool import run_policies  # noqa: PLC0415 - executors on demand

        outcomes = run_policies(job, executor, workers, scheduler, progress, stop)
    wall.update((o.name, o.wall_s) for o in outcomes)
    thresholds = {name: dict(plan.policies[name].thresholds) for name in names}
    if records != ALL:
        result = _tallied_result(job, thresholds, wall, outcomes)
    else:
        result = _tables_result(job, thresholds, wall, outcomes)
    result.executor, result.workers = executor, workers
    return result


def _tables_result(
    job: RunJob,
    thresholds: dict[str, dict[str, float]],
    wall: dict[str, float],
    outcomes: list[PolicyOutcome],
) -> RunResult:
    """The RunResult of a run that kept every table: the policies' tables stacked in order."""
    plan = job.plan
    requests_table = pd.concat([o.requests for o in outcomes], ignore_index=True)
    calls_table = pd.concat([o.calls for o in outcomes], ignore_index=True)
    action_tables = [o.actions for o in outcomes if o.actions is not None]
    actions_table = pd.concat(action_tables, ignore_index=True) if action_tables else no_actions()
    counted_requests, counted_calls = after_warmup(requests_table, calls_table, plan.warmup_s)
    counted_actions = _kept(actions_table, counted_requests)
    return RunResult(
        plan=plan,
        seed=plan.seed,
        requests_count=plan.requests,
        thresholds=thresholds,
        summary=summarize(
            counted_requests,
            counted_calls,
            plan.model_quality,
            tpm=plan.tpm_quotas(),
            breaker_open={o.name: o.breaker_open_s for o in outcomes},
            actions=counted_actions,
            first_signal_s=plan.first_signal_s,
            first_signal=plan.first_signal,
        ),
        requests=requests_table,
        calls=calls_table,
        wall_s=wall,
        engines={o.name: o.engine for o in outcomes},
        engine_notes={o.name: o.note for o in outcomes},
        actions=actions_table,
    )


def _tallied_result(
    job: RunJob,
    thresholds: dict[str, dict[str, float]],
    wall: dict[str, float],
    outcomes: list[PolicyOutcome],
) -> RunResult:
    """The RunResult of a run that kept summaries only (or the requests table too)."""
    plan = job.plan
    tallies = [o.tally for o in outcomes if o.tally is not None]
    if any(not t.sums.get("runs") for t in tallies):
        raise ScenarioError(
            "warmup_s", [("", f"{plan.warmup_s:g} s leaves no request to count: lower it")]
        )
    kept = [part for o in outcomes for part in o.kept]
    requests_table = (
        pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=list(REQUEST_COLUMNS))
    )
    return RunResult(
        plan=plan,
        seed=plan.seed,
        requests_count=plan.requests,
        thresholds=thresholds,
        summary=tally_summary(tallies, {o.name: o.breaker_open_s for o in outcomes}),
        requests=requests_table,
        calls=pd.DataFrame(columns=list(CALL_COLUMNS)),
        wall_s=wall,
        engines={o.name: o.engine for o in outcomes},
        engine_notes={o.name: o.note for o in outcomes},
        records=job.records,
        latency={t.policy: t.latencies() for t in tallies},
        breakdown_table=tally_breakdown(tallies),
    )


def _kept(actions: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """The actions of the requests the statistics count (see `after_warmup`)."""
    if actions.empty:
        return actions
    index = pd.MultiIndex.from_frame(requests[["policy", "request_id"]].drop_duplicates())
    keep = pd.MultiIndex.from_frame(actions[["policy", "request_id"]]).isin(index)
    return actions[keep].reset_index(drop=True)


def after_warmup(
    requests: pd.DataFrame, calls: pd.DataFrame, warmup_s: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows the statistics use: requests whose first send arrived at or after `warmup_s`
    (with all their re-sends) and their calls. Earlier requests ran, loading providers and
    quotas, but are left out, so steady-state figures can be read."""
    if warmup_s <= 0:
        return requests, calls
    first = requests.loc[requests["resend"] == 0, ["policy", "request_id", "arrival_s"]]
    kept = first.loc[first["arrival_s"] >= warmup_s, ["policy", "request_id"]]
    if kept.empty:
        raise ScenarioError(
            "warmup_s", [("", f"{warmup_s:g} s leaves no request to count: lower it")]
        )
    index = pd.MultiIndex.from_frame(kept)
    keep_requests = pd.MultiIndex.from_frame(requests[["policy", "request_id"]]).isin(index)
    keep_calls = pd.MultiIndex.from_frame(calls[["policy", "request_id"]]).isin(index)
    return (
        requests[keep_requests].reset_index(drop=True),
        calls[keep_calls].reset_index(drop=True),
    )


#: The RunResult of policies' tables stacked in order (for `sim.harness.runner`, whose
#: handler's tables stand beside the scenario's policies').
tables_result = _tables_result
