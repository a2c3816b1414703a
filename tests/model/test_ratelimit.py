"""sim.model.ratelimit: token-bucket refill, all-or-nothing admission, Retry-After."""

from __future__ import annotations

import math

import pytest

from sim.model.ratelimit import Quota, TokenBucket


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
