"""Bad spells found in a call log: a two-state continuous-time hidden Markov model.

One provider's calls, ordered by start time, each with a residual r = log latency minus the
expected log latency of its (provider, model). The hidden state (quiet or in a spell) is a
continuous-time Markov chain read at each call's start, as the engine applies spells (quiet
Exp(every_s - last_s), spell Exp(last_s); a call that starts in a spell is `slowdown` times
slower). Emissions: in each state r is N(m + state * d, s) with probability 1 - eps, or an
outlier N(m_o, s_o) (a stall) with probability eps, the same in both states; d = log slowdown.

Three models are fitted by maximum likelihood (scipy, L-BFGS-B):
- none: no spells (the body and the outliers, independent calls), 5 parameters;
- mixture: the spell component without persistence (each call independently in a spell with
  probability pi), 7 parameters;
- spells: the hidden Markov model, 8 parameters.
Spells are reported only if the hidden Markov model beats both: the persistence likelihood
ratio 2 (l_spells - l_mixture) above chi2(1)'s 99th percentile (a conservative test: the
mixture is the model's boundary of infinitely fast switching) and BIC below the no-spell
model's, and the slow state covers under half the time (else it is a drift of the level,
not spells). The likelihood is the product of 2x2 matrices, reduced pairwise in numpy with a scale
per level, so one evaluation on 50,000 calls takes milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats
from threadpoolctl import threadpool_limits

#: Significance of the persistence test (spells over the same components without persistence).
ALPHA = 0.01
_LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class SpellFit:
    """The fitted spells of one provider and the tests that decide whether to report them."""

    supported: bool
    every_s: float
    last_s: float
    slowdown: float
    standard_errors: dict[str, float]
    evidence: str
    loglik: dict[str, float]
    n: int
    #: The spells model's transformed parameters (m, log s, d, logit eps, m_o, log s_o,
    #: log up, log down), for `spell_probability`.
    params: tuple[float, ...] = ()


def _normal(r: np.ndarray, m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The normal density of r, mean m and sd s (broadcast)."""
    z = (r - m) / s
    return np.exp(-0.5 * z * z - 0.5 * _LOG_2PI) / s


def _emissions(r: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Density of each residual in the quiet state and in a spell, under parameters p
    (m, log s, d, logit eps, m_o, log s_o, ...): one row per row of a 2-d p."""
    p = np.atleast_2d(p)
    col = [p[:, i : i + 1] for i in range(6)]
    m, s, d = col[0], np.exp(col[1]), col[2]
    eps = 1.0 / (1.0 + np.exp(-col[3]))
    outlier = eps * _normal(r, col[4], np.exp(col[5]))
    floor = 1e-300
    quiet = (1 - eps) * _normal(r, m, s) + outlier + floor
    spell = (1 - eps) * _normal(r, m + d, s) + outlier + floor
    return quiet, spell


def _chain_loglik(
    gaps: np.ndarray, quiet: np.ndarray, spell: np.ndarray, up: np.ndarray, down: np.ndarray
) -> np.ndarray:
    """log P(residuals) under the two-state chain with rates up (quiet to spell) and down,
    one value per row of quiet and spell (up and down: a column each)."""
    total = up + down
    share = up / total
    decay = np.exp(-total * gaps)
    # transition matrix over each gap, times the next emission (column scaling)
    a = (1 - share * (1 - decay)) * quiet[:, 1:]
    b = share * (1 - decay) * spell[:, 1:]
    c = (1 - share) * (1 - decay) * quiet[:, 1:]
    d = (share + (1 - share) * decay) * spell[:, 1:]
    log_scale = np.zeros(len(quiet))
    while a.shape[1] > 1:
        if a.shape[1] % 2:
            one, zero = np.ones((len(a), 1)), np.zeros((len(a), 1))
            a, b = np.hstack([a, one]), np.hstack([b, zero])
            c, d = np.hstack([c, zero]), np.hstack([d, one])
        a0, b0, c0, d0 = a[:, 0::2], b[:, 0::2], c[:, 0::2], d[:, 0::2]
        a1, b1, c1, d1 = a[:, 1::2], b[:, 1::2], c[:, 1::2], d[:, 1::2]
        a, b, c, d = a0 * a1 + b0 * c1, a0 * b1 + b0 * d1, c0 * a1 + d0 * c1, c0 * b1 + d0 * d1
        scale = np.maximum(np.maximum(a, b), np.maximum(c, d))
        log_scale += np.log(scale).sum(axis=1)
        a, b, c, d = a / scale, b / scale, c / scale, d / scale
    first_q, first_s = (1 - share[:, 0]) * quiet[:, 0], share[:, 0] * spell[:, 0]
    if a.shape[1]:
        end = first_q * (a[:, 0] + b[:, 0]) + first_s * (c[:, 0] + d[:, 0])
    else:
        end = first_q + first_s
    return log_scale + np.log(np.maximum(end, 1e-300))


def _negloglik_rows(model: str, x: np.ndarray, gaps: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Minus the log-likelihood of `model` at each row of transformed parameters x."""
    x = np.atleast_2d(x)
    if model == "none":
        full = np.hstack([x[:, :2], np.zeros((len(x), 1)), x[:, 2:5]])
        quiet, _ = _emissions(r, full)
        return -np.log(quiet).sum(axis=1)
    quiet, spell = _emissions(r, x)
    if model == "mixture":
        pi = 1.0 / (1.0 + np.exp(-x[:, 6:7]))
        return -np.log((1 - pi) * quiet + pi * spell).sum(axis=1)
    up, down = np.exp(x[:, 6:7]), np.exp(x[:, 7:8])
    return -_chain_loglik(gaps, quiet, spell, up, down)


def _negloglik(model: str, x: np.ndarray, gaps: np.ndarray, r: np.ndarray) -> float:
    """Minus the log-likelihood of `model` at transformed parameters x."""
    return float(_negloglik_rows(model, x, gaps, r)[0])


BOUNDS = [(None, None), (-7, 3), (0.0, 5.0), (-12, 0), (None, None), (-7, 3), (-20, 10), (-20, 10)]


def _minimise(
    model: str, x0: np.ndarray, gaps: np.ndarray, r: np.ndarray
) -> optimize.OptimizeResult:
    """The maximum-likelihood fit of `model` from x0 (bounds keep the scales sane). The value
    and its forward-difference gradient are computed in one batch of parameter rows."""
    bounds = BOUNDS
    if model == "none":
        bounds = [bounds[i] for i in (0, 1, 3, 4, 5)]
    elif model == "mixture":
        bounds = [*bounds[:6], (-12, 3)]
    upper = np.array([np.inf if hi is None else hi for _, hi in bounds])

    def value_and_gradient(x: np.ndarray) -> tuple[float, np.ndarray]:
        step = 1e-6 * np.maximum(1.0, np.abs(x))
        step = np.where(x + step > upper, -step, step)  # stay inside the bounds
        rows = np.vstack([x, x + np.diag(step)])
        values = _negloglik_rows(model, rows, gaps, r)
        return float(values[0]), (values[1:] - values[0]) / step

    # L-BFGS-B's 8-dimensional linear algebra on a multi-threaded BLAS spends its time
    # waking threads (7x slower on a busy machine): one thread
    with np.errstate(all="ignore"), threadpool_limits(1):
        return optimize.minimize(
            value_and_gradient,
            x0,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"ftol": 1e-10, "gtol": 1e-5},
        )


