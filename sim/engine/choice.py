"""Which engine runs a policy: the vectorized one where it gives the event engine's numbers.

`vectorized_tables` is the runner's hook: under `engine: auto` it returns the vectorized tables
when the policy run qualifies (`sim.engine.qualify.qualifies`) and no provider limit would have
bound
on the computed calls, else None with the reason (the event engine then runs it); under
`engine: vectorized` a run that does not qualify is a `ScenarioError` naming why.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from sim.engine.qualify import LimitWatch, limit_that_binds, qualifies
from sim.engine.vector_calls import UnsupportedError
from sim.engine.vector_tables import VectorTables, tables
from sim.engine.vectorized import simulate
from sim.model.errors import ScenarioError
from sim.model.streams import CallDrawBank, Streams
from sim.plan import Plan
from sim.policy.kinds.per_step import single_policy
from sim.policy.plans import Policy

__all__ = ["single_policy", "vectorized_in_chunks", "vectorized_tables"]

ENGINES = ("auto", "des", "vectorized")
#: Requests per chunk when the vectorized engine runs in constant memory (~250 MB at peak).
CHUNK_REQUESTS = 10_000
#: Names of the engines as reported (RunResult.engines, run.json, the printed line).
DES, VECTORIZED = "des", "vectorized"


def vectorized_tables(
    plan: Plan, policy: Policy, bank: CallDrawBank, arrivals: np.ndarray, engine: str
) -> tuple[VectorTables | None, str]:
    """(tables, "") from the vectorized engine, or (None, why it did not run)."""
    if engine not in ENGINES:
        raise ScenarioError(plan.source, [("engine", f"got {engine!r}, allowed: {ENGINES}")])
    if engine == DES:
        return None, "engine: des"
    policy = single_policy(policy)
    usable, reason = _qualifies(plan, policy)
    if usable:
        try:
            runs, calls = simulate(plan, policy, bank, arrivals)
        except UnsupportedError as exc:
            reason = str(exc)
        else:
            binds = limit_that_binds(
                plan.provider_specs, calls.provider, calls.start, calls.end, calls.quota_tokens
            )
            if binds is None:
                return tables(plan, policy.name, runs, calls), ""
            reason = binds
    if engine == VECTORIZED:
        raise ScenarioError(
            plan.source,
            [("engine", f"the vectorized engine cannot run policy '{policy.name}': {reason}")],
        )
    return None, reason


def vectorized_in_chunks(
    plan: Plan,
    policy: Policy,
    call_streams: Streams,
    arrivals: np.ndarray,
    engine: str,
    feed: Callable[[VectorTables, float], None],
    chunk: int | None = None,
) -> str:
    """Run `policy` vectorized `chunk` requests at a time, handing each chunk's tables (request
    ids counted over all requests) to `feed(tables, horizon)`, where no later chunk has a call
    starting before `horizon`. Returns "" if it ran to the end, else why not: then the caller
    must drop what it was fed and use the event engine. `arrivals` are as the clock saw them
    (`clock_arrivals`); each chunk draws its own rows of the same streams (`CallDrawBank`'s
    `first`), so the numbers are those of one run over all requests."""
    if engine not in ENGINES:
        raise ScenarioError(plan.source, [("engine", f"got {engine!r}, allowed: {ENGINES}")])
    if engine == DES:
        return "engine: des"
    policy = single_policy(policy)
    usable, reason = _qualifies(plan, policy)
    if usable:
        size = chunk or CHUNK_REQUESTS
        reason = _chunks(plan, policy, call_streams, arrivals, feed, size) or ""
        if not reason:
            return ""
    if engine == VECTORIZED:
        raise ScenarioError(
            plan.source,
            [("engine", f"the vectorized engine cannot run policy '{policy.name}': {reason}")],
        )
    return reason


def _qualifies(plan: Plan, policy: Policy) -> tuple[bool, str]:
    """`qualifies` for the plan's policy of this name (a policy the plan does not have is
    unknown to the vectorized engine)."""
    known = plan.policies.get(policy.name)
    if known is None:
        return False, f"policy {policy.name!r} is not one of the plan's"
    return qualifies(known)


def _chunks(
    plan: Plan,
    policy: Policy,
    call_streams: Streams,
    arrivals: np.ndarray,
    feed: Callable[[VectorTables, float], None],
    chunk: int,
) -> str | None:
    """`vectorized_in_chunks`' loop: None if every chunk ran and no limit binds, else why."""
    watch, n = LimitWatch(plan.provider_specs), len(arrivals)
    for first in range(0, n, chunk):
        last = min(n, first + chunk)
        bank = CallDrawBank(call_streams, last - first, first)
        try:
            runs, calls = simulate(plan, policy, bank, arrivals[first:last], clocked=True)
        except UnsupportedError as exc:
            return str(exc)
        horizon = float(arrivals[last]) if last < n else math.inf
        binds = watch.add(calls.provider, calls.start, calls.end, calls.quota_tokens, horizon)
        if binds:
            return binds
        part = tables(plan, policy.name, runs, calls)
        if first:
            part.requests["request_id"] += first
            part.calls["request_id"] += first
        feed(part, horizon)
    return watch.finish()
