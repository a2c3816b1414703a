"""sim.model.latency: exact properties of each distribution, inverse-transform sampling,
CallLatency."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from sim.model.config import DistSpec, ServingSpec
from sim.model.latency import (
    ERROR,
    INVALID,
    OK,
    U_OUTCOME,
    U_SPEED,
    U_STALL,
    U_STALL_EXTRA,
    U_TTFT,
    UNIFORMS_PER_CALL,
    CallLatency,
    Constant,
    Distribution,
    Empirical,
    Exponential,
    LogNormal,
    build_distribution,
)

GRID = np.array([1e-6, 0.001, 0.05, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1 - 1e-6])


# ----------------------------------------------------------------------------- LogNormal


@pytest.mark.parametrize(("median", "p99"), [(1.0, 5.0), (0.8, 4.0), (30.0, 80.0), (2.0, 2.001)])
def test_lognormal_from_median_p99_hits_both_exactly(median: float, p99: float) -> None:
    dist = LogNormal.from_median_p99(median, p99)
    assert dist.median == pytest.approx(median, rel=1e-12)
    assert dist.quantile(0.5) == pytest.approx(median, rel=1e-12)
    assert dist.quantile(0.99) == pytest.approx(p99, rel=1e-12)
    assert float(dist.cdf(p99)) == pytest.approx(0.99, abs=1e-12)
    assert float(dist.sf(median)) == pytest.approx(0.5, abs=1e-12)


def test_lognormal_matches_scipy() -> None:
    dist = LogNormal.from_median_p99(1.5, 9.0)
    ref = stats.lognorm(s=dist.sigma, scale=math.exp(dist.mu))
    t = np.array([0.01, 0.5, 1.5, 4.0, 9.0, 50.0])
    np.testing.assert_allclose(dist.cdf(t), ref.cdf(t), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dist.from_uniform(GRID), ref.ppf(GRID), rtol=1e-10)
    assert dist.mean == pytest.approx(ref.mean(), rel=1e-12)


def test_lognormal_cdf_at_zero_and_below() -> None:
    dist = LogNormal(0.0, 1.0)
    np.testing.assert_array_equal(dist.cdf(np.array([0.0, -1.0])), [0.0, 0.0])
    np.testing.assert_array_equal(dist.sf(np.array([0.0, -1.0])), [1.0, 1.0])


# ----------------------------------------------------------------------------- all kinds agree

CONTINUOUS: list[Distribution] = [
    LogNormal.from_median_p99(1.0, 5.0),
    LogNormal(-0.3, 0.2),
    Exponential(2.5),
]


@pytest.mark.parametrize("dist", CONTINUOUS, ids=repr)
def test_continuous_cdf_inverts_from_uniform(dist: Distribution) -> None:
    x = dist.from_uniform(GRID)
    np.testing.assert_allclose(dist.cdf(x), GRID, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dist.sf(x), 1.0 - GRID, rtol=1e-9, atol=1e-12)
    for q in (0.1, 0.5, 0.95):
        assert float(dist.cdf(dist.quantile(q))) == pytest.approx(q, rel=1e-12)
    assert np.all(np.diff(x) > 0)  # quantiles increase with u


def test_exponential_exact_values() -> None:
    dist = Exponential(2.0)
    assert dist.mean == 2.0
    assert dist.quantile(0.5) == pytest.approx(2.0 * math.log(2.0), rel=1e-15)
    np.testing.assert_allclose(dist.from_uniform(np.array([0.0, 0.75])), [0.0, 2 * math.log(4)])
    np.testing.assert_allclose(dist.cdf(np.array([-1.0, 0.0, 2.0])), [0.0, 0.0, 1 - math.exp(-1)])
    assert float(dist.sf(4.0)) == pytest.approx(math.exp(-2.0), rel=1e-12)


def test_constant_is_a_step() -> None:
    dist = Constant(3.5)
    np.testing.assert_array_equal(dist.from_uniform(GRID), np.full(len(GRID), 3.5))
    assert dist.quantile(0.01) == dist.quantile(0.99) == dist.median == dist.mean == 3.5
    np.testing.assert_array_equal(dist.cdf(np.array([3.49, 3.5, 4.0])), [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(dist.sf(np.array([3.49, 3.5])), [1.0, 0.0])
    assert dist.sample(np.random.default_rng(1), 4).tolist() == [3.5] * 4


def test_empirical_resamples_sorted_values_equally() -> None:
    dist = Empirical(np.array([4.0, 1.0, 3.0, 2.0]))
    np.testing.assert_array_equal(dist.samples, [1.0, 2.0, 3.0, 4.0])
    u = np.array([0.0, 0.2499, 0.25, 0.5, 0.74, 0.75, 0.9999, 1.0])
    np.testing.assert_array_equal(dist.from_uniform(u), [1, 1, 2, 3, 3, 4, 4, 4])
    np.testing.assert_array_equal(
        dist.cdf(np.array([0.5, 1.0, 2.5, 4.0, 9.0])), [0, 0.25, 0.5, 1, 1]
    )
    np.testing.assert_array_equal(dist.sf(np.array([1.0, 3.0])), [0.75, 0.25])
    assert dist.mean == 2.5
    assert dist.median == 3.0  # the value at u = 0.5: the upper of the two middle samples
    # quantile and cdf agree the way they must for a step function: cdf(quantile(q)) >= q
    for q in GRID:
        x = dist.quantile(float(q))
        assert float(dist.cdf(x)) >= q
        assert float(dist.cdf(np.nextafter(x, -np.inf))) <= q


def test_empirical_draws_each_sample_equally_often() -> None:
    dist = Empirical(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    n = 50_000
    values = dist.sample(np.random.default_rng(11), n)
    counts = np.array([(values == v).sum() for v in dist.samples])
    assert counts.sum() == n
    # each count ~ Binomial(n, 0.2): SE = sqrt(n * 0.2 * 0.8) ~ 89; allow 4 SE
    se = math.sqrt(n * 0.2 * 0.8)
    assert np.all(np.abs(counts - n / 5) < 4 * se)


# ----------------------------------------------------------------------------- sampling


@pytest.mark.parametrize(
    "dist",
    [*CONTINUOUS, Empirical(np.arange(1.0, 11.0)), Constant(1.0)],
    ids=lambda d: type(d).__name__,
)
def test_sampling_uses_only_the_given_generator(dist: Distribution) -> None:
    np.random.seed(123)
    random.seed(123)
    np_state, py_state = np.random.get_state()[1].copy(), random.getstate()
    first = dist.sample(np.random.default_rng(42), 1000)
    second = dist.sample(np.random.default_rng(42), 1000)
    np.testing.assert_array_equal(first, second)
    # inverse transform of exactly the generator's uniforms, nothing else
    np.testing.assert_array_equal(first, dist.from_uniform(np.random.default_rng(42).random(1000)))
    # global random state untouched
    np.testing.assert_array_equal(np.random.get_state()[1], np_state)
    assert random.getstate() == py_state
    if not isinstance(dist, Constant):
        assert not np.array_equal(first, dist.sample(np.random.default_rng(43), 1000))


def test_lognormal_sample_median_and_p99_within_se() -> None:
    dist = LogNormal.from_median_p99(1.0, 5.0)
    n = 40_000
    x = dist.sample(np.random.default_rng(2024), n)
    # the fraction below a true quantile q is Binomial(n, q)/n: SE = sqrt(q(1-q)/n); allow 4 SE
    for q in (0.5, 0.99):
        frac = float(np.mean(x <= dist.quantile(q)))
        assert abs(frac - q) < 4 * math.sqrt(q * (1 - q) / n)


# ----------------------------------------------------------------------------- truncated LogNormal


def _scipy_truncated(dist: LogNormal) -> stats.rv_continuous:
    """scipy's lognormal truncated above at `dist.upper` (its log is a truncated normal)."""
    b = (math.log(dist.upper) - dist.mu) / dist.sigma
    return stats.truncnorm(-np.inf, b, loc=dist.mu, scale=dist.sigma)


