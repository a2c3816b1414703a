"""Will a run's records fit in memory? An estimate made before any work, so a run too big for the
machine stops at once with the figure and what to do, instead of swapping or dying late."""

from __future__ import annotations

import os
from collections.abc import Sequence

from sim.model.errors import ScenarioError
from sim.model.words import plural
from sim.plan import Plan

#: Peak bytes per simulated call while a policy runs and its tables are built (measured with
#: tracemalloc on the default scenario: ~1,080 under wait, ~710 under race), rounded up.
BYTES_PER_CALL = 1_200
#: Bytes per run kept until the tables are built (the Run object and its row).
BYTES_PER_RUN = 600
#: Share of the available memory a run may plan to use.
USABLE_SHARE = 0.8

#: What a run keeps (`tailsim run --records`): every table, the requests table, summaries only.
ALL, REQUESTS, NONE = "all", "requests", "none"
RECORDS = (ALL, REQUESTS, NONE)
#: How an estimate names what it is for, by `records`.
_KEEPING = {
    ALL: "for their records",
    REQUESTS: "even keeping only the requests table",
    NONE: "even with summaries only",
}
#: Without a choice, a run whose full records would need more than this keeps summaries only.
AUTO_ALL_BYTES = 2 * 2**30
#: Bytes per run kept in summary-only mode (latency and first signal floats, request bits).
BYTES_PER_TALLIED_RUN = 20
#: Bytes per row of a kept requests table (measured 144 on the default scenario), rounded up
#: for the failure columns of a failing policy and pandas' working copies.
BYTES_PER_REQUEST_ROW = 260
#: Working memory of the vectorized engine's chunks and the pilot, whatever the size.
CHUNK_BYTES = 400 * 2**20


def estimated_calls_per_run(plan: Plan, policy: str) -> float:
    """Calls one run makes under `policy`, on the generous side: every step once, a race's
    every attempt, plus a tenth for retries and hedges."""
    per_step = plan.policies[policy].calls_per_step
    return len(plan.workflow.steps) * per_step * 1.1


def estimated_bytes(
    plan: Plan,
    requests: int,
    policies: Sequence[str],
    records: str = ALL,
    event_engine: bool = False,
) -> int:
    """Peak bytes the records of `requests` requests need (one policy is held at a time, and
    every policy's tables are kept to the end). With `records` none or requests this assumes
    the vectorized engine's chunks, or with `event_engine` the event engine flushing settled
    runs and drawing from a windowed bank (a policy that falls back to it is checked again on
    its own before it runs)."""
    retry = plan.customers.retry
    runs_per_request = 1.0 + retry.probability * retry.max
    runs = requests * runs_per_request
    if records != ALL:
        per_run = BYTES_PER_TALLIED_RUN + (BYTES_PER_REQUEST_ROW if records == REQUESTS else 0)
        tools = any(step.tool is not None for step in plan.workflow.steps)
        if event_engine and tools:  # settled runs are flushed, except with tool steps
            return estimated_bytes(plan, requests, policies, ALL)
        return int(CHUNK_BYTES + runs * per_run * len(policies))
    per_policy = [runs * (BYTES_PER_RUN + BYTES_PER_CALL * estimated_calls_per_run(plan, p))
                  for p in policies]  # fmt: skip
    kept = sum(per_policy) * 0.15  # finished policies' tables (~110 bytes per call)
    return int(max(per_policy, default=0.0) + kept)


def available_bytes() -> int | None:
    """Memory available to new work (Linux MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def default_records(plan: Plan, requests: int, policies: Sequence[str]) -> str:
    """all when every table fits comfortably (under AUTO_ALL_BYTES and the memory available),
    else none: a big run keeps its summaries rather than failing."""
    need = estimated_bytes(plan, requests, policies, ALL)
    available = available_bytes()
    roomy = available is None or need <= available * USABLE_SHARE
    return ALL if need <= AUTO_ALL_BYTES and roomy else NONE


def check_fits(
    plan: Plan,
    requests: int,
    policies: Sequence[str],
    available: int | None = None,
    *,
    records: str = ALL,
    event_engine: bool = False,
    why: str = "",
) -> None:
    """Raise a ScenarioError naming the estimate if the records would not fit in memory
    (`why`: said first, e.g. why a policy needs the event engine)."""
    available = available_bytes() if available is None else available
    need = estimated_bytes(plan, requests, policies, records, event_engine)
    if available is None or need <= available * USABLE_SHARE:
        return
    gib = 2**30
    most = int(requests * available * USABLE_SHARE / need)
    summaries_fit = estimated_bytes(plan, requests, policies, NONE) <= available * USABLE_SHARE
    advice = ", or --records none (summaries only)" if records == ALL and summaries_fit else ""
    raise ScenarioError(
        plan.source,
        [
            (
                "requests",
                f"{why}{plural(requests, 'request')} x "
                f"{plural(len(policies), 'policy', 'policies')} need about "
                f"{need / gib:.1f} GiB {_KEEPING[records]}, more than the {available / gib:.1f} "
                f"GiB available; run at most about {most} requests, or fewer policies at a "
                f"time (--policy){advice}",
            )
        ],
    )
