"""Closed forms the simulator is held to (pure math, no simulation, no I/O)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np
from scipy.special import ndtr, ndtri

from sim.model.latency import lognormal_params

#: Maximum number of doublings of the upper bracket in `quantile_from_sf` before giving up.
_MAX_DOUBLINGS = 200


# --------------------------------------------------------------------------- validation helpers


def _check_prob(name: str, p: float) -> float:
    """Return p as a float after checking it is a probability, so bad inputs fail loudly."""
    p = float(p)
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {p}")
    return p


def _check_open_prob(name: str, q: float) -> float:
    """Return q as a float after checking 0 < q < 1, since quantiles at 0 or 1 may be infinite."""
    q = float(q)
    if not (0.0 < q < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {q}")
    return q


def _check_int(name: str, n: int, minimum: int) -> int:
    """Return n as an int after checking it is an integer >= minimum (TypeError if not integral)."""
    n = operator.index(n)
    if n < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {n}")
    return n


def _check_positive(name: str, x: float) -> float:
    """Return x as a float after checking it is finite and > 0, e.g. a rate or a scale."""
    x = float(x)
    if not (0.0 < x < math.inf):
        raise ValueError(f"{name} must be finite and > 0, got {x}")
    return x


def _check_nonneg(name: str, x: float) -> float:
    """Return x as a float after checking it is finite and >= 0, e.g. an arrival rate or delay."""
    x = float(x)
    if not (0.0 <= x < math.inf):
        raise ValueError(f"{name} must be finite and >= 0, got {x}")
    return x


def _out(values: np.ndarray, scalar: bool) -> float | np.ndarray:
    """Return a float for scalar input and the array otherwise, so callers keep their kind."""
    return float(values) if scalar else values


# --------------------------------------------------------------------------- chains and retries


def chain_success(p: float, n: int) -> float:
    """Return p**n, the success probability of n independent sequential steps of success p."""
    p = _check_prob("p", p)
    n = _check_int("n", n, 0)
    return p**n


def chain_success_with_retries(p: float, n: int, retries: int) -> float:
    """Return (1-(1-p)**(retries+1))**n: n sequential steps, each retried up to `retries` times."""
    p = _check_prob("p", p)
    n = _check_int("n", n, 0)
    retries = _check_int("retries", retries, 0)
    # 1 - (1-p)**(r+1) via expm1/log1p so tiny p keeps full precision; + 0.0 avoids -0.0.
    step = -math.expm1((retries + 1) * math.log1p(-p)) + 0.0 if p < 1.0 else 1.0
    return step**n


def all_fail(q: float, k: int) -> float:
    """Return q**k, the probability that all k independent attempts fail when each fails w.p. q."""
    q = _check_prob("q", q)
    k = _check_int("k", k, 1)
    return q**k


def loop_success_geometric(q: float, mean: float) -> float:
    """Return E[q^N] = q p / (1 - (1 - p) q), p = 1/mean: a loop of N steps of success q, N
    geometric counting from 1 (its generating function at q)."""
    q = _check_prob("q", q)
    if not mean >= 1:
        raise ValueError(f"mean must be >= 1, got {mean}")
    p = 1.0 / mean
    return q * p / (1.0 - (1.0 - p) * q)


def loop_success_poisson(q: float, mean: float) -> float:
    """Return E[q^N] = q exp(mean (q - 1)): a loop of N = 1 + Poisson(mean) steps of success q."""
    q = _check_prob("q", q)
    mean = _check_nonneg("mean", mean)
    return q * math.exp(mean * (q - 1.0))


def repeat_valid(r: float, asks: int) -> float:
    """Return 1 - r^K: a step re-asked while invalid (junk rate r), at most K asks in all."""
    r = _check_prob("r", r)
    asks = _check_int("asks", asks, 1)
    return 1.0 - r**asks


def order_statistic_cdf(f: float, n: int, k: int) -> float:
    """Return P(X_(k) <= t) for n iid copies with P(X <= t) = f: the k-th fastest of a map
    joined on its first k (k = n: the join-all maximum, f^n)."""
    f = _check_prob("f", f)
    n = _check_int("n", n, 1)
    k = _check_int("k", k, 1)
    return float(sum(math.comb(n, j) * f**j * (1 - f) ** (n - j) for j in range(k, n + 1)))


# --------------------------------------------------------------------------- lognormal latencies


def lognormal_quantile(median: float, p99: float, q: float) -> float:
    """Return the q-quantile of the lognormal given by (median, p99), to check percentiles."""
    q = _check_open_prob("q", q)
    mu, sigma = lognormal_params(median, p99)
    return math.exp(mu + sigma * float(ndtri(q)))


def lognormal_sf(mu: float, sigma: float, t: float | np.ndarray) -> float | np.ndarray:
    """Return P(X > t) for X ~ Lognormal(mu, sigma), 1 for t <= 0; vectorised over t."""
    sigma = _check_positive("sigma", sigma)
    mu = float(mu)
    if not math.isfinite(mu):
        raise ValueError(f"mu must be finite, got {mu}")
    scalar = np.ndim(t) == 0
    t_arr = np.asarray(t, dtype=float)
    positive = t_arr > 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (np.log(np.where(positive, t_arr, 1.0)) - mu) / sigma
    values = np.where(positive, ndtr(-z), 1.0)
    return _out(values, scalar)


# --------------------------------------------------------------------------- races and hedges


def race_sf(
    sf: Callable[[np.ndarray], np.ndarray], t: float | np.ndarray, k: int
) -> float | np.ndarray:
    """Return sf(t)**k, the survival of the fastest of k iid attempts (first-response-wins race)."""
    k = _check_int("k", k, 1)
    scalar = np.ndim(t) == 0
    t_arr = np.asarray(t, dtype=float)
    values = np.asarray(sf(t_arr), dtype=float) ** k
    return _out(values, scalar)


def hedge_sf(
    sf: Callable[[np.ndarray], np.ndarray], t: float | np.ndarray, d: float
) -> float | np.ndarray:
    """Return P(min(X1, d + X2) > t) for a hedge fired d after the first attempt (X >= 0 iid)."""
    d = _check_nonneg("d", d)
    scalar = np.ndim(t) == 0
    t_arr = np.asarray(t, dtype=float)
    late = t_arr > d
    # Only evaluate the hedge's survival where it has started; elsewhere its factor is 1.
    hedge_factor = np.where(late, np.asarray(sf(np.where(late, t_arr - d, 0.0)), dtype=float), 1.0)
    values = np.asarray(sf(t_arr), dtype=float) * hedge_factor
    return _out(values, scalar)


def quantile_from_sf(sf: Callable[[float], float], q: float, hi: float | None = None) -> float:
    """Return t with 1 - sf(t) = q for a nonnegative variable (race/hedge quantiles), by brentq."""
    q = _check_open_prob("q", q)
    target = 1.0 - q
    if float(sf(0.0)) <= target:
        return 0.0  # atom at zero already carries at least mass q
    upper = 1.0 if hi is None else _check_positive("hi", hi)
    for _ in range(_MAX_DOUBLINGS):
        if float(sf(upper)) < target:
            break
        upper *= 2.0
    else:
        raise ValueError(f"could not bracket the {q}-quantile: sf stays >= {target} up to {upper}")
    from scipy.optimize import brentq  # noqa: PLC0415 - a slow import (~0.3 s of every CLI start)

    root = brentq(
        lambda x: float(sf(x)) - target,
        0.0,
        upper,
        xtol=1e-13,
        rtol=4.0 * float(np.finfo(float).eps),
        maxiter=1000,
    )
    return float(root)


# --------------------------------------------------------------------------- sums of steps


def fenton_wilkinson(mus: Sequence[float], sigmas: Sequence[float]) -> tuple[float, float]:
    """Return (mu, sigma) of the lognormal matching mean and variance of a sum of lognormals."""
    if len(mus) != len(sigmas):
        raise ValueError(f"mus and sigmas differ in length: {len(mus)} != {len(sigmas)}")
    if len(mus) == 0:
        raise ValueError("need at least one lognormal term")
    mu_arr = np.asarray(mus, dtype=float)
    s2 = np.asarray(sigmas, dtype=float) ** 2
    if not (np.all(np.isfinite(mu_arr)) and np.all(np.isfinite(s2))):
        raise ValueError("mus and sigmas must be finite")
    if np.any(np.asarray(sigmas, dtype=float) < 0):
        raise ValueError("sigmas must be >= 0")
    means = np.exp(mu_arr + s2 / 2.0)
    variances = np.expm1(s2) * np.exp(2.0 * mu_arr + s2)
    mean = float(means.sum())
    var = float(variances.sum())
    sigma2 = math.log1p(var / mean**2)
    return math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2)


def sum_sf_single_big_jump(
    sf: Callable[[np.ndarray], np.ndarray], t: float | np.ndarray, n: int
) -> float | np.ndarray:
    """Return min(1, n*sf(t)), the single-big-jump tail of a sum of n iid subexponential steps."""
    n = _check_int("n", n, 0)
    scalar = np.ndim(t) == 0
    t_arr = np.asarray(t, dtype=float)
    values = np.minimum(1.0, n * np.asarray(sf(t_arr), dtype=float))
    return _out(values, scalar)


# --------------------------------------------------------------------------- queues


def _check_mmc(c: int, arrival_rate: float, service_rate: float) -> tuple[int, float, float]:
    """Validate M/M/c inputs and return them, rejecting utilisation >= 1 (no steady state)."""
    c = _check_int("c", c, 1)
    lam = _check_nonneg("arrival_rate", arrival_rate)
    mu = _check_positive("service_rate", service_rate)
    rho = lam / (c * mu)
    if rho >= 1.0:
        raise ValueError(
            f"utilisation rho = lambda/(c*mu) must be < 1 for a steady state, got {rho}"
        )
    return c, lam, mu


def erlang_c(c: int, arrival_rate: float, service_rate: float) -> float:
    """Return the M/M/c probability an arrival waits, via the stable Erlang B recursion."""
    c, lam, mu = _check_mmc(c, arrival_rate, service_rate)
    a = lam / mu  # offered load in Erlangs
    rho = a / c
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b / (1.0 - rho * (1.0 - b))


def mmc_mean_wait(c: int, arrival_rate: float, service_rate: float) -> float:
    """Return the M/M/c mean queueing delay Wq = C / (c*mu - lambda)."""
    c, lam, mu = _check_mmc(c, arrival_rate, service_rate)
    return erlang_c(c, lam, mu) / (c * mu - lam)


def mmc_mean_in_system(c: int, arrival_rate: float, service_rate: float) -> float:
    """Return the M/M/c mean number in system L = lambda * (Wq + 1/mu) by Little's law."""
    c, lam, mu = _check_mmc(c, arrival_rate, service_rate)
    return lam * (mmc_mean_wait(c, lam, mu) + 1.0 / mu)