def fit_spells(start_s: np.ndarray, residual: np.ndarray) -> SpellFit:
    """Fit the three models to one provider's calls (start times, log-latency residuals)."""
    order = np.argsort(start_s, kind="stable")
    t, r = np.asarray(start_s, float)[order], np.asarray(residual, float)[order]
    n = len(r)
    if n < 50:
        return SpellFit(False, math.nan, math.nan, math.nan, {}, f"{n} calls: too few", {}, n)
    gaps = np.diff(t)
    span = float(t[-1] - t[0]) or 1.0
    med = float(np.median(r))
    mad = float(np.median(np.abs(r - med))) * 1.4826 or float(r.std()) or 1.0
    tail = r[r > med + 4 * mad]
    m_o = float(tail.mean()) if len(tail) else med + 5 * mad
    s_o = float(tail.std()) if len(tail) > 2 else 2 * mad
    eps0 = max(len(tail) / n, 1e-3)
    logit = math.log(eps0 / (1 - eps0))
    none = _minimise(
        "none", np.array([med, math.log(mad), logit, m_o, math.log(max(s_o, mad))]), gaps, r
    )
    base = none.x
    x0 = np.array(
        [base[0], base[1], math.log(2.0), base[2], base[3], base[4], math.log(0.02 / 0.98)]
    )
    best_mix = _minimise("mixture", x0, gaps, r)
    mx = best_mix.x
    pi = 1.0 / (1.0 + math.exp(-mx[6]))
    mean_gap = span / max(n - 1, 1)
    starts = []
    for calls_per_spell in (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0):
        last = calls_per_spell * mean_gap
        every = last / max(min(pi, 0.5), 1e-4)
        up, down = 1.0 / max(every - last, 1e-9), 1.0 / last
        starts.append(np.append(mx[:6], [math.log(up), math.log(down)]))
    with np.errstate(all="ignore"):
        start = min(starts, key=lambda v: _negloglik("spells", v, gaps, r))
    best_hmm = _minimise("spells", start, gaps, r)
    # the mixture again from the spells' emissions (its own start can miss that optimum, which
    # would inflate the persistence test)
    hx = best_hmm.x
    share = math.exp(hx[6]) / (math.exp(hx[6]) + math.exp(hx[7]))
    share = min(max(share, 1e-5), 1 - 1e-5)
    again = _minimise("mixture", np.append(hx[:6], math.log(share / (1 - share))), gaps, r)
    if again.fun < best_mix.fun:
        best_mix = again
    x = best_hmm.x
    l_none, l_mix, l_hmm = -none.fun, -best_mix.fun, -best_hmm.fun
    lr_persist = 2 * (l_hmm - l_mix)
    crit = float(stats.chi2.ppf(1 - ALPHA, 1))
    bic_gain = (-2 * l_hmm + 8 * math.log(n)) - (-2 * l_none + 5 * math.log(n))
    up, down = math.exp(x[6]), math.exp(x[7])
    every, last, slowdown = 1 / up + 1 / down, 1 / down, math.exp(x[2])
    # a spell is the minority state: a slow state most of the time is a drift of the level
    supported = bool(lr_persist > crit and bic_gain < 0 and x[2] > 0.01 and last < every / 2)
    errors = _standard_errors(x, gaps, r) if supported else {}
    evidence = (
        f"persistence LR {lr_persist:.1f} vs chi2(1) crit {crit:.2f} (alpha {ALPHA}); "
        f"BIC spells - no spells {bic_gain:+.1f}; slow {last / every:.1%} of the time; {n} calls"
    )
    logliks = {"none": l_none, "mixture": l_mix, "spells": l_hmm}
    return SpellFit(
        supported, every, last, slowdown, errors, evidence, logliks, n, tuple(map(float, x))
    )