@pytest.mark.parametrize("upper", [1.2, 3.0, 8.0])
def test_truncated_lognormal_matches_scipy_exactly(upper: float) -> None:
    """Quantile, cdf and mean are scipy's truncated law's (log x ~ truncnorm(-inf, b))."""
    dist = LogNormal.from_median_p99(1.0, 5.0, upper)
    ref = _scipy_truncated(dist)
    np.testing.assert_allclose(dist.from_uniform(GRID), np.exp(ref.ppf(GRID)), rtol=1e-9)
    t = np.array([0.05, 0.5, 1.0, upper * 0.99, upper, upper * 2])
    np.testing.assert_allclose(dist.cdf(t), ref.cdf(np.log(t)), rtol=1e-9, atol=1e-15)
    mean = ref.expect(np.exp)
    assert dist.mean == pytest.approx(mean, rel=1e-6)
    assert dist.median == pytest.approx(math.exp(ref.ppf(0.5)), rel=1e-9)


def test_truncated_lognormal_sample_quantiles_within_se_of_scipy() -> None:
    """Seeded draws (inverse CDF on u * F(max)) have scipy's truncated quantiles: the share of
    draws below scipy's q-quantile is Binomial(n, q)/n, SE sqrt(q(1-q)/n); allow 4 SE."""
    dist = LogNormal.from_median_p99(1.0, 5.0, 4.0)
    ref = _scipy_truncated(dist)
    n = 50_000
    x = dist.sample(np.random.default_rng(2026), n)
    assert x.max() <= 4.0
    for q in (0.5, 0.9, 0.95, 0.99):
        frac = float(np.mean(x <= math.exp(ref.ppf(q))))
        assert abs(frac - q) < 4 * math.sqrt(q * (1 - q) / n), q


