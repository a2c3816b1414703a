"""sim.model.backoff: the backoff's waits, and Retry-After honoured or not by a policy and by an
SDK (`honour_retry_after`), on exact timelines (the quota of tests/model/test_ratelimit.py's
`quota_scenario`: a 49 s Retry-After at t=1)."""

from __future__ import annotations

import pytest

from sim.model.backoff import backoff_wait, retry_wait
from sim.model.config import BackoffSpec
from tests.helpers import ScriptedBank, simulate
from tests.model.test_ratelimit import quota_scenario, request_calls

# ----------------------------------------------------------------------------- retries


def test_backoff_waits() -> None:
    spec = BackoffSpec(base_s=1.0, max_s=5.0, multiplier=2.0, jitter="none")
    assert [backoff_wait(spec, k, 0.3) for k in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    full = spec.model_copy(update={"jitter": "full"})
    equal = spec.model_copy(update={"jitter": "equal"})
    assert backoff_wait(full, 2, 0.25) == 0.5
    assert backoff_wait(equal, 2, 0.25) == 1.25
    assert retry_wait(spec, 1, 0.3, 7.0) == 7.0  # Retry-After within the 60 s cap
    assert retry_wait(spec, 1, 0.3, 90.0) == 1.0  # beyond the cap: the backoff
    assert retry_wait(spec, 3, 0.3) == 4.0  # no Retry-After


# ----------------------------------------------------------------------------- honour_retry_after

#: A backoff without jitter: 2 s, then 4 s; Retry-After honoured or not.
BACKOFF = {"base_s": 2.0, "max_s": 8.0, "multiplier": 2.0, "jitter": "none"}


@pytest.mark.parametrize("honour", [True, False])
def test_a_policy_that_does_not_honour_retry_after_waits_its_own_backoff(honour: bool) -> None:
    """Bug: `honour_retry_after: false` ignored (Retry-After waited anyway). Request 1 meets a
    49 s Retry-After at t=1. Not honouring it, the policy retries after its backoff, 2 s then
    4 s (t=3 and t=7, both refused: the bucket is far from 1100); honouring it, at t=50."""
    policy = {"kind": "wait", "retries": 2, "backoff": {**BACKOFF, "honour_retry_after": honour}}
    result = simulate(quota_scenario(policy), "p", ScriptedBank({}, n_requests=2), [0.0, 1.0])
    got = [(a, start, outcome) for a, _, start, outcome, _ in request_calls(result, 1)]
    if honour:
        assert got == [(0, 1.0, "rate_limited"), (1, 50.0, "ok")]
    else:
        assert got == [(0, 1.0, "rate_limited"), (1, 3.0, "rate_limited"), (2, 7.0, "rate_limited")]


@pytest.mark.parametrize("honour", [True, False])
def test_an_sdk_that_does_not_honour_retry_after_waits_its_own_backoff(honour: bool) -> None:
    """The same bug below the policy: the provider's SDK retries a 429 after its backoff
    (2 s, 4 s: t=3, t=7) when told not to honour Retry-After, after 49 s (t=50) when told to."""
    sdk = {"retries": 2, "backoff": {**BACKOFF, "honour_retry_after": honour}}
    scenario = quota_scenario({"kind": "wait"}, sdk=sdk)
    result = simulate(scenario, "p", ScriptedBank({}, n_requests=2), [0.0, 1.0])
    got = [(s, start, outcome) for _, s, start, outcome, _ in request_calls(result, 1)]
    if honour:
        assert got == [(0, 1.0, "rate_limited"), (1, 50.0, "ok")]
    else:
        assert got == [(0, 1.0, "rate_limited"), (1, 3.0, "rate_limited"), (2, 7.0, "rate_limited")]
