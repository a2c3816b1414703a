"""Maximum-likelihood fits of one serving path's latency law from its calls, with standard errors.

The law is tailsim's (`sim.model.latency.CallLatency`): latency = first token (lognormal) +
output_tokens / speed (lognormal tokens per second) + with probability p a stall of extra
seconds (lognormal); errors and junk return at the first token. With a first-token column the
first token is fitted on its own and speed and stall on the rest of each call (latency - ttft);
without one, total time is fitted as one lognormal plus the stall mixture (carried in `ttft_s`,
generation set to nothing). The stall mixture's likelihood integrates the convolution of
generation time and stall per call by Gauss-Legendre quadrature over generation's quantile;
standard errors come from the outer product of per-call scores (BHHH) and the delta method.
Calls the client cut (status `timeout`) are right-censored: each adds log P(latency > elapsed)
(`sim.calibration.censored`), so the longest calls are not dropped from the tail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit, logsumexp, ndtr, ndtri
from threadpoolctl import threadpool_limits

from sim.calibration.censored import (
    Censored,
    censored_gradient,
    censored_loglik,
    censored_scores,
)
from sim.model.latency import Z99, Empirical, LogNormal

#: Gauss-Legendre nodes over generation's quantile for the stall convolution.
NODES = 32
_T, _W = np.polynomial.legendre.leggauss(NODES)
_T, _W = (_T + 1) / 2, _W / 2
_LOG_W = np.log(_W)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
#: The stall mixture is fitted on at most this many calls of a group (a seeded random sample;
#: its standard errors are the sample's): peak memory ~300 MB whatever the log's size.
MAX_MIXTURE_CALLS = 200_000
#: Speed carried by a total-time fit: generation takes no time (the total is in `ttft_s`).
NO_GENERATION_TOKENS_PER_S = 1e9


@dataclass(frozen=True)
class LogNormalFit:
    """A fitted lognormal (mu, sigma of log x) with its covariance, as {median, p99} + SEs."""

    mu: float
    sigma: float
    cov: tuple[tuple[float, float], tuple[float, float]]  # of (mu, log sigma)
    n: int
    upper: float = math.inf  # truncated above here (the scenario's `max`); inf: no ceiling
    se_upper: float = 0.0

    @property
    def median(self) -> float:
        """The untruncated law's median (the scenario's `median`)."""
        return math.exp(self.mu)

    @property
    def p99(self) -> float:
        """The untruncated law's p99 (the scenario's `p99`)."""
        return math.exp(self.mu + Z99 * self.sigma)

    def quantile(self, q: float) -> float:
        """The fitted q-quantile (of the truncated law where there is a ceiling)."""
        return float(self.from_uniform(np.asarray([q]))[0])

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        """Inverse CDF, as `sim.model.latency.LogNormal` draws (u * F(upper) when truncated)."""
        return LogNormal(self.mu, self.sigma, self.upper).from_uniform(u)

    def se_quantile(self, q: float) -> float:
        """Standard error of the untruncated q-quantile (delta method on mu and log sigma)."""
        z = float(ndtri(q))
        grad = np.array([1.0, z * self.sigma]) * math.exp(self.mu + z * self.sigma)
        return float(math.sqrt(max(0.0, grad @ np.asarray(self.cov) @ grad)))

    def block(self) -> dict[str, float]:
        """The scenario's `{median, p99}` (and `max` where truncated)."""
        block = {"median": _round(self.median), "p99": _round(self.p99)}
        if math.isfinite(self.upper):
            block["max"] = _round(self.upper)
        return block

    def standard_errors(self) -> dict[str, float]:
        """SE of median and p99 (of the untruncated law, as in `block`), and of `max`."""
        ses = {"median": _round(self.se_quantile(0.5)), "p99": _round(self.se_quantile(0.99))}
        if math.isfinite(self.upper):
            ses["max"] = _round(self.se_upper)
        return ses


def _round(x: float) -> float:
    """Four significant digits: enough for 0.1% and readable in YAML."""
    return float(f"{x:.4g}") if math.isfinite(x) and x != 0 else float(x)


