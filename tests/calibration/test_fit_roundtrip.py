"""Round trip of `tailsim fit`'s marginal fits: calls drawn from known parameters with numpy
(the law of sim.model.latency: first token + tokens / speed + a stall with probability p) are
written to a CSV, read back and fitted; every median and p99 must come back within 3% and the
stall probability within 0.5 points (issue 19), and each estimate within 4 of its own standard
errors of the truth (the SE check: a 4-sigma miss has probability 6e-5 per value)."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy.integrate import quad
from scipy.stats import lognorm

from sim.calibration.log_readers import read_call_logs
from sim.calibration.marginals import (
    StallMixture,
    fit_group,
    fit_stall_mixture,
    mixture_loglik,
)
from sim.calibration.synth import synth_calls
from sim.model.config import ServingSpec
from sim.model.latency import LogNormal
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario

N = 50_000
TTFT = (0.8, 4.0)
SPEED = (60.0, 110.0)
EXTRA = (30.0, 80.0)
STALL_P = 0.03
ERROR, INVALID = 0.01, 0.02
LENGTH = (300.0, 900.0)


def _law(pair: tuple[float, float]) -> LogNormal:
    return LogNormal.from_median_p99(*pair)


def synthetic_log(rng: np.random.Generator, n: int = N) -> pd.DataFrame:
    """n calls of the model with the parameters above, in the normalized log's column names."""
    tokens = np.maximum(1, np.round(_law(LENGTH).sample(rng, n)))
    ttft = _law(TTFT).sample(rng, n)
    speed = _law(SPEED).sample(rng, n)
    stalled = rng.random(n) < STALL_P
    extra = _law(EXTRA).sample(rng, n)
    outcome = rng.random(n)
    status = np.where(
        outcome < ERROR, "error", np.where(outcome < ERROR + INVALID, "invalid", "ok")
    )
    latency = np.where(status == "ok", ttft + tokens / speed + np.where(stalled, extra, 0.0), ttft)
    return pd.DataFrame(
        {
            "start_s": np.cumsum(rng.exponential(0.1, n)),
            "latency_s": latency,
            "ttft_s": ttft,
            "provider": "p",
            "model": "m",
            "output_tokens": np.where(status == "ok", tokens, np.nan),
            "status": status,
        }
    )


def _total(rng: np.random.Generator, size: int, ttft, speed, p, extra, length) -> np.ndarray:
    tokens = np.maximum(1, np.round(length.sample(rng, size)))
    body = ttft.sample(rng, size) + tokens / speed.sample(rng, size)
    return body + np.where(rng.random(size) < p, extra.sample(rng, size), 0.0)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("rt") / "calls.csv"
    synthetic_log(np.random.default_rng(20261201)).to_csv(path, index=False)
    calls, garbage = read_call_logs([path])
    assert garbage[str(path)].total == 0
    assert len(calls) == N
    return fit_group(calls, "p", "m")


def _check(name: str, got: float, se: float, truth: float) -> None:
    assert abs(got / truth - 1) < 0.03, f"{name}: {got:.4g} vs {truth:.4g} (3%)"
    assert abs(got - truth) < 4 * se, f"{name}: {got:.4g} vs {truth:.4g}, SE {se:.3g} (4 SE)"


def test_medians_and_p99s_come_back_within_3_percent(fitted) -> None:
    assert fitted.mode == "first_token"
    assert fitted.stall.supported
    for name, fit, truth in (
        ("ttft", fitted.ttft, TTFT),
        ("speed", fitted.stall.speed, SPEED),
        ("stall extra", fitted.stall.extra, EXTRA),
        ("output tokens", fitted.output_tokens, LENGTH),
    ):
        _check(f"{name} median", fit.median, fit.se_quantile(0.5), truth[0])
        _check(f"{name} p99", fit.p99, fit.se_quantile(0.99), truth[1])


def test_stall_probability_within_half_a_point(fitted) -> None:
    assert abs(fitted.stall.probability - STALL_P) < 0.005
    assert abs(fitted.stall.probability - STALL_P) < 4 * fitted.stall.se_probability


def test_error_and_junk_rates_within_4_se(fitted) -> None:
    assert abs(fitted.error_rate - ERROR) < 4 * fitted.se_error_rate
    assert abs(fitted.invalid_rate - INVALID) < 4 * fitted.se_invalid_rate


