"""sim.model.ratelimit: token-bucket refill, all-or-nothing admission, minute windows, split
quotas, Retry-After (whole seconds rounded up, never one second long), and two properties over
random traffic: a refused call sent again at its Retry-After is admitted, and no minute admits
more than the quota allows."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.ratelimit import MinuteWindow, Quota, TokenBucket, retry_after_header
from tests.helpers import ScriptedBank, build, serving, simulate, step


def test_bucket_starts_full_and_refills_at_capacity_per_minute() -> None:
    bucket = TokenBucket(120)  # 2 per second
    assert bucket.rate_per_s == 2.0
    assert bucket.available(0.0) == 120.0
    bucket.level -= 100  # take 100 at t = 0
    assert bucket.available(0.0) == 20.0
    assert bucket.available(10.0) == 40.0  # 10 s * 2/s
    assert bucket.available(25.0) == 70.0
    assert bucket.available(1000.0) == 120.0  # never above capacity


def test_bucket_refill_is_path_independent() -> None:
    one, many = TokenBucket(60), TokenBucket(60)
    one.level = many.level = 0.0
    for t in (0.5, 1.25, 7.0, 13.0):
        many.refill(t)
    one.refill(13.0)
    assert one.level == pytest.approx(many.level) == 13.0


def test_bucket_ignores_a_look_back_in_time() -> None:
    bucket = TokenBucket(60)
    bucket.level = 0.0
    bucket.refill(10.0)
    bucket.refill(5.0)
    assert bucket.level == 10.0
    assert bucket.updated == 10.0


def test_seconds_until() -> None:
    bucket = TokenBucket(60)  # 1 per second
    assert bucket.seconds_until(0.0, 60) == 0.0
    assert math.isinf(bucket.seconds_until(0.0, 61))  # more than capacity never fits
    bucket.level = 10.0
    assert bucket.seconds_until(0.0, 30) == pytest.approx(20.0)
    assert bucket.seconds_until(5.0, 30) == pytest.approx(15.0)
    assert bucket.seconds_until(5.0, 15) == 0.0


def test_admit_takes_both_buckets() -> None:
    quota = Quota(tpm=6000, rpm=60)
    assert quota.admit(0.0, 1000)
    assert quota.tokens is not None
    assert quota.requests is not None
    assert quota.tokens.level == 5000
    assert quota.requests.level == 59


def test_admit_takes_nothing_when_tokens_do_not_fit() -> None:
    quota = Quota(tpm=6000, rpm=60)
    assert not quota.admit(0.0, 6001)
    assert quota.tokens is not None
    assert quota.requests is not None
    assert (quota.tokens.level, quota.requests.level) == (6000, 60)


def test_admit_takes_nothing_when_requests_do_not_fit() -> None:
    quota = Quota(tpm=6000, rpm=2)
    assert quota.admit(0.0, 100)
    assert quota.admit(0.0, 100)
    assert not quota.admit(0.0, 100)  # rpm exhausted
    assert quota.tokens is not None
    assert quota.tokens.level == 5800  # the refused call took no tokens
    # rpm 2 refills one request every 30 s
    assert not quota.admit(29.9, 100)
    assert quota.admit(30.0, 100)


def test_exhausted_tokens_refill_then_admit() -> None:
    quota = Quota(tpm=1200, rpm=None)  # 20 tokens/s
    assert quota.admit(0.0, 1000)
    assert not quota.admit(0.0, 1000)
    assert quota.retry_after(0.0, 1000) == pytest.approx(40.0)  # 800 missing at 20/s
    assert not quota.admit(39.9, 1000)
    assert quota.admit(40.0, 1000)


def test_retry_after_is_the_longer_wait() -> None:
    quota = Quota(tpm=600, rpm=6)  # 10 tokens/s, one request per 10 s
    assert quota.retry_after(0.0, 500) == 0.0
    assert quota.admit(0.0, 500)  # tokens left 100, requests left 5
    assert quota.retry_after(0.0, 500) == pytest.approx(40.0)  # tokens: 400 missing at 10/s
    quota.requests.level = 0.0  # type: ignore[union-attr]
    assert quota.retry_after(0.0, 150) == pytest.approx(10.0)  # requests: 1 missing at 0.1/s
    assert quota.retry_after(0.0, 300) == pytest.approx(20.0)  # tokens: 200 missing
    assert math.isinf(quota.retry_after(0.0, 601))


def test_no_limits_always_admit() -> None:
    quota = Quota(tpm=None, rpm=None)
    assert quota.tokens is None
    assert quota.requests is None
    assert all(quota.admit(0.0, 10**9) for _ in range(100))
    assert quota.retry_after(0.0, 10**9) == 0.0


# ----------------------------------------------------------------------------- windows


def test_minute_window_frees_what_was_taken_60_s_later() -> None:
    window = MinuteWindow(600)
    assert window.fits(0.0, 600)
    window.take(0.0, 400)
    window.take(10.0, 200)
    assert not window.fits(30.0, 1)
    assert window.seconds_until(30.0, 300) == pytest.approx(30.0)  # the t=0 charge leaves at 60
    assert window.seconds_until(30.0, 500) == pytest.approx(40.0)  # both must leave
    assert window.fits(60.0, 400)
    assert window.seconds_until_full(60.0) == pytest.approx(10.0)


def test_steady_start_is_a_used_up_minute() -> None:
    bucket = TokenBucket(600, start="steady")
    assert bucket.available(0.0) == 0.0
    assert bucket.available(30.0) == pytest.approx(300.0)
    window = MinuteWindow(600, start="steady")
    assert window.available(0.0) == pytest.approx(0.0)
    assert window.available(30.5) == pytest.approx(300.0)  # 30 one-second shares aged out


def test_split_quota_charges_input_and_output_apart() -> None:
    quota = Quota(None, None, input_tpm=1000, output_tpm=100)
    assert quota.admit(0.0, 1050, input_tokens=1000)  # 1000 in, 50 out
    assert not quota.admit(0.0, 60, input_tokens=0)  # only 50 output tokens left
    assert quota.admit(0.0, 50, input_tokens=0)


def test_retry_after_header_modes() -> None:
    assert retry_after_header("exact", 0.25, 40.0) == 0.25
    assert retry_after_header("seconds", 1e-13, 40.0) == 1.0
    assert retry_after_header("seconds", 2.01, 40.0) == 3.0
    assert retry_after_header("window", 0.25, 40.0) == 40.0
    assert math.isinf(retry_after_header("seconds", math.inf, 0.0))


# ----------------------------------------------------------------------------- hypothesis

PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE") or "ci")

arrivals = st.lists(st.tuples(st.floats(0.0, 30.0), st.integers(1, 600)), min_size=1, max_size=40)


@PROFILE
@given(
    calls=arrivals,
    size=st.integers(1, 1000),
    window=st.sampled_from(["bucket", "minute"]),
    start=st.sampled_from(["full", "steady"]),
    mode=st.sampled_from(["exact", "seconds", "window"]),
)
def test_a_call_retried_at_its_retry_after_is_admitted(
    calls: list[tuple[float, int]], size: int, window: str, start: str, mode: str
) -> None:
    """Whatever came before, a refused call sent again exactly at its Retry-After (nothing else
    arriving meanwhile) is admitted."""
    quota = Quota(1000, 20, window=window, start=start)
    now = 0.0
    for gap, tokens in calls:
        now += gap
        quota.admit(now, tokens)
    if quota.admit(now, size):
        return
    exact = quota.retry_after(now, size)
    wait = retry_after_header(mode, exact, quota.reset_after(now))
    assert wait >= exact
    assert quota.admit(now + wait, size)


@PROFILE
@given(
    calls=st.lists(st.tuples(st.floats(0.0, 5.0), st.integers(1, 900)), min_size=1, max_size=80),
    window=st.sampled_from(["bucket", "minute"]),
    start=st.sampled_from(["full", "steady"]),
)
def test_tokens_admitted_in_any_minute_stay_within_capacity_plus_a_minute_of_refill(
    calls: list[tuple[float, int]], window: str, start: str
) -> None:
    capacity = 1000
    quota = Quota(capacity, None, window=window, start=start)
    now, admitted = 0.0, []
    for gap, tokens in calls:
        now += gap
        if quota.admit(now, tokens):
            admitted.append((now, tokens))
    # a bucket: at most a full bucket plus 60 s of refill; a minute window: at most its limit
    bound = 2 * capacity if window == "bucket" else capacity
    times = np.array([t for t, _ in admitted])
    sizes = np.array([k for _, k in admitted])
    for t in times:
        inside = (times >= t) & (times < t + 60.0)
        assert sizes[inside].sum() <= bound + 1e-6 * capacity


# ----------------------------------------------------------------------------- a whole-second wait

# Exact timelines in the engine: a step's call asks for 1000 + 100 = 1100 tokens; a TPM of 1200
# refills 20 tokens a second, so after request 0 takes 1100 at t=0, request 1 at t=1 finds 120
# and must wait exactly (1100 - 120) / 20 = 49 s, a float computed without rounding.

#: TPM refilling 20 tokens a second: whole-second waits for 1100-token calls (see above).
TPM = 1200


def quota_scenario(policy: dict[str, Any], retry_after: str = "seconds", **provider: Any) -> Any:
    """One step on p1 (1 s first token + 1 s generation) with a TPM of 1200 and `provider`
    keys; policy 'p'."""
    providers = {
        "p1": {"tpm": TPM, "retry_after": retry_after, "serves": {"big": serving()}, **provider}
    }
    return build([step("s1")], {"p": policy}, providers=providers)


def request_calls(result: Any, request: int) -> list[tuple]:
    """(attempt, sdk_retry, start_s, outcome, retry_after_s) of one request's calls."""
    calls = result.calls[result.calls["request_id"] == request].sort_values("start_s")
    return [
        (int(c.attempt), int(c.sdk_retry), float(c.start_s), str(c.outcome), float(c.retry_after_s))
        for c in calls.itertuples()
    ]