def fit_lognormal(values: np.ndarray) -> LogNormalFit:
    """Closed-form lognormal MLE of positive values, with its (diagonal) covariance."""
    logs = np.log(np.asarray(values, dtype=float))
    n = len(logs)
    sigma = max(float(logs.std()), 1e-9)
    var_mu, var_log_sigma = sigma**2 / n, 1 / (2 * n)
    return LogNormalFit(float(logs.mean()), sigma, ((var_mu, 0.0), (0.0, var_log_sigma)), n)


@dataclass(frozen=True)
class TruncatedFit:
    """A lognormal truncated above, fitted to positive values, and its log-likelihood."""

    law: LogNormalFit
    loglik: float


def truncated_loglik(logs: np.ndarray, mu: float, sigma: float, upper: float) -> float:
    """Log-likelihood of values (given by their logs, all <= upper) under LN(mu, sigma)
    truncated above at `upper`."""
    z = (logs - mu) / sigma
    plain = -logs - math.log(sigma) - _HALF_LOG_2PI - 0.5 * z * z
    top = float(ndtr((math.log(upper) - mu) / sigma))
    return float(np.sum(plain) - len(logs) * math.log(max(top, 1e-300)))


def fit_truncated_lognormal(values: np.ndarray) -> TruncatedFit:
    """MLE of a lognormal truncated above. The ceiling's MLE is the sample maximum, biased low
    by about one spacing; it is set to max + (max - second max) (the usual first-order
    correction for an endpoint where the density is positive), then (mu, sigma) maximise the
    truncated likelihood; their covariance is the inverse of the observed information
    (numerical Hessian in (mu, log sigma)). The ceiling's SE is 1 / (n f(max)), f the fitted
    density there: the max falls short of the ceiling by about an Exp of that mean."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    gap = float(x[-1] - x[-2])
    upper = float(x[-1] + gap)
    logs = np.log(x)
    plain = fit_lognormal(x)

    def objective(theta: np.ndarray) -> float:
        return -truncated_loglik(logs, float(theta[0]), math.exp(float(theta[1])), upper)

    start = np.array([plain.mu, math.log(plain.sigma)])
    best = minimize(objective, start, method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10})
    theta = best.x
    h = 1e-4
    hess = np.empty((2, 2))
    for i in range(2):
        for j in range(2):
            e_i, e_j = np.eye(2)[i] * h, np.eye(2)[j] * h
            hess[i, j] = (
                objective(theta + e_i + e_j)
                - objective(theta + e_i - e_j)
                - objective(theta - e_i + e_j)
                + objective(theta - e_i - e_j)
            ) / (4 * h * h)
    cov = np.linalg.pinv(hess)
    mu, sigma = float(theta[0]), math.exp(float(theta[1]))
    log_f = truncated_loglik(np.log([upper]), mu, sigma, upper)
    law = LogNormalFit(mu, sigma, _cov2(cov, 0, 1), n, upper, 1 / (n * math.exp(log_f)))
    return TruncatedFit(law, -float(best.fun))


@dataclass(frozen=True)
class StallMixture:
    """Generation (tokens / lognormal speed) plus, with probability p, a lognormal stall."""

    speed: LogNormalFit  # tokens per second (total time: 1 / time, with one token per call)
    probability: float
    se_probability: float
    extra: LogNormalFit | None
    loglik: float
    loglik_no_stall: float
    evidence: str
    supported: bool


def _log_pdf_lognormal(x: np.ndarray, mu: np.ndarray | float, sigma: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        logx = np.log(x)
        z = (logx - mu) / sigma
        out = -logx - math.log(sigma) - _HALF_LOG_2PI - 0.5 * z * z
    return np.where(x > 0, out, -np.inf)


def mixture_loglik(
    theta: np.ndarray, g: np.ndarray, log_n: np.ndarray, scores: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-call log-likelihood (and, if asked, per-call scores, shape (n, 5)) of generation
    times `g` (tokens e^log_n) under theta = (mu_v, log s_v, logit p, mu_s, log s_s): speed ~
    LN(mu_v, s_v), stall ~ LN(mu_s, s_s).

    Without stall, g ~ LN(log_n - mu_v, s_v). The stalled density is the convolution
    h(g) = integral over generation's quantile v in (0, F_G(g)) of f_S(g - G^-1(v)) dv,
    by Gauss-Legendre on that interval (exact bounds, so no mass is cut). Its scores are the
    node-weighted means of each part's own score (differentiation under the integral).
    """
    mu_v, s_v, p = theta[0], math.exp(theta[1]), float(expit(theta[2]))
    mu_s, s_s = theta[3], math.exp(theta[4])
    m = log_n - mu_v
    log_g = np.log(g)
    z = (log_g - m) / s_v
    base = -log_g - theta[1] - _HALF_LOG_2PI - 0.5 * z * z
    top = ndtr(z)  # F_G(g)
    zy = ndtri(np.clip(top[:, None] * _T[None, :], 1e-300, 1.0))  # nodes' generation z
    rest = g[:, None] - np.exp(m[:, None] + s_v * zy)  # the stall each node leaves
    with np.errstate(divide="ignore", invalid="ignore"):
        log_rest = np.log(rest)
        zs = (log_rest - mu_s) / s_s
        node = _LOG_W[None, :] - log_rest - theta[4] - _HALF_LOG_2PI - 0.5 * zs * zs
    node = np.where(rest > 0, node, -np.inf)
    log_sum = logsumexp(node, axis=1)
    log_h = np.log(np.maximum(top, 1e-300)) + log_sum
    a = math.log1p(-p) + base
    b = math.log(p) + log_h
    ll = np.logaddexp(a, b)
    if not scores:
        return ll, None
    with np.errstate(invalid="ignore", over="ignore"):
        w_b = np.nan_to_num(np.exp(b - ll))
        w_a = 1.0 - w_b
        post = np.nan_to_num(np.exp(node - log_sum[:, None]))  # weights of the nodes
        zs = np.where(rest > 0, zs, 0.0)
    out = np.empty((len(g), 5))
    out[:, 0] = w_a * (-z / s_v) + w_b * (post * (-zy / s_v)).sum(axis=1)
    out[:, 1] = w_a * (z * z - 1) + w_b * (post * (zy * zy - 1)).sum(axis=1)
    out[:, 2] = w_a * (-p) + w_b * (1 - p)
    out[:, 3] = w_b * (post * zs).sum(axis=1) / s_s
    out[:, 4] = w_b * (post * (zs * zs - 1)).sum(axis=1)
    return ll, out