def test_total_latency_median_and_p99_within_3_percent(fitted) -> None:
    """The fitted law's total latency against the true law's, 400,000 draws each (Monte Carlo
    SE of p99 about 0.3%, so 3% is the fit's error)."""
    draws = 400_000
    truth = _total(
        np.random.default_rng(1), draws, _law(TTFT), _law(SPEED), STALL_P, _law(EXTRA), _law(LENGTH)
    )
    got = fitted.sample(np.random.default_rng(2), draws)
    for q in (50, 99):
        t, g = np.percentile(truth, q), np.percentile(got, q)
        assert abs(g / t - 1) < 0.03, f"total p{q}: {g:.4g} vs {t:.4g}"


def test_serving_block_is_a_valid_scenario_block(fitted) -> None:
    block = fitted.serving_block()
    spec = ServingSpec.model_validate(block)
    assert spec.stall is not None
    assert spec.stall.probability == pytest.approx(STALL_P, abs=0.005)
    assert set(fitted.standard_errors()) >= {"ttft_s", "tokens_per_s", "stall", "error_rate"}


def test_convolution_quadrature_matches_adaptive_integration() -> None:
    """The stalled density by Gauss-Legendre equals scipy's adaptive quad to 1e-3 (relative),
    from a call far in the bulk to one deep in the stall."""
    theta = np.array([np.log(55), np.log(0.3), -2.0, np.log(6), np.log(0.5)])
    g = np.array([0.66, 3.0, 6.9, 12.0, 49.3])
    tokens = np.array([40.0, 300.0, 300.0, 500.0, 300.0])
    ll, _ = mixture_loglik(theta, g, np.log(tokens))
    p = 1 / (1 + np.exp(2.0))
    for i in range(len(g)):
        m, s_v = np.log(tokens[i]) - theta[0], np.exp(theta[1])
        f_g = lognorm(s_v, scale=np.exp(m)).pdf
        f_s = lognorm(np.exp(theta[4]), scale=np.exp(theta[3])).pdf

        def integrand(y: float, i: int = i, f_g=f_g, f_s=f_s) -> float:
            return f_g(y) * f_s(g[i] - y)

        h = quad(integrand, 0, g[i], limit=400, points=[np.exp(m)])[0]
        exact = np.log((1 - p) * f_g(g[i]) + p * h)
        assert ll[i] == pytest.approx(exact, rel=1e-3, abs=1e-3)


def test_scores_are_the_gradient() -> None:
    """The analytic per-call scores sum to the log-likelihood's numerical gradient (0.5%)."""
    rng = np.random.default_rng(3)
    tokens = np.maximum(1, np.round(np.exp(np.log(300) + 0.5 * rng.standard_normal(2000))))
    g = tokens / np.exp(np.log(60) + 0.26 * rng.standard_normal(2000))
    g += np.where(rng.random(2000) < 0.1, np.exp(np.log(5) + 0.4 * rng.standard_normal(2000)), 0)
    theta = np.array([np.log(55), np.log(0.3), -2.0, np.log(6), np.log(0.5)])
    _, scores = mixture_loglik(theta, g, np.log(tokens), scores=True)
    for k in range(5):
        e = np.zeros(5)
        e[k] = 1e-6
        up = mixture_loglik(theta + e, g, np.log(tokens))[0].sum()
        down = mixture_loglik(theta - e, g, np.log(tokens))[0].sum()
        assert scores[:, k].sum() == pytest.approx((up - down) / 2e-6, rel=5e-3, abs=0.5)


def test_no_stall_is_reported_when_there_is_none() -> None:
    """Calls without stalls: BIC keeps the plain lognormal (no stall block)."""
    rng = np.random.default_rng(5)
    log = synthetic_log(rng, 5000).assign(status="ok")
    ttft, tokens = log["ttft_s"].to_numpy(), log["output_tokens"].to_numpy()
    log["output_tokens"] = np.maximum(1, np.round(_law(LENGTH).sample(rng, 5000)))
    tokens = log["output_tokens"].to_numpy()
    log["latency_s"] = ttft + tokens / _law(SPEED).sample(rng, 5000)
    fit = fit_group(log, "p", "m")
    assert not fit.stall.supported
    assert "stall" not in fit.serving_block()
    assert fit.stall.speed.median == pytest.approx(SPEED[0], rel=0.03)