def test_truncation_keeps_common_random_numbers() -> None:
    """Same uniform, same rank: the truncated draw is monotone in u, never above the plain
    draw nor the ceiling, and a ceiling far out changes nothing visible."""
    u = np.random.default_rng(5).random(10_000)
    plain = LogNormal.from_median_p99(1.0, 5.0)
    cut = LogNormal.from_median_p99(1.0, 5.0, 3.0)
    a, b = plain.from_uniform(u), cut.from_uniform(u)
    assert np.all(b <= a)
    assert np.all(b <= 3.0)
    order = np.argsort(u)
    assert np.all(np.diff(b[order]) >= 0)
    far = LogNormal.from_median_p99(1.0, 5.0, 1e6)
    np.testing.assert_allclose(far.from_uniform(u), a, rtol=1e-12)
    # no ceiling: the very same numbers as before `upper` existed
    np.testing.assert_array_equal(a, np.exp(plain.mu + plain.sigma * stats.norm.ppf(u)))


def test_dist_spec_max_builds_a_truncated_lognormal() -> None:
    dist = build_distribution(DistSpec(median=1.0, p99=5.0, max=3.0))
    assert isinstance(dist, LogNormal)
    assert dist.upper == 3.0
    assert build_distribution(DistSpec(median=1.0, p99=5.0)).upper == math.inf
    assert build_distribution(DistSpec(dist="lognormal", mu=0.0, sigma=1.0, max=2.0)).upper == 2.0
    with pytest.raises(ValueError, match="only a lognormal takes a max"):
        DistSpec(dist="exponential", mean=1.0, max=3.0)
    with pytest.raises(ValueError, match="greater than 0"):
        DistSpec(median=1.0, p99=5.0, max=-1.0)


# ----------------------------------------------------------------------------- build_distribution


def test_build_distribution_of_each_kind() -> None:
    ln = build_distribution(DistSpec(median=2.0, p99=10.0))
    assert isinstance(ln, LogNormal)
    assert ln.quantile(0.99) == pytest.approx(10.0, rel=1e-12)
    assert build_distribution(DistSpec(dist="lognormal", mu=0.5, sigma=0.25)) == LogNormal(
        0.5, 0.25
    )
    assert build_distribution(DistSpec(dist="exponential", mean=3.0)) == Exponential(3.0)
    assert build_distribution(DistSpec(dist="constant", value=0.0)) == Constant(0.0)
    spec = DistSpec(dist="empirical", file="x.csv")
    with pytest.raises(ValueError, match="without samples"):
        build_distribution(spec)
    spec.attach_samples(np.array([2.0, 1.0]))
    emp = build_distribution(spec)
    assert isinstance(emp, Empirical)
    np.testing.assert_array_equal(emp.samples, [1.0, 2.0])


# ----------------------------------------------------------------------------- CallLatency


def _law(stall_p: float = 0.03, error_rate: float = 0.1, invalid_rate: float = 0.2) -> CallLatency:
    return CallLatency(
        ttft=Exponential(1.0),
        tokens_per_s=Constant(50.0),
        stall_probability=stall_p,
        stall_extra=Constant(30.0),
        error_rate=error_rate,
        invalid_rate=invalid_rate,
    )