def _plain_censored(g: np.ndarray, log_n: np.ndarray, cens: Censored) -> tuple[LogNormalFit, float]:
    """Generation without a stall (speed lognormal) by maximum likelihood with the censored
    calls' log S_G(after) terms; covariance from per-call scores (BHHH)."""
    start = fit_lognormal(np.exp(log_n) / g)

    def full(t: np.ndarray) -> np.ndarray:
        return np.array([t[0], t[1], -np.inf, 0.0, 0.0])

    def objective(t: np.ndarray) -> float:
        s_v = math.exp(t[1])
        obs = _log_pdf_lognormal(g, log_n - t[0], s_v)
        value = -float(np.sum(obs) + np.sum(censored_loglik(full(t), cens)))
        return value if math.isfinite(value) else 1e300

    best = minimize(
        objective,
        np.array([start.mu, math.log(start.sigma)]),
        method="Nelder-Mead",
        options={"xatol": 1e-9, "fatol": 1e-9},
    )
    mu_v, s_v = float(best.x[0]), math.exp(float(best.x[1]))
    z = (np.log(g) - (log_n - mu_v)) / s_v
    obs_scores = np.column_stack([-z / s_v, z * z - 1])
    cens_scores = censored_scores(full(best.x), cens)[:, :2]
    scores = np.vstack([obs_scores, cens_scores])
    cov = np.linalg.pinv(scores.T @ scores)
    n = len(g) + len(cens)
    return LogNormalFit(mu_v, s_v, _cov2(cov, 0, 1), n), -float(best.fun)