def _standard_errors(x: np.ndarray, gaps: np.ndarray, r: np.ndarray) -> dict[str, float]:
    """SEs of every_s, last_s and slowdown from the observed information (numerical Hessian of
    the log-likelihood in the transformed parameters), by the delta method."""
    k = len(x)
    h = 1e-3 * np.maximum(1.0, np.abs(x))
    hess = np.zeros((k, k))
    for i in range(k):
        for j in range(i, k):
            xs = [x.copy() for _ in range(4)]
            xs[0][i] += h[i]
            xs[0][j] += h[j]
            xs[1][i] += h[i]
            xs[1][j] -= h[j]
            xs[2][i] -= h[i]
            xs[2][j] += h[j]
            xs[3][i] -= h[i]
            xs[3][j] -= h[j]
            f = [_negloglik("spells", v, gaps, r) for v in xs]
            hess[i, j] = hess[j, i] = (f[0] - f[1] - f[2] + f[3]) / (4 * h[i] * h[j])
    try:
        cov = np.linalg.inv(hess)
    except np.linalg.LinAlgError:
        return {}
    up, down = math.exp(x[6]), math.exp(x[7])
    grad_every = np.zeros(k)
    grad_every[6], grad_every[7] = -1 / up, -1 / down
    var = {
        "every_s": float(grad_every @ cov @ grad_every),
        "last_s": float(cov[7, 7]) / down**2,
        "slowdown": float(cov[2, 2]) * math.exp(2 * x[2]),
    }
    return {key: math.sqrt(v) if v > 0 else math.nan for key, v in var.items()}


def spell_probability(start_s: np.ndarray, residual: np.ndarray, fit: SpellFit) -> np.ndarray:
    """Each call's posterior probability of having started in a spell (forward-backward), in the
    input's order; zeros when no spells were supported."""
    n = len(residual)
    if not fit.supported or not fit.params:
        return np.zeros(n)
    order = np.argsort(start_s, kind="stable")
    t, r = np.asarray(start_s, float)[order], np.asarray(residual, float)[order]
    x = np.array(fit.params)
    quiet, spell = _emissions(r, x)
    up, down = math.exp(x[6]), math.exp(x[7])
    share, total = up / (up + down), up + down
    decay = np.exp(-total * np.diff(t)).tolist()
    q, s = quiet[0].tolist(), spell[0].tolist()
    forward = np.empty((n, 2))
    f0, f1 = (1 - share) * q[0], share * s[0]
    norm = f0 + f1
    forward[0] = f0 / norm, f1 / norm
    for i in range(1, n):
        e = decay[i - 1]
        p01, p10 = share * (1 - e), (1 - share) * (1 - e)
        a, b = forward[i - 1]
        f0 = (a * (1 - p01) + b * p10) * q[i]
        f1 = (a * p01 + b * (1 - p10)) * s[i]
        norm = f0 + f1
        forward[i] = f0 / norm, f1 / norm
    posterior = np.empty(n)
    posterior[-1] = forward[-1, 1]
    b0, b1 = 1.0, 1.0
    for i in range(n - 2, -1, -1):
        e = decay[i]
        p01, p10 = share * (1 - e), (1 - share) * (1 - e)
        n0 = (1 - p01) * q[i + 1] * b0 + p01 * s[i + 1] * b1
        n1 = p10 * q[i + 1] * b0 + (1 - p10) * s[i + 1] * b1
        norm = n0 + n1
        b0, b1 = n0 / norm, n1 / norm
        w0, w1 = forward[i, 0] * b0, forward[i, 1] * b1
        posterior[i] = w1 / (w0 + w1)
    result = np.empty(n)
    result[order] = posterior
    return result
