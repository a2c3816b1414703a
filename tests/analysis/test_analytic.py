"""Unit and property tests for the closed forms in sim.analysis.analytic."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from itertools import accumulate
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.analysis.analytic import (
    all_fail,
    batch_means_se,
    binomial_se,
    chain_success,
    chain_success_with_retries,
    erlang_c,
    fenton_wilkinson,
    hedge_sf,
    littles_law_l,
    lognormal_quantile,
    lognormal_sf,
    mmc_mean_in_system,
    mmc_mean_wait,
    quantile_from_sf,
    quantile_se,
    race_sf,
    sum_sf_single_big_jump,
    wilson_interval,
)
from sim.model.latency import Z99, lognormal_params

MU, SIGMA = lognormal_params(1.0, 5.0)

probs = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
open_probs = st.floats(min_value=1e-6, max_value=1 - 1e-6, allow_nan=False)
times = st.floats(min_value=0.0, max_value=200.0, allow_nan=False)


def sf_ln(t: np.ndarray) -> np.ndarray:
    """Survival of the reference lognormal (median 1, p99 5)."""
    return np.asarray(lognormal_sf(MU, SIGMA, t))


# ----------------------------------------------------------------------------- existing API


def test_existing_lognormal_params_unchanged() -> None:
    assert math.isclose(Z99, NormalDist().inv_cdf(0.99), rel_tol=1e-12)
    mu, sigma = lognormal_params(2.0, 10.0)
    assert mu == pytest.approx(math.log(2.0))
    assert sigma == pytest.approx(math.log(5.0) / Z99)
    with pytest.raises(ValueError, match="median < p99"):
        lognormal_params(2.0, 1.0)


# ----------------------------------------------------------------------------- chains


def test_chain_success_known_values() -> None:
    assert chain_success(0.95, 10) == pytest.approx(0.5987, abs=5e-5)
    assert chain_success(0.95, 20) == pytest.approx(0.3585, abs=5e-5)
    assert chain_success(0.3, 0) == 1.0


def test_chain_success_with_retries_known_values() -> None:
    assert chain_success_with_retries(0.95, 10, 0) == pytest.approx(chain_success(0.95, 10))
    # one retry: per-step success 1 - 0.05**2 = 0.9975
    assert chain_success_with_retries(0.95, 10, 1) == pytest.approx(0.9975**10, rel=1e-14)
    assert chain_success_with_retries(1.0, 5, 3) == 1.0
    assert chain_success_with_retries(0.0, 5, 3) == 0.0
    # tiny p keeps precision: 1 - (1 - 1e-12)**2 ~ 2e-12
    assert chain_success_with_retries(1e-12, 1, 1) == pytest.approx(2e-12, rel=1e-9)


def test_all_fail_known_values() -> None:
    assert all_fail(0.1, 3) == pytest.approx(1e-3)
    assert all_fail(0.5, 1) == 0.5


@pytest.mark.parametrize(
    ("func", "args", "match"),
    [
        (chain_success, (1.1, 3), r"p must be in \[0, 1\]"),
        (chain_success, (-0.1, 3), r"p must be in \[0, 1\]"),
        (chain_success, (float("nan"), 3), r"p must be in \[0, 1\]"),
        (chain_success, (0.5, -1), "n must be >= 0"),
        (chain_success_with_retries, (0.5, 3, -1), "retries must be >= 0"),
        (chain_success_with_retries, (1.5, 3, 1), r"p must be in \[0, 1\]"),
        (all_fail, (0.5, 0), "k must be >= 1"),
        (all_fail, (2.0, 2), r"q must be in \[0, 1\]"),
    ],
)
def test_chain_functions_reject_impossible_inputs(
    func: Callable[..., float], args: tuple[float, ...], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        func(*args)


def test_chain_success_rejects_non_integer_steps() -> None:
    with pytest.raises(TypeError):
        chain_success(0.5, 2.5)  # type: ignore[arg-type]


@given(p=probs, n=st.integers(min_value=0, max_value=200))
def test_chain_success_falls_with_n(p: float, n: int) -> None:
    assert chain_success(p, n + 1) <= chain_success(p, n)


@given(p1=probs, p2=probs, n=st.integers(min_value=0, max_value=200))
def test_chain_success_rises_with_p(p1: float, p2: float, n: int) -> None:
    lo, hi = sorted((p1, p2))
    assert chain_success(lo, n) <= chain_success(hi, n)


@given(p=probs, n=st.integers(min_value=0, max_value=50), r=st.integers(min_value=0, max_value=5))
def test_retries_never_hurt(p: float, n: int, r: int) -> None:
    with_r = chain_success_with_retries(p, n, r)
    assert chain_success(p, n) <= with_r * (1 + 1e-12)
    assert with_r <= chain_success_with_retries(p, n, r + 1) * (1 + 1e-12)
    assert 0.0 <= with_r <= 1.0


# ----------------------------------------------------------------------------- lognormal


def test_lognormal_quantile_median_and_p99() -> None:
    assert lognormal_quantile(0.8, 4.0, 0.5) == pytest.approx(0.8, rel=1e-12)
    assert lognormal_quantile(0.8, 4.0, 0.99) == pytest.approx(4.0, rel=1e-12)
    mu, sigma = lognormal_params(0.8, 4.0)
    expected = math.exp(mu + sigma * NormalDist().inv_cdf(0.9))
    assert lognormal_quantile(0.8, 4.0, 0.9) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("q", [0.0, 1.0, -0.5, 1.5])
def test_lognormal_quantile_rejects_bad_q(q: float) -> None:
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\)"):
        lognormal_quantile(1.0, 5.0, q)


def test_lognormal_sf_matches_scipy_and_is_vectorised() -> None:
    t = np.array([-1.0, 0.0, 0.1, 1.0, 5.0, 50.0])
    got = lognormal_sf(MU, SIGMA, t)
    assert isinstance(got, np.ndarray)
    assert got.shape == t.shape
    # independent reference: P(X > t) = erfc((ln t - mu) / (sigma sqrt 2)) / 2, and 1 for t <= 0
    expected = np.array(
        [0.5 * math.erfc((math.log(x) - MU) / (SIGMA * math.sqrt(2))) if x > 0 else 1.0 for x in t]
    )
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    assert got[0] == 1.0
    assert got[1] == 1.0
    assert lognormal_sf(MU, SIGMA, 1.0) == pytest.approx(0.5)
    assert lognormal_sf(MU, SIGMA, 5.0) == pytest.approx(0.01)
    assert isinstance(lognormal_sf(MU, SIGMA, 2.0), float)


def test_lognormal_sf_rejects_bad_sigma() -> None:
    with pytest.raises(ValueError, match="sigma must be finite and > 0"):
        lognormal_sf(0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="sigma must be finite and > 0"):
        lognormal_sf(0.0, -1.0, 1.0)


# ----------------------------------------------------------------------------- races, hedges


def test_race_sf_is_power() -> None:
    t = np.linspace(0.0, 10.0, 11)
    np.testing.assert_allclose(race_sf(sf_ln, t, 3), sf_ln(t) ** 3, rtol=1e-14)
    assert race_sf(sf_ln, 1.0, 2) == pytest.approx(0.25)
    assert isinstance(race_sf(sf_ln, 1.0, 2), float)
    with pytest.raises(ValueError, match="k must be >= 1"):
        race_sf(sf_ln, 1.0, 0)


def test_hedge_sf_piecewise_and_limits() -> None:
    d = 2.0
    t = np.array([0.0, 1.0, 2.0, 3.0, 10.0])
    got = hedge_sf(sf_ln, t, d)
    expected = np.where(t <= d, sf_ln(t), sf_ln(t) * sf_ln(np.maximum(t - d, 0.0)))
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    # d = 0 is a plain race of two; d huge never fires
    np.testing.assert_allclose(hedge_sf(sf_ln, t, 0.0), race_sf(sf_ln, t, 2), rtol=1e-14)
    np.testing.assert_allclose(hedge_sf(sf_ln, t, 1e9), sf_ln(t), rtol=1e-14)
    assert isinstance(hedge_sf(sf_ln, 3.0, d), float)
    with pytest.raises(ValueError, match="d must be finite and >= 0"):
        hedge_sf(sf_ln, t, -1.0)


@given(t=times, k=st.integers(min_value=1, max_value=8))
def test_race_sf_below_sf(t: float, k: int) -> None:
    assert race_sf(sf_ln, t, k) <= sf_ln(np.asarray(t)) + 1e-15


@given(t=times, d=st.floats(min_value=0.0, max_value=50.0, allow_nan=False))
def test_hedge_between_race_and_single(t: float, d: float) -> None:
    h = hedge_sf(sf_ln, t, d)
    assert race_sf(sf_ln, t, 2) - 1e-15 <= h <= float(sf_ln(np.asarray(t))) + 1e-15


def test_quantile_from_sf_inverts_exponential() -> None:
    rate = 3.0

    def sf_exp(t: float) -> float:
        return math.exp(-rate * t)

    for q in (0.01, 0.5, 0.9, 0.99, 0.9999):
        assert quantile_from_sf(sf_exp, q) == pytest.approx(-math.log1p(-q) / rate, rel=1e-10)
    # a tiny starting bracket still grows to contain the answer
    assert quantile_from_sf(sf_exp, 0.99, hi=1e-6) == pytest.approx(math.log(100) / rate, rel=1e-10)


def test_quantile_from_sf_race_of_lognormals_closed_form() -> None:
    # fastest of k iid lognormals: sf(t)**k = 1 - q  =>  t = exp(mu + sigma * z(1 - (1-q)**(1/k)))
    k, q = 3, 0.99
    got = quantile_from_sf(lambda t: float(race_sf(sf_ln, t, k)), q)
    expected = math.exp(MU + SIGMA * NormalDist().inv_cdf(1.0 - (1.0 - q) ** (1.0 / k)))
    assert got == pytest.approx(expected, rel=1e-9)
    # the unhedged single attempt recovers p99 = 5
    assert quantile_from_sf(lambda t: float(sf_ln(np.asarray(t))), 0.99) == pytest.approx(5.0)


def test_quantile_from_sf_hedge_between_race_and_single() -> None:
    q = 0.99
    single = quantile_from_sf(lambda t: float(sf_ln(np.asarray(t))), q)
    race = quantile_from_sf(lambda t: float(race_sf(sf_ln, t, 2)), q)
    hedge = quantile_from_sf(lambda t: float(hedge_sf(sf_ln, t, 1.5)), q)
    assert race < hedge < single


def test_quantile_from_sf_errors() -> None:
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\)"):
        quantile_from_sf(lambda t: math.exp(-t), 1.0)
    with pytest.raises(ValueError, match="could not bracket"):
        quantile_from_sf(lambda t: 1.0, 0.5)  # never reaches the quantile
    # an atom at zero carrying mass >= q gives 0
    assert quantile_from_sf(lambda t: 0.4 * math.exp(-t), 0.5) == 0.0


# ----------------------------------------------------------------------------- sums


def test_fenton_wilkinson_matches_mean_and_variance() -> None:
    mus = [0.0, -0.5, 1.2]
    sigmas = [0.3, 0.9, 0.5]
    mean = sum(math.exp(m + s * s / 2) for m, s in zip(mus, sigmas, strict=True))
    var = sum(
        (math.exp(s * s) - 1) * math.exp(2 * m + s * s) for m, s in zip(mus, sigmas, strict=True)
    )
    mu, sigma = fenton_wilkinson(mus, sigmas)
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(mean, rel=1e-12)
    assert (math.exp(sigma**2) - 1) * math.exp(2 * mu + sigma**2) == pytest.approx(var, rel=1e-12)


def test_fenton_wilkinson_single_term_is_identity() -> None:
    mu, sigma = fenton_wilkinson([0.7], [0.4])
    assert mu == pytest.approx(0.7, rel=1e-12)
    assert sigma == pytest.approx(0.4, rel=1e-12)


def test_fenton_wilkinson_errors() -> None:
    with pytest.raises(ValueError, match="at least one"):
        fenton_wilkinson([], [])
    with pytest.raises(ValueError, match="differ in length"):
        fenton_wilkinson([0.0, 1.0], [0.5])
    with pytest.raises(ValueError, match="sigmas must be >= 0"):
        fenton_wilkinson([0.0], [-0.5])


def test_single_big_jump_formula_and_cap() -> None:
    t = np.array([0.0, 1.0, 5.0, 50.0])
    got = sum_sf_single_big_jump(sf_ln, t, 4)
    np.testing.assert_allclose(got, np.minimum(1.0, 4 * sf_ln(t)), rtol=1e-14)
    assert got[0] == 1.0
    assert got[1] == 1.0  # 4 * 0.5 capped
    assert sum_sf_single_big_jump(sf_ln, 5.0, 3) == pytest.approx(0.03)
    with pytest.raises(ValueError, match="n must be >= 0"):
        sum_sf_single_big_jump(sf_ln, 5.0, -1)


# ----------------------------------------------------------------------------- queues


def _erlang_c_exact(c: int, a: Fraction) -> Fraction:
    """Textbook Erlang C in exact rational arithmetic."""
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@given(rho=st.floats(min_value=0.0, max_value=0.99, allow_nan=False))
def test_erlang_c_single_server_is_rho(rho: float) -> None:
    assert erlang_c(1, rho * 2.0, 2.0) == pytest.approx(rho, rel=1e-12, abs=1e-15)


def test_erlang_c_textbook_values() -> None:
    assert erlang_c(2, 1.0, 1.0) == pytest.approx(1 / 3, rel=1e-14)
    assert mmc_mean_wait(2, 1.0, 1.0) == pytest.approx(1 / 3, rel=1e-14)
    for c, a in [(5, Fraction(7, 2)), (10, Fraction(9)), (3, Fraction(1, 10))]:
        assert erlang_c(c, float(a), 1.0) == pytest.approx(float(_erlang_c_exact(c, a)), rel=1e-12)


def test_erlang_c_large_c_is_stable() -> None:
    value = erlang_c(1000, 900.0, 1.0)
    assert math.isfinite(value)
    assert 0.0 < value < 1.0
    # more servers at the same load means less waiting
    assert erlang_c(1000, 950.0, 1.0) > value > erlang_c(1000, 800.0, 1.0)


def test_mm1_wait_and_occupancy() -> None:
    lam, mu = 3.0, 4.0
    rho = lam / mu
    assert mmc_mean_wait(1, lam, mu) == pytest.approx(rho / (mu - lam), rel=1e-14)
    assert mmc_mean_in_system(1, lam, mu) == pytest.approx(rho / (1 - rho), rel=1e-14)


def test_mmc_mean_in_system_textbook() -> None:
    # c=2, lambda=mu=1: Wq = 1/3, W = 4/3, L = 4/3
    assert mmc_mean_in_system(2, 1.0, 1.0) == pytest.approx(4 / 3, rel=1e-14)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((1, 1.0, 1.0), "utilisation"),
        ((2, 3.0, 1.0), "utilisation"),
        ((0, 0.5, 1.0), "c must be >= 1"),
        ((1, -0.1, 1.0), "arrival_rate must be finite and >= 0"),
        ((1, 0.5, 0.0), "service_rate must be finite and > 0"),
    ],
)
def test_queue_functions_reject_impossible_inputs(
    args: tuple[int, float, float], match: str
) -> None:
    for func in (erlang_c, mmc_mean_wait, mmc_mean_in_system):
        with pytest.raises(ValueError, match=match):
            func(*args)


@given(
    c=st.integers(min_value=1, max_value=60),
    rho=st.floats(min_value=0.01, max_value=0.98, allow_nan=False),
)
def test_erlang_c_is_a_probability_and_falls_with_servers(c: int, rho: float) -> None:
    lam = rho * c  # mu = 1
    value = erlang_c(c, lam, 1.0)
    assert 0.0 <= value <= 1.0
    assert erlang_c(c + 1, lam, 1.0) <= value + 1e-12


def test_littles_law() -> None:
    assert littles_law_l(2.5, 4.0) == 10.0
    with pytest.raises(ValueError, match="arrival_rate"):
        littles_law_l(-1.0, 1.0)
    with pytest.raises(ValueError, match="mean_time_in_system"):
        littles_law_l(1.0, -1.0)


# ----------------------------------------------------------------------------- estimation error


def test_wilson_interval_textbook_value() -> None:
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=5e-4)
    assert hi == pytest.approx(0.9433, abs=5e-4)


def test_wilson_interval_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0
    assert 0.0 < hi < 0.2
    lo, hi = wilson_interval(20, 20)
    assert hi == 1.0
    assert 0.8 < lo < 1.0
    with pytest.raises(ValueError, match="successes must be <= n"):
        wilson_interval(11, 10)
    with pytest.raises(ValueError, match="successes must be >= 0"):
        wilson_interval(-1, 10)
    with pytest.raises(ValueError, match="z must be finite and > 0"):
        wilson_interval(1, 10, z=0.0)


@given(data=st.data(), n=st.integers(min_value=1, max_value=10_000))
def test_wilson_interval_contains_p_hat(data: st.DataObject, n: int) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))
    lo, hi = wilson_interval(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_binomial_se() -> None:
    assert binomial_se(0.5, 100) == pytest.approx(0.05)
    assert binomial_se(0.0, 10) == 0.0
    with pytest.raises(ValueError, match="n must be >= 1"):
        binomial_se(0.5, 0)
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        binomial_se(1.5, 10)


def test_quantile_se() -> None:
    # median of a standard normal: sqrt(0.25/n) / phi(0) = sqrt(pi/(2n))
    n = 400
    got = quantile_se(1.0 / math.sqrt(2 * math.pi), 0.5, n)
    assert got == pytest.approx(math.sqrt(math.pi / (2 * n)), rel=1e-12)
    with pytest.raises(ValueError, match="sf_density_at_q must be finite and > 0"):
        quantile_se(0.0, 0.5, n)
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\)"):
        quantile_se(1.0, 1.0, n)
    with pytest.raises(ValueError, match="n must be >= 1"):
        quantile_se(1.0, 0.5, 0)


def test_batch_means_se_iid_normal() -> None:
    # With 100 batches the estimate's relative sd is about 1/sqrt(2*99) ~ 7%; allow 25% (3.5 sd).
    rng = np.random.default_rng(20240601)
    sigma, n = 2.0, 100_000
    x = rng.normal(0.0, sigma, size=n)
    assert batch_means_se(x, batches=100) == pytest.approx(sigma / math.sqrt(n), rel=0.25)


def test_batch_means_se_ar1_inflates_naive_se() -> None:
    # AR(1) with phi=0.9: se of the mean is the iid se times sqrt((1+phi)/(1-phi)) = sqrt(19).
    # 50 batches of 4000 (>> correlation time ~10): relative sd ~ 10%; allow 35%.
    rng = np.random.default_rng(7)
    phi, n = 0.9, 200_000
    x = np.fromiter(accumulate(rng.normal(size=n), lambda acc, e: phi * acc + e), float, n)
    sd_x = 1.0 / math.sqrt(1 - phi**2)
    expected = sd_x / math.sqrt(n) * math.sqrt((1 + phi) / (1 - phi))
    assert batch_means_se(x, batches=50) == pytest.approx(expected, rel=0.35)


def test_batch_means_se_drops_remainder_and_validates() -> None:
    x = np.arange(41, dtype=float)
    y = x.copy()
    y[-1] = 1e6  # the 41st sample is the dropped remainder for 20 batches of 2
    assert batch_means_se(x, 20) == batch_means_se(y, 20)
    with pytest.raises(ValueError, match="batches must be >= 2"):
        batch_means_se(x, 1)
    with pytest.raises(ValueError, match="need at least 20 samples"):
        batch_means_se(x[:5], 20)
    with pytest.raises(ValueError, match="one-dimensional"):
        batch_means_se(np.ones((10, 10)), 2)


@settings(max_examples=25)
@given(p=open_probs, n=st.integers(min_value=1, max_value=10_000))
def test_binomial_se_shrinks_with_n(p: float, n: int) -> None:
    assert binomial_se(p, 4 * n) == pytest.approx(binomial_se(p, n) / 2, rel=1e-12)
