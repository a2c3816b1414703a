"""Will a run's records fit in memory? An estimate made before any work, so a run too big for the
machine stops at once with the figure and what to do, instead of swapping or dying late."""

from __future__ import annotations

import os
from collections.abc import Sequence

from sim.config import RacePolicy, Scenario
from sim.errors import ScenarioError

#: Peak bytes per simulated call while a policy runs and its tables are built (measured with
#: tracemalloc on the default scenario: ~1,080 under wait, ~710 under race), rounded up.
BYTES_PER_CALL = 1_200
#: Bytes per run kept until the tables are built (the Run object and its row).
BYTES_PER_RUN = 600
#: Share of the available memory a run may plan to use.
USABLE_SHARE = 0.8


def estimated_calls_per_run(scenario: Scenario, policy: str) -> float:
    """Calls one run makes under `policy`, on the generous side: every step once, a race's
    every attempt, plus a tenth for retries and hedges."""
    spec = scenario.policies[policy]
    per_step = spec.attempts if isinstance(spec, RacePolicy) else 1.0
    return len(scenario.workflow.steps) * per_step * 1.1


def estimated_bytes(scenario: Scenario, requests: int, policies: Sequence[str]) -> int:
    """Peak bytes the records of `requests` requests need (one policy is held at a time, and
    every policy's tables are kept to the end)."""
    retry = scenario.customers.retry
    runs_per_request = 1.0 + retry.probability * retry.max
    runs = requests * runs_per_request
    per_policy = [runs * (BYTES_PER_RUN + BYTES_PER_CALL * estimated_calls_per_run(scenario, p))
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


def check_fits(
    scenario: Scenario, requests: int, policies: Sequence[str], available: int | None = None
) -> None:
    """Raise a ScenarioError naming the estimate if the records would not fit in memory."""
    available = available_bytes() if available is None else available
    need = estimated_bytes(scenario, requests, policies)
    if available is None or need <= available * USABLE_SHARE:
        return
    gib = 2**30
    most = int(requests * available * USABLE_SHARE / need)
    raise ScenarioError(
        scenario.name,
        [
            (
                "requests",
                f"{requests} requests x {len(policies)} policies need about {need / gib:.1f} GiB "
                f"for their records, more than the {available / gib:.1f} GiB available; run "
                f"at most about {most} requests, or fewer policies at a time (--policy)",
            )
        ],
    )
