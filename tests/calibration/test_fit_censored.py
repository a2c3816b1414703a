"""Cut calls as right-censored observations in `tailsim fit` (sim.calibration.censored): a call
the client cut at elapsed c contributes log P(latency > c). Calls drawn from known parameters
and censored at a fixed c come back within 4 of their SEs (a 4-sigma miss: 6e-5 per value),
and the same fit without the censored calls is biased by far more (so the test can fail); the
default scenario's `tailsim synth` log (deadline cuts) gives the scenario's stall back and no
per-request difficulty."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.calibration.censored import Censored
from sim.calibration.extras import fit_extras
from sim.calibration.marginals import fit_group, fit_stall_mixture
from sim.calibration.report import _cut_in_spells, fit_calls
from sim.calibration.synth import synth_calls
from sim.model.latency import LogNormal
from sim.model.scenario import load_scenario
from sim.plan import compile_scenario

SPEED = (60.0, 110.0)
EXTRA = (30.0, 80.0)
STALL_P = 0.03
TOKENS = 300.0
CUT_S = 40.0  # a fixed client timeout: ~36% of stalled calls are cut


def _censored_sample(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Generation + stall times of n calls of TOKENS tokens: (finished times, cut times)."""
    rng = np.random.default_rng(seed)
    speed = LogNormal.from_median_p99(*SPEED).sample(rng, n)
    extra = LogNormal.from_median_p99(*EXTRA).sample(rng, n)
    g = TOKENS / speed + np.where(rng.random(n) < STALL_P, extra, 0.0)
    return g[g <= CUT_S], np.full(int((g > CUT_S).sum()), CUT_S)


def test_censored_stall_recovered_and_biased_without_censoring() -> None:
    """20,000 calls, cut at 40 s (~210 of ~600 stalls): with the censored terms p, the stall
    median and p99 and the speed median are within 4 SE of the truth; fitted on the finished
    calls alone, p is more than 8 SE low (it sees ~2% stalls) and the stall p99 too."""
    done, cut = _censored_sample(20261201, 20_000)
    assert 150 < len(cut) < 300
    censored = Censored(cut, np.full(len(cut), np.log(TOKENS)), np.zeros(len(cut), bool))
    fit = fit_stall_mixture(done, np.full(len(done), TOKENS), censored)
    assert fit.supported
    assert fit.extra is not None
    assert abs(fit.probability - STALL_P) < 4 * fit.se_probability
    assert abs(fit.extra.median - EXTRA[0]) < 4 * fit.extra.se_quantile(0.5)
    assert abs(fit.extra.p99 - EXTRA[1]) < 4 * fit.extra.se_quantile(0.99)
    assert abs(fit.speed.median - SPEED[0]) < 4 * fit.speed.se_quantile(0.5)
    assert fit.speed.n == len(done) + len(cut)
    naive = fit_stall_mixture(done, np.full(len(done), TOKENS))
    assert naive.extra is not None
    assert STALL_P - naive.probability > 8 * naive.se_probability, naive.probability
    assert EXTRA[1] - naive.extra.p99 > 4 * naive.extra.se_quantile(0.99), naive.extra.p99


def _group(done: np.ndarray, cut: np.ndarray, ttft: float | None) -> pd.DataFrame:
    """A call log of one group: finished calls (first token 0.5 s) and cut ones (first token
    0.5 s where `ttft` is given, else not logged)."""
    n, k = len(done), len(cut)
    return pd.DataFrame(
        {
            "latency_s": np.concatenate([done + 0.5, cut + 0.5]),
            "ttft_s": np.concatenate(
                [np.full(n, 0.5), np.full(k, np.nan if ttft is None else 0.5)]
            ),
            "output_tokens": np.concatenate([np.full(n, TOKENS), np.full(k, np.nan)]),
            "status": ["ok"] * n + ["timeout"] * k,
        }
    )


@pytest.mark.parametrize("ttft", [0.5, None])
def test_fit_group_censors_cut_calls(ttft: float | None) -> None:
    """Through `fit_group` (first-token mode): a cut call's rest is censored at elapsed - first
    token where the first token is logged, and integrated over the fitted first-token law where
    it is not; the length of a cut call without one is the ok calls' median. Both recover p and
    the stall median within 4 SE and say so in a note."""
    done, cut = _censored_sample(7, 20_000)
    fit = fit_group(_group(done, cut, ttft), "p", "m")
    assert fit.mode == "first_token"
    assert fit.stall.extra is not None
    assert abs(fit.stall.probability - STALL_P) < 4 * fit.stall.se_probability
    assert abs(fit.stall.extra.median - EXTRA[0]) < 4 * fit.stall.extra.se_quantile(0.5)
    assert any("right-censored" in note for note in fit.notes)


def test_total_time_censored() -> None:
    """Total-time mode: a cut call contributes log S(c) of the whole call's law (same data)."""
    done, cut = _censored_sample(11, 20_000)
    fit = fit_group(_group(done, cut, 0.5), "p", "m", total_time=True)
    assert fit.mode == "total_time"
    assert fit.stall.extra is not None
    assert abs(fit.stall.probability - STALL_P) < 4 * fit.stall.se_probability


@pytest.mark.slow
def test_default_scenario_round_trip_recovers_stall_and_no_difficulty() -> None:
    """`tailsim synth scenarios/default.yaml -n 3000` then the fit (the lead's report: stall
    0.0237 +- 0.0009 vs 0.03, extra median 27.4 s vs 30, spurious difficulty F 1.09): the 90 s
    deadline cuts ~500 calls, now logged as `timeout` and censored. Stall probability within 0.5
    points and 3 SE, extra median and p99 within 3 SE; no difficulty reported."""
    log = synth_calls(compile_scenario(load_scenario("scenarios/default.yaml")), requests=3000)
    assert (log["status"] == "timeout").sum() > 300
    fits, _ = fit_calls(log, mode="first_token", seed=0)  # what auto keeps here; half the time
    (group,) = [g for g in fits if g.fit.provider == "direct"]
    stall = group.fit.stall
    assert stall.extra is not None
    assert abs(stall.probability - 0.03) < min(0.005, 3 * stall.se_probability), stall
    assert abs(stall.extra.median - 30) < 3 * stall.extra.se_quantile(0.5), stall.extra.median
    assert abs(stall.extra.p99 - 80) < 3 * stall.extra.se_quantile(0.99), stall.extra.p99
    base = {(g.fit.provider, g.fit.model): g.fit.serving_block() for g in fits}
    extras = {f.name: f for f in fit_extras(log, base)}
    assert not extras["difficulty"].supported, extras["difficulty"].evidence
    assert "with a cut call left out" in extras["difficulty"].evidence


def test_cut_calls_in_a_spell_are_left_out_of_the_quiet_refit() -> None:
    """A cut call has no spell posterior of its own: it takes that of the provider's last call
    started at or before it, so the refit outside spells does not count a spell's cut calls in
    the marginal law (nor another provider's)."""
    calls = pd.DataFrame(
        {
            "start_s": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.5],
            "status": ["ok", "timeout", "ok", "timeout", "ok", "timeout", "timeout"],
            "provider": ["p"] * 6 + ["q"],
        }
    )
    posterior = pd.Series([0.1, 0.9, 0.2], index=[0, 2, 4])
    inside = _cut_in_spells(calls, posterior, "p")
    assert inside.tolist() == [False, False, False, True, False, False, False]