def _start(g: np.ndarray, log_n: np.ndarray) -> np.ndarray:
    """Robust starting values: speed from the bulk (median, IQR), stall from the far excess."""
    rate = log_n - np.log(g)  # log tokens per second
    mu_v = float(np.median(rate))
    q25, q75 = np.percentile(rate, [25, 75])
    s_v = max(float(q75 - q25) / 1.349, 1e-3)
    z = (mu_v - rate) / s_v
    far = z > 3
    p = min(max(float(far.mean()) - 0.00135, 0.005), 0.5)
    if far.sum() >= 5:
        extra = g[far] - np.exp(log_n[far] - mu_v)
        logs = np.log(np.maximum(extra, 1e-6))
        mu_s, s_s = float(logs.mean()), max(float(logs.std()), 0.1)
    else:
        mu_s, s_s = float(np.log(np.percentile(g, 99))), 0.5
    return np.array([mu_v, math.log(s_v), math.log(p / (1 - p)), mu_s, math.log(s_s)])


def fit_stall_mixture(
    g: np.ndarray, tokens: np.ndarray, censored: Censored | None = None
) -> StallMixture:
    """MLE of speed and stall from generation times `g` of calls of `tokens` output tokens
    (at most `MAX_MIXTURE_CALLS` of them, sampled) and the calls cut before they ended
    (`censored`, each contributing log P(rest > after)); the stall is kept only where BIC
    prefers it to the lognormal alone (stated in `evidence`)."""
    g = np.asarray(g, dtype=float)
    log_n = np.log(np.asarray(tokens, dtype=float))
    sampled = ""
    if len(g) > MAX_MIXTURE_CALLS:
        keep = np.sort(np.random.default_rng(len(g)).choice(len(g), MAX_MIXTURE_CALLS, False))
        sampled = f" (on {MAX_MIXTURE_CALLS:,} of {len(g):,} calls, sampled)"
        g, log_n = g[keep], log_n[keep]
    cens = censored if censored is not None and len(censored) else None
    n = len(g) + (len(cens) if cens is not None else 0)
    if cens is None:
        plain = fit_lognormal(np.exp(log_n) / g)
        ll_plain = float(np.sum(_log_pdf_lognormal(g, log_n - plain.mu, plain.sigma)))
    else:
        plain, ll_plain = _plain_censored(g, log_n, cens)
    if n < 20:
        return StallMixture(plain, 0.0, 0.0, None, ll_plain, ll_plain, f"n={n} < 20", False)
    theta0 = _start(g, log_n)

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        ll, scores = mixture_loglik(theta, g, log_n, scores=True)
        value = -float(np.sum(ll))
        if scores is None:
            return 1e300, np.zeros(len(theta))
        grad = -scores.sum(axis=0)
        if cens is not None:
            cut_ll, cut_grad = censored_gradient(theta, cens)
            value -= cut_ll
            grad = grad - cut_grad
        if not math.isfinite(value):
            return 1e300, np.zeros(len(theta))
        return value, grad

    bounds = [(None, None), (-7.0, 3.0), (-12.0, 3.0), (None, None), (-5.0, 3.0)]
    with threadpool_limits(1):  # BLAS threads only spin on 5x5 steps (10x slower on busy cores)
        best = minimize(
            objective,
            theta0,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": 200, "ftol": 1e-10, "gtol": 1e-5},
        )
    theta = best.x
    ll = -float(best.fun)
    gain = 2 * (ll - ll_plain)
    penalty = 3 * math.log(n)
    supported = gain > penalty
    evidence = f"2*dlogL {gain:.1f} vs BIC penalty 3*ln(n) {penalty:.1f}{sampled}"
    if not supported:
        return StallMixture(plain, 0.0, 0.0, None, ll_plain, ll_plain, evidence, False)
    _, scores = mixture_loglik(theta, g, log_n, scores=True)
    assert scores is not None
    if cens is not None:  # the censored calls' scores count in the information too
        scores = np.vstack([scores, censored_scores(theta, cens)])
    info = scores.T @ scores
    cov = np.linalg.pinv(info)
    speed = LogNormalFit(float(theta[0]), math.exp(theta[1]), _cov2(cov, 0, 1), n)
    p = float(expit(theta[2]))
    extra = LogNormalFit(float(theta[3]), math.exp(theta[4]), _cov2(cov, 3, 4), n)
    se_p = p * (1 - p) * math.sqrt(max(0.0, cov[2, 2]))
    return StallMixture(speed, p, se_p, extra, ll, ll_plain, evidence, True)