@pytest.mark.parametrize(("exact", "header"), [(49.0, 49.0), (48.5, 49.0), (0.2, 1.0), (1.0, 1.0)])
def test_retry_after_in_seconds_rounds_up_and_leaves_whole_waits_alone(
    exact: float, header: float
) -> None:
    """Bug: `int(exact) + 1` instead of `ceil(exact)` (49.0 -> 50, 1.0 -> 2). HTTP Retry-After
    is whole seconds, at least 1: a whole wait is sent as it is."""
    assert retry_after_header("seconds", exact, 0.0) == header
    assert retry_after_header("exact", exact, 0.0) == exact


@pytest.mark.parametrize(("arrival", "wait"), [(1.0, 49.0), (1.5, 49.0)])
def test_a_whole_second_retry_after_is_sent_and_waited_as_it_is(
    arrival: float, wait: float
) -> None:
    """Bug: `int(exact) + 1`. Request 1 at t=1 needs exactly 49 s (see `TPM`): the
    provider says 49, the retry starts at 50 and is admitted (the bucket holds 1100 again at
    t=50). At t=1.5 the exact wait is 48.5, rounded up to 49 (a control: the bug agrees)."""
    scenario = quota_scenario({"kind": "wait", "retries": 1})
    result = simulate(scenario, "p", ScriptedBank({}, n_requests=2), [0.0, arrival])
    assert request_calls(result, 1) == [
        (0, 0, arrival, "rate_limited", wait),
        (1, 0, arrival + wait, "ok", pytest.approx(np.nan, nan_ok=True)),
    ]
