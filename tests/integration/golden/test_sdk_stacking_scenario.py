"""Independent checks of scenarios/sdk-stacking.yaml (issue 18) at the size it ships with.

A cut policy retrying over `sdk: openai` with a per-attempt `timeout_s`, against one retry loop
in the policy alone and one in the SDK alone. The laws here come from the openai SDK's source
(docs/clients.md), not from the simulator: each SDK retry follows the SDK's own timeout or a
5xx, after a wait of min(0.5 * 2^(j-1), 8) * (1 - 0.25 U) seconds, U in [0, 1); each SDK call
lasts at most its 2.5 s timeout, restarted per retry; at most 3 x 3 calls per request. The
claims (about twice the calls for no better hit rate) are paired over the same requests (common
random numbers) with a margin of Z_ORDER standard errors of the paired difference.
`SDK_CHECKS` joins the golden suite's registry like the storm scenarios' checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np
import pandas as pd
import pytest

import sim
from tests.helpers import REPO_ROOT

STEM = "sdk-stacking"
STACKED, BARE, ALONE = "cut-over-openai", "cut-over-bare", "openai-alone"
TIMEOUT_S = 2.5  # providers.openai.sdk.timeout_s
#: Margin of the paired claims, in standard errors of the paired difference.
Z_ORDER = 2.0
#: Float slack of times computed as sums of simulated times.
EPS = 1e-9


@cache
def _run() -> sim.RunResult:
    """The scenario at its own size and seed, once per test process."""
    return sim.run(sim.load_scenario(REPO_ROOT / "scenarios" / f"{STEM}.yaml"))


def _calls(result: sim.RunResult, policy: str) -> pd.DataFrame:
    c = result.calls
    return c[c["policy"] == policy]


def _per_request(result: sim.RunResult, policy: str, column: str) -> np.ndarray:
    """`column` per request of `policy`, by request id (first sends only: no re-sends here)."""
    r = result.requests
    return r[r["policy"] == policy].sort_values("request_id")[column].to_numpy(float)


def calls_within_three_by_three(result: sim.RunResult) -> None:
    """At most 3 x 3 calls per request stacked, 3 in either loop alone; the stacking happens."""
    most = {p: int(_per_request(result, p, "calls").max()) for p in (STACKED, BARE, ALONE)}
    assert most[STACKED] <= 9
    assert most[BARE] <= 3
    assert most[ALONE] <= 3
    assert most[STACKED] > 3


def sdk_calls_restart_their_timeout(result: sim.RunResult) -> None:
    """Every call through the openai client lasts at most its own 2.5 s (restarted per SDK
    retry); those the client cut ended exactly then."""
    for policy in (STACKED, ALONE):
        c = _calls(result, policy)
        # simulated seconds from the call's send to its end (no wall clock is read)
        took = (c["end_s"] - c["start_s"]).to_numpy(float)
        assert took.max() <= TIMEOUT_S + EPS
        cut = (c["ended_by"] == "sdk").to_numpy()
        assert cut.any()
        assert np.allclose(took[cut], TIMEOUT_S, rtol=0, atol=EPS)


def sdk_retries_follow_the_sdks_rule(result: sim.RunResult) -> None:
    """Each SDK retry j follows a call the SDK itself retries (its timeout or a 5xx) after
    min(0.5 * 2^(j-1), 8) * (1 - 0.25 U) s, U in [0, 1): within (0.75 w, w]."""
    for policy in (STACKED, ALONE):
        c = _calls(result, policy).sort_values(["request_id", "attempt", "sdk_retry"])
        prev = c.shift(1)
        retry = (c["sdk_retry"] > 0).to_numpy()
        assert retry.any()
        same = (c["request_id"] == prev["request_id"]) & (c["attempt"] == prev["attempt"])
        assert same.to_numpy()[retry].all()
        assert (c["sdk_retry"] - prev["sdk_retry"]).to_numpy()[retry].tolist() == [1] * retry.sum()
        before = prev[retry]
        retried = (before["outcome"] == "error") | (
            (before["outcome"] == "timeout") & (before["ended_by"] == "sdk")
        )
        assert retried.all()
        j = c["sdk_retry"].to_numpy()[retry]
        w = np.minimum(0.5 * 2.0 ** (j - 1), 8.0)
        gap = c["start_s"].to_numpy()[retry] - before["end_s"].to_numpy(float)
        assert (gap > 0.75 * w - EPS).all()
        assert (gap <= w + EPS).all()


def _paired(result: sim.RunResult, a: str, b: str, column: str) -> tuple[float, float]:
    """(mean of a - b over the same requests, its standard error)."""
    d = _per_request(result, a, column) - _per_request(result, b, column)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))


def stacking_doubles_calls(result: sim.RunResult) -> None:
    """Stacked, the policy makes over 1.5 times the calls of the SDK's loop alone (paired:
    mean(stacked - alone) > 0.5 mean(alone) + Z_ORDER SE) and of the policy's loop alone."""
    for other in (ALONE, BARE):
        diff, se = _paired(result, STACKED, other, "calls")
        base = float(_per_request(result, other, "calls").mean())
        assert diff > 0.5 * base + Z_ORDER * se, (other, diff, base, se)


def stacking_buys_no_hit_rate(result: sim.RunResult) -> None:
    """Those extra calls do not raise the hit rate over the SDK's loop alone: the paired
    difference is below Z_ORDER SE."""
    diff, se = _paired(result, STACKED, ALONE, "ok")
    assert diff < Z_ORDER * se, (diff, se)


SDK_CHECKS: dict[str, tuple[Callable[[sim.RunResult], None], ...]] = {
    STEM: (
        calls_within_three_by_three,
        sdk_calls_restart_their_timeout,
        sdk_retries_follow_the_sdks_rule,
        stacking_doubles_calls,
        stacking_buys_no_hit_rate,
    )
}


@pytest.mark.parametrize("check", SDK_CHECKS[STEM], ids=[c.__name__ for c in SDK_CHECKS[STEM]])
def test_sdk_stacking(check: Callable[[sim.RunResult], None]) -> None:
    check(_run())