def _cov2(cov: np.ndarray, i: int, j: int) -> tuple[tuple[float, float], tuple[float, float]]:
    return ((float(cov[i, i]), float(cov[i, j])), (float(cov[j, i]), float(cov[j, j])))


@dataclass(frozen=True)
class MarginalFit:
    """One (provider, model)'s fitted serving path and rates, each with its standard error."""

    provider: str
    model: str
    mode: str  # "first_token" (ttft column used), "total_time" or "empirical" (the calls replayed)
    counts: dict[str, int]
    ttft: LogNormalFit  # total-time mode: the total's body
    stall: StallMixture
    error_rate: float
    se_error_rate: float
    invalid_rate: float
    se_invalid_rate: float
    output_tokens: LogNormalFit | None
    notes: list[str] = field(default_factory=list)
    samples: np.ndarray | None = field(default=None, repr=False)  # empirical: ok calls' latency
    stream: dict[str, Any] = field(default_factory=dict)  # {block, se}: sim.calibration.streams

    @property
    def n(self) -> int:
        """Calls used (every status)."""
        return sum(self.counts.values())

    def serving_block(self, sample_file: str = "samples.csv") -> dict[str, Any]:
        """The `providers.P.serves.M` block a scenario takes as is (`sample_file`: where an
        empirical fit's latencies are written, column `latency_s`)."""
        block: dict[str, Any] = {"ttft_s": self.ttft.block()}
        if self.mode == "empirical":
            block["ttft_s"] = {"dist": "empirical", "file": sample_file, "column": "latency_s"}
        if self.mode == "first_token":
            block["tokens_per_s"] = self.stall.speed.block()
        else:
            block["tokens_per_s"] = {"dist": "constant", "value": NO_GENERATION_TOKENS_PER_S}
        if self.stall.supported and self.stall.extra is not None:
            block["stall"] = {
                "probability": _round(self.stall.probability),
                "extra_s": self.stall.extra.block(),
            }
        if self.error_rate > 0:
            block["error_rate"] = _round(self.error_rate)
        if self.invalid_rate > 0:
            block["invalid_rate"] = _round(self.invalid_rate)
        return block

    def output_block(self) -> int | dict[str, float]:
        """The step's `output_tokens`: a number, or `{median, p99}` where lengths vary."""
        fit = self.output_tokens
        if fit is None:
            return 1
        if fit.sigma < 1e-6 or fit.p99 <= fit.median:
            return max(1, round(fit.median))
        return {
            "median": max(1.0, _round(fit.median)),
            "p99": _round(max(fit.p99, fit.median * 1.001)),
        }

    def standard_errors(self) -> dict[str, Any]:
        """The serving block's keys -> standard errors."""
        ses: dict[str, Any] = {}
        if self.mode != "empirical":
            ses["ttft_s"] = self.ttft.standard_errors()
        if self.mode == "first_token":
            ses["tokens_per_s"] = self.stall.speed.standard_errors()
        if self.stall.supported and self.stall.extra is not None:
            ses["stall"] = {
                "probability": _round(self.stall.se_probability),
                "extra_s": self.stall.extra.standard_errors(),
            }
        ses["error_rate"] = _round(self.se_error_rate)
        ses["invalid_rate"] = _round(self.se_invalid_rate)
        return ses

    def sample(
        self, rng: np.random.Generator, size: int, tokens: np.ndarray | None = None
    ) -> np.ndarray:
        """`size` uncontended successful-call latencies from the fitted law (tokens: the output
        lengths to use, resampled; default: drawn from the fitted length distribution)."""
        if self.mode == "empirical" and self.samples is not None:
            return Empirical(self.samples).from_uniform(rng.random(size))
        ttft = np.exp(self.ttft.mu + self.ttft.sigma * rng.standard_normal(size))
        if self.mode == "first_token":
            if tokens is not None and len(tokens):
                n = rng.choice(np.asarray(tokens, dtype=float), size)
            elif self.output_tokens is not None:
                n = np.maximum(
                    1,
                    np.round(
                        np.exp(
                            self.output_tokens.mu
                            + self.output_tokens.sigma * rng.standard_normal(size)
                        )
                    ),
                )
            else:
                n = np.ones(size)
            speed = np.exp(self.stall.speed.mu + self.stall.speed.sigma * rng.standard_normal(size))
            body = ttft + n / speed
        elif math.isfinite(self.ttft.upper):
            body = self.ttft.from_uniform(rng.random(size))
        else:
            body = np.exp(-self.stall.speed.mu + self.stall.speed.sigma * rng.standard_normal(size))
        stalled = rng.random(size) < self.stall.probability
        if self.stall.extra is not None:
            extra = np.exp(self.stall.extra.mu + self.stall.extra.sigma * rng.standard_normal(size))
            body = body + np.where(stalled, extra, 0.0)
        return body