def littles_law_l(arrival_rate: float, mean_time_in_system: float) -> float:
    """Return L = lambda * W (Little's law), to cross-check simulated occupancy against latency."""
    lam = _check_nonneg("arrival_rate", arrival_rate)
    w = _check_nonneg("mean_time_in_system", mean_time_in_system)
    return lam * w


# --------------------------------------------------------------------------- estimation error


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Return the Wilson score interval for a binomial proportion; (0, 1) when n == 0."""
    n = _check_int("n", n, 0)
    successes = _check_int("successes", successes, 0)
    if successes > n:
        raise ValueError(f"successes must be <= n, got successes={successes}, n={n}")
    z = _check_positive("z", z)
    if n == 0:
        return 0.0, 1.0
    p_hat = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p_hat + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p_hat * (1.0 - p_hat) / n + z2 / (4.0 * n * n))
    # The bounds are exactly 0 at k == 0 and 1 at k == n; pin them against rounding.
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


def binomial_se(p: float, n: int) -> float:
    """Return sqrt(p(1-p)/n), the standard error of a proportion estimated from n trials."""
    p = _check_prob("p", p)
    n = _check_int("n", n, 1)
    return math.sqrt(p * (1.0 - p) / n)


def quantile_se(sf_density_at_q: float, q: float, n: int) -> float:
    """Return sqrt(q(1-q)/n)/f(x_q), the asymptotic standard error of a sample q-quantile."""
    density = _check_positive("sf_density_at_q", sf_density_at_q)
    q = _check_open_prob("q", q)
    n = _check_int("n", n, 1)
    return math.sqrt(q * (1.0 - q) / n) / density


def batch_means_se(samples: np.ndarray, batches: int = 20) -> float:
    """Return the standard error of the mean of an autocorrelated series by batch means."""
    batches = _check_int("batches", batches, 2)
    x = np.asarray(samples, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"samples must be one-dimensional, got shape {x.shape}")
    size = x.size // batches
    if size < 1:
        raise ValueError(f"need at least {batches} samples for {batches} batches, got {x.size}")
    means = x[: batches * size].reshape(batches, size).mean(axis=1)
    return float(np.std(means, ddof=1) / math.sqrt(batches))