def test_draw_columns_map_to_their_quantities() -> None:
    u = np.full((3, UNIFORMS_PER_CALL), 0.5)
    u[:, U_TTFT] = [0.0, 0.5, 0.75]
    draws = _law().draw(u, output_tokens=100)
    np.testing.assert_allclose(draws.ttft, [0.0, math.log(2.0), math.log(4.0)])
    assert draws.generation == [2.0, 2.0, 2.0]  # 100 tokens at a constant 50 tok/s
    assert [U_TTFT, U_SPEED, U_STALL, U_STALL_EXTRA, U_OUTCOME] == [0, 1, 2, 3, 4]


def test_draw_stalls_only_where_u_below_probability() -> None:
    u = np.full((5, UNIFORMS_PER_CALL), 0.9)
    u[:, U_STALL] = [0.0, 0.0299, 0.03, 0.031, 0.9]
    draws = _law(stall_p=0.03).draw(u, output_tokens=100)
    assert draws.stall == [30.0, 30.0, 0.0, 0.0, 0.0]


def test_draw_stall_extra_follows_its_own_column() -> None:
    law = CallLatency(Constant(1.0), Constant(10.0), 0.5, Exponential(10.0), 0.0, 0.0)
    u = np.full((2, UNIFORMS_PER_CALL), 0.1)
    u[:, U_STALL_EXTRA] = [0.5, 0.75]
    np.testing.assert_allclose(law.draw(u, 10).stall, [10 * math.log(2), 10 * math.log(4)])


def test_draw_without_stall_spec_never_stalls() -> None:
    law = CallLatency(Constant(1.0), Constant(10.0), 0.0, None, 0.0, 0.0)
    u = np.zeros((4, UNIFORMS_PER_CALL))
    assert law.draw(u, 10).stall == [0.0] * 4


def test_draw_outcomes_by_rate_boundaries() -> None:
    u = np.full((6, UNIFORMS_PER_CALL), 0.5)
    u[:, U_OUTCOME] = [0.0, 0.1249, 0.125, 0.3749, 0.375, 0.99]  # binary-exact boundaries
    draws = _law(error_rate=0.125, invalid_rate=0.25).draw(u, output_tokens=100)
    assert draws.outcome == [ERROR, ERROR, INVALID, INVALID, OK, OK]


def test_draw_rates_hold_on_random_uniforms() -> None:
    n = 100_000
    u = np.random.default_rng(5).random((n, UNIFORMS_PER_CALL))
    draws = _law(stall_p=0.03, error_rate=0.01, invalid_rate=0.02).draw(u, output_tokens=100)
    outcome = np.asarray(draws.outcome)
    stall = np.asarray(draws.stall)
    # each frequency is Binomial(n, p)/n: SE = sqrt(p(1-p)/n); allow 4 SE
    for observed, p in (
        (np.mean(outcome == ERROR), 0.01),
        (np.mean(outcome == INVALID), 0.02),
        (np.mean(stall > 0), 0.03),
    ):
        assert abs(observed - p) < 4 * math.sqrt(p * (1 - p) / n)
    # the stall is independent of the outcome: it uses another column
    both = np.mean((stall > 0) & (outcome == INVALID))
    assert abs(both - 0.03 * 0.02) < 4 * math.sqrt(0.0006 / n)


def test_from_spec_reads_every_field() -> None:
    spec = ServingSpec.model_validate(
        {
            "ttft_s": {"median": 0.8, "p99": 4.0},
            "tokens_per_s": {"dist": "constant", "value": 60},
            "stall": {"probability": 0.03, "extra_s": {"dist": "exponential", "mean": 30}},
            "error_rate": 0.01,
            "invalid_rate": 0.02,
        }
    )
    law = CallLatency.from_spec(spec)
    assert law.ttft.quantile(0.99) == pytest.approx(4.0, rel=1e-12)
    assert law.tokens_per_s == Constant(60.0)
    assert law.stall_probability == 0.03
    assert law.stall_extra == Exponential(30.0)
    assert (law.error_rate, law.invalid_rate) == (0.01, 0.02)
    plain = CallLatency.from_spec(
        ServingSpec.model_validate(
            {"ttft_s": {"median": 1, "p99": 2}, "tokens_per_s": {"median": 5, "p99": 9}}
        )
    )
    assert (plain.stall_probability, plain.stall_extra) == (0.0, None)