def _bounded(
    times: np.ndarray, stall: StallMixture, cut_at: np.ndarray | None = None
) -> tuple[LogNormalFit, StallMixture, str] | None:
    """The truncated lognormal of total time where BIC prefers it to the untruncated model
    fitted (lognormal, 2 parameters, or lognormal + stall, 5): (law, a no-stall mixture, the
    note stating the test); None where it is not preferred or there are under 20 calls.
    Calls cut at `cut_at` add log P(T > c) under the truncated law (at its fitted values: no
    ceiling where a cut call outlived it)."""
    n = len(times)
    if n < 20 or len(np.unique(times)) < 2:
        return None
    cut = fit_truncated_lognormal(times)
    if cut_at is not None and len(cut_at):
        law = cut.law
        if float(np.max(cut_at)) >= law.upper:
            return None  # a cut call went past the ceiling: there is none
        ln_top = math.log(max(float(ndtr((math.log(law.upper) - law.mu) / law.sigma)), 1e-300))
        below = ndtr((np.log(cut_at) - law.mu) / law.sigma)
        top = math.exp(ln_top)
        terms = np.log(np.maximum(top - below, 1e-300)) - ln_top
        cut = TruncatedFit(law, cut.loglik + float(np.sum(terms)))
        n += len(cut_at)
    k_other = 5 if stall.supported else 2
    ll_other = stall.loglik if stall.supported else stall.loglik_no_stall
    bic_cut = -2 * cut.loglik + 3 * math.log(n)
    bic_other = -2 * ll_other + k_other * math.log(n)
    other = "lognormal + stall" if stall.supported else "lognormal"
    evidence = (
        f"truncated lognormal BIC {bic_cut:.1f} (3 parameters) vs {other} {bic_other:.1f} "
        f"({k_other})"
    )
    if not bic_cut < bic_other:
        return None
    law = cut.law
    speed = LogNormalFit(-law.mu, law.sigma, law.cov, n)
    none = StallMixture(speed, 0.0, 0.0, None, cut.loglik, cut.loglik, evidence, False)
    note = (
        f"bounded tail: total time fitted as a lognormal truncated at max {law.upper:.4g} s "
        f"(sample max + its last spacing, SE {law.se_upper:.2g} s); {evidence}"
    )
    return law, none, note