#: Seeds of 30 plain lognormal generation times (100 tokens at LN(ln 60, 0.26) tokens/s, no
#: stall) whose stall mixture gained 2 dlogL between 2 ln 30 = 6.8 and 3 ln 30 = 10.2 in a search
#: of seeds 0-399 (7.0 to 9.8). The mixture's optimum is a numerical search, so which seeds land
#: there moves a little with the SciPy release (85 and 233 did under SciPy 1.16, 115, 271, 327,
#: 380 and 391 do under 1.17): the test keeps those that land there on the installed one.
NEAR_THE_PENALTIES = (1, 50, 85, 115, 233, 271, 327, 347, 380, 391)


def _plain_stall_fit(seed: int) -> tuple[StallMixture, float, float]:
    """The stall mixture of 30 plain lognormal generation times, and its gain and penalty."""
    rng = np.random.default_rng(seed)
    tokens = np.full(30, 100.0)
    g = tokens / np.exp(np.log(60.0) + 0.26 * rng.standard_normal(30))
    fit = fit_stall_mixture(g, tokens)
    gain, penalty = (float(x) for x in re.findall(r"[-\d.]+(?= |$)", fit.evidence)[-2:])
    return fit, gain, penalty


def test_a_stall_must_pass_bics_penalty_for_its_three_parameters() -> None:
    """Bug: the stall's BIC penalty 2 ln n instead of 3 ln n (the stall adds three parameters:
    its probability and its lognormal's mu and sigma). The round-trip tests pass either way, and
    counting false stall verdicts on plain samples tells the two penalties apart only weakly
    (seeds 0-399 at n = 30: 5 false stalls with 3 ln n, 14 with 2 ln n; 3 standard errors apart
    takes ~1,500 fits). Samples that gain between the two penalties are where the verdicts differ
    for certain: no stall is reported, and the evidence states the gain against 3 ln 30. At least
    three of the listed seeds must land there (8 of 10 do on SciPy 1.17)."""
    between = []
    for seed in NEAR_THE_PENALTIES:
        fit, gain, penalty = _plain_stall_fit(seed)
        assert penalty == pytest.approx(3 * math.log(30), abs=0.05)
        if 2 * math.log(30) < gain < 3 * math.log(30):  # the sample is where the bug matters
            between.append(seed)
            assert not fit.supported, seed
            assert (fit.probability, fit.extra) == (0.0, None), seed
    assert len(between) >= 3, between


@pytest.mark.slow
def test_round_trip_through_the_engine() -> None:
    """The same law in a scenario, 50,000 calls logged by `tailsim synth`'s engine (errors carry
    no first token, junk returns at it), fitted: every value within 4 of its SEs of the
    scenario's (here stall.extra_s p99 comes back 3.3% low, 1.5 SE: 3% at p99 of ~1,450 stalls
    is 1.5-2 SE, so the 3% bar holds in most seeds, not all; docs/fitting.md)."""
    spec = {
        "name": "rt",
        "seed": 5,
        "deadline_s": 1e7,
        "arrivals": {"kind": "poisson", "rate_per_s": 10.0},
        "models": {"m": {}},
        "providers": {
            "p": {
                "serves": {
                    "m": {
                        "ttft_s": {"median": TTFT[0], "p99": TTFT[1]},
                        "tokens_per_s": {"median": SPEED[0], "p99": SPEED[1]},
                        "stall": {
                            "probability": STALL_P,
                            "extra_s": {"median": EXTRA[0], "p99": EXTRA[1]},
                        },
                        "error_rate": ERROR,
                        "invalid_rate": INVALID,
                    }
                }
            }
        },
        "workflow": {
            "steps": [
                {"id": "a", "model": "m", "output_tokens": {"median": LENGTH[0], "p99": LENGTH[1]}}
            ]
        },
        "policies": {"wait": {"kind": "wait"}},
    }
    calls = synth_calls(compile_scenario(scenario_from_dict(spec)), requests=N)
    fit = fit_group(calls, "p", "m")
    assert fit.mode == "first_token"
    for name, law, truth in (
        ("ttft", fit.ttft, TTFT),
        ("speed", fit.stall.speed, SPEED),
        ("stall extra", fit.stall.extra, EXTRA),
        ("output tokens", fit.output_tokens, LENGTH),
    ):
        for q, value in ((0.5, truth[0]), (0.99, truth[1])):
            got, se = law.quantile(q), law.se_quantile(q)
            assert abs(got - value) < 4 * se, f"{name} q{q}: {got:.4g} vs {value:.4g} (SE {se:.3g})"
    assert abs(fit.stall.probability - STALL_P) < 0.005
    assert abs(fit.error_rate - ERROR) < 4 * fit.se_error_rate
    assert abs(fit.invalid_rate - INVALID) < 4 * fit.se_invalid_rate