def _rate(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 0.0
    p = k / n
    return p, math.sqrt(p * (1 - p) / n)


def fit_group(
    calls: pd.DataFrame, provider: str, model: str, total_time: bool = False
) -> MarginalFit:
    """Fit one serving path from its rows of the normalized call log (`total_time`: fit the
    whole call even where the log has first-token times)."""
    status = calls["status"].fillna("ok").astype(str)
    counts = {
        s: int((status == s).sum()) for s in ("ok", "error", "invalid", "rate_limited", "timeout")
    }
    notes: list[str] = []
    served = counts["ok"] + counts["error"] + counts["invalid"]
    error_rate, se_error = _rate(counts["error"], served)
    invalid_rate, se_invalid = _rate(counts["invalid"], served)
    ok = calls[status == "ok"]
    latency = ok["latency_s"].to_numpy(float)
    ttft = ok["ttft_s"].to_numpy(float)
    tokens = ok["output_tokens"].to_numpy(float)
    has_ttft = np.isfinite(ttft).mean() > 0.5 if len(ok) else False
    has_tokens = (np.isfinite(tokens) & (tokens > 0)).mean() > 0.5 if len(ok) else False
    cut = calls[(status == "timeout") & (calls["latency_s"] > 0)]
    cut_at = cut["latency_s"].to_numpy(float)
    if counts["timeout"]:
        notes.append(
            f"{counts['timeout']} cut calls (timeouts, cancellations) fitted as right-censored "
            "at their elapsed time"
        )
    if counts["rate_limited"]:
        notes.append(f"{counts['rate_limited']} rate-limited calls left out (quota, not serving)")
    lengths = tokens[np.isfinite(tokens) & (tokens > 0)]
    output = fit_lognormal(lengths) if len(lengths) >= 2 else None
    if has_ttft and has_tokens and not total_time:
        mode = "first_token"
        first = calls.loc[status.isin(["ok", "invalid", "error"]), ["ttft_s", "latency_s"]]
        first_times = first["ttft_s"].fillna(first["latency_s"]).to_numpy(float)
        cut_first = cut["ttft_s"].to_numpy(float)
        seen = np.isfinite(cut_first) & (cut_first > 0) & (cut_first <= cut_at)
        first_times = np.concatenate([first_times, cut_first[seen]])  # a cut call's first token
        first_times = first_times[np.isfinite(first_times) & (first_times > 0)]
        usable = np.isfinite(ttft) & np.isfinite(tokens) & (tokens > 0) & (latency > ttft)
        if (~usable).sum():
            notes.append(
                f"{int((~usable).sum())} ok calls without a generation time left out of speed"
            )
        ttft_fit = fit_lognormal(first_times)
        cut_tokens = cut["output_tokens"].to_numpy(float)
        known = np.isfinite(cut_tokens) & (cut_tokens > 0)
        # a cut call's intended length where logged, else the ok calls' median length
        cut_tokens = np.where(known, cut_tokens, float(np.median(tokens[usable])))
        censored = Censored(
            np.where(seen, cut_at - np.nan_to_num(cut_first), cut_at),
            np.log(cut_tokens),
            ~seen,
            (ttft_fit.mu, ttft_fit.sigma),
        )
        stall = fit_stall_mixture(latency[usable] - ttft[usable], tokens[usable], censored)
    else:
        mode = "total_time"
        if not total_time:
            notes.append("no first-token column" if not has_ttft else "no output-token column")
        positive = latency[latency > 0]
        censored = Censored(cut_at, np.zeros(len(cut_at)), np.zeros(len(cut_at), bool))
        stall = fit_stall_mixture(positive, np.ones(len(positive)), censored)
        body = stall.speed  # 1 / time with one token: the body's time is LN(-mu, sigma)
        (a, b), (_, d) = body.cov
        ttft_fit = LogNormalFit(-body.mu, body.sigma, ((a, -b), (-b, d)), body.n)
        bounded = _bounded(positive, stall, cut_at)
        if bounded is not None:
            ttft_fit, stall, note = bounded
            notes.append(note)
    return MarginalFit(
        provider,
        model,
        mode,
        counts,
        ttft_fit,
        stall,
        error_rate,
        se_error,
        invalid_rate,
        se_invalid,
        output,
        notes,
    )
