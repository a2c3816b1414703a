"""The fit extras (sim.calibration.extras and its modules) and synth: each extra recovers known
parameters from logs drawn with them, and is not reported where it is absent.

Every statistical test fixes its seeds; tolerances are stated against the standard errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.calibration.arrivals import fit_arrivals
from sim.calibration.episodes import fit_spells
from sim.calibration.extras import fit_extras
from sim.calibration.overhead import fit_overhead
from sim.calibration.synth import calls_to_log, synth_calls
from sim.model.arrivals import arrival_times
from sim.model.config import ArrivalsSpec
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario
from tests.helpers import REPO_ROOT

AZURE = (
    REPO_ROOT / "scenarios" / "data" / "azure-llm-trace-2023" / "AzureLLMInferenceTrace_code.csv"
)


def spell_log(
    n: int, every_s: float, last_s: float, slowdown: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(start times, log-latency residuals) of n calls at 1/s on a provider with spells as the
    engine draws them (quiet Exp(every - last), spell Exp(last); a call that starts in one is
    `slowdown` times slower), first token + generation lognormal, 1% stalls of ~20 s."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0, n))
    on = np.zeros(n, bool)
    if slowdown > 1:
        edges, clock = [], 0.0
        while clock < t[-1]:
            begin = clock + rng.exponential(every_s - last_s)
            clock = begin + rng.exponential(last_s)
            edges.append((begin, clock))
        begins, ends = np.array(edges).T
        k = np.searchsorted(begins, t, side="right") - 1
        on = (k >= 0) & (t < ends[np.maximum(k, 0)])
    ttft = np.exp(np.log(0.5) + 0.6 * rng.standard_normal(n))
    generation = 300 / np.exp(np.log(60) + 0.22 * rng.standard_normal(n))
    stall = np.where(rng.random(n) < 0.01, np.exp(np.log(20) + 0.3 * rng.standard_normal(n)), 0)
    latency = np.where(on, slowdown, 1.0) * (ttft + generation) + stall
    return t, np.log(latency) - np.median(np.log(latency))


def test_spells_detected_and_recovered() -> None:
    """every_s 60, last_s 6, slowdown 2 over 20,000 s (about 330 spells): the fit's own SEs
    are ~6% (every_s) and ~10% (last_s, spells are seen only at calls), so 20% is 2-3 SEs;
    the slowdown's SE is ~1%."""
    t, r = spell_log(20_000, 60.0, 6.0, 2.0, seed=1)
    fit = fit_spells(t, r)
    assert fit.supported, fit.evidence
    for value, true in ((fit.every_s, 60.0), (fit.last_s, 6.0), (fit.slowdown, 2.0)):
        assert abs(value / true - 1) < 0.2, (value, true, fit.standard_errors)
    # the stated SEs are of the size the recovery shows
    assert 0.01 < fit.standard_errors["every_s"] / fit.every_s < 0.15


def test_no_spells_reported_in_19_of_20_seeds() -> None:
    """Independent calls (with stalls, a skewed body): the persistence test at alpha 1% and
    the BIC: at most one false report in 20 seeds (expected ~0.2)."""
    reported = [fit_spells(*spell_log(2000, 60.0, 6.0, 1.0, seed)).supported for seed in range(20)]
    assert sum(reported) <= 1, reported


def small_scenario(**extra: object) -> dict:
    """A three-step chain at 1 request/s on one provider, no limits, extra keys merged."""
    steps = [
        {"id": f"s{i}", "model": "m", "input_tokens": 1000, "output_tokens": 300} for i in range(3)
    ]
    for i in range(1, 3):
        steps[i]["after"] = [f"s{i - 1}"]
    provider: dict = {
        "serves": {
            "m": {
                "ttft_s": {"median": 0.5, "p99": 2.0},
                "tokens_per_s": {"median": 60, "p99": 100},
                "stall": {"probability": 0.01, "extra_s": {"median": 20, "p99": 40}},
            }
        }
    }
    provider.update(extra.pop("provider", {}))
    return {
        "name": "fit-extras",
        "seed": 3,
        "deadline_s": 1e6,
        "arrivals": {"kind": "poisson", "rate_per_s": 1.0},
        "models": {"m": {"price_per_mtok": {"input": 1, "output": 1}}},
        "providers": {"p": provider},
        "workflow": {"steps": steps},
        "policies": {"wait": {"kind": "wait"}},
        **extra,
    }


def test_difficulty_recovered_and_not_mistaken_for_spells() -> None:
    """difficulty p99 2 (log-sd 0.30) over 2000 requests of 3 calls: the ANOVA's SE of the
    p99 is ~0.025 here (stated by the fit), so 10% is over 5 SEs; the request effect is not
    reported as spells. Without difficulty, none is reported."""
    log = synth_calls(
        compile_scenario(scenario_from_dict(small_scenario(difficulty={"median": 1, "p99": 2.0}))),
        requests=3000,
    )
    fits = {f.name: f for f in fit_extras(log)}
    difficulty = fits["difficulty"]
    assert difficulty.supported, difficulty.evidence
    assert abs(difficulty.block["p99"] / 2.0 - 1) < 0.1, difficulty
    assert difficulty.block["p99"] - 2.0 < 4 * difficulty.standard_errors["p99"] + 0.05
    assert not fits["episodes"].supported, fits["episodes"].evidence
    plain = {
        f.name: f
        for f in fit_extras(
            synth_calls(compile_scenario(scenario_from_dict(small_scenario())), requests=1500)
        )
    }
    assert not plain["difficulty"].supported, plain["difficulty"].evidence


def test_spells_found_through_synth() -> None:
    """The round trip through the engine: spells every 100 s for 10 s at slowdown 2 in a
    5000-request log (about 150 spells): detected, every_s, last_s and slowdown within 20%
    (SEs ~8%, ~8% and ~1%), no load dependence reported."""
    spec = small_scenario(provider={"episodes": {"every_s": 100, "last_s": 10, "slowdown": 2.0}})
    fits = {
        f.name: f
        for f in fit_extras(synth_calls(compile_scenario(scenario_from_dict(spec)), requests=5000))
    }
    spells = fits["episodes"]
    assert spells.supported, spells.evidence
    assert spells.where == "providers.p.episodes"
    for key, true in (("every_s", 100.0), ("last_s", 10.0), ("slowdown", 2.0)):
        assert abs(spells.block[key] / true - 1) < 0.2, (key, spells.block, spells.standard_errors)
    assert not fits["slowdown"].supported, fits["slowdown"].evidence


def test_load_dependence_found() -> None:
    """slowdown {a 1, k 2} on 24 slots at 1.5 requests/s: reported (F test at 1%), while the
    flat scenarios above report none. Only the direction of a is checked: a log's calls in
    flight include queued ones, whose queue time the curve also absorbs, so a and k are
    approximate when the provider queues (docs/fitting-extras.md)."""
    spec = small_scenario(provider={"concurrency": 24, "slowdown": {"a": 1.0, "k": 2.0}})
    spec["arrivals"]["rate_per_s"] = 1.5
    log = synth_calls(compile_scenario(scenario_from_dict(spec)), requests=3000)
    fits = {f.name: f for f in fit_extras(log, concurrency=24)}
    load = fits["slowdown"]
    assert load.supported, load.evidence
    assert load.block["a"] > 0.3, (load.block, load.standard_errors)


def test_overhead_recovered() -> None:
    """A lognormal overhead {median 0.03, p99 0.06} s on 5000 calls: the SE of the median is
    ~0.4% and of the p99 ~1.5%, so 5% is over 3 SEs; a fixed overhead is a constant."""
    rng = np.random.default_rng(4)
    server = np.exp(np.log(5.0) + 0.5 * rng.standard_normal(5000))
    sigma = np.log(2.0) / 2.3263478740408408
    overhead = np.exp(np.log(0.03) + sigma * rng.standard_normal(5000))
    fit = fit_overhead(server + overhead, server)
    assert fit is not None
    assert abs(fit.block["median"] / 0.03 - 1) < 0.05, fit
    assert abs(fit.block["p99"] / 0.06 - 1) < 0.05, fit
    constant = fit_overhead(server + 0.025, server)
    assert constant is not None
    assert constant.block["dist"] == "constant"
    assert constant.block["value"] == pytest.approx(0.025, rel=1e-6)
    assert fit_overhead(server, np.full(5000, np.nan)) is None


def test_overhead_through_fit_extras() -> None:
    """fit_extras reports overhead_s per provider from a log with server_latency_s."""
    log = synth_calls(compile_scenario(scenario_from_dict(small_scenario())), requests=300)
    log["server_latency_s"] = log["latency_s"] - 0.04
    fits = [f for f in fit_extras(log) if f.name == "overhead_s"]
    assert [f.where for f in fits] == ["providers.p.overhead_s"]
    assert fits[0].block["value"] == pytest.approx(0.04, rel=1e-4)


def test_arrivals_poisson_bursty_and_azure() -> None:
    """Poisson arrivals stay Poisson (LR test at 1%); on/off bursts (peak_to_mean 4, bursts
    of 20 s, 20,000 arrivals: SEs ~10%) are found with each parameter within 25%; the bundled
    Azure code trace (8819 arrivals in an hour) is bursty with the mean rate kept (within 10%)."""
    rng = np.random.default_rng(2)
    poisson = fit_arrivals(arrival_times(ArrivalsSpec(kind="poisson", rate_per_s=2.0), 5000, rng))
    assert not poisson.supported, poisson.evidence
    assert poisson.block["kind"] == "poisson"
    assert abs(poisson.block["rate_per_s"] / 2.0 - 1) < 0.05
    spec = ArrivalsSpec(kind="bursty", rate_per_s=2.0, peak_to_mean=4.0, burst_s=20.0)
    bursty = fit_arrivals(arrival_times(spec, 20_000, rng))
    assert bursty.supported, bursty.evidence
    assert bursty.block["kind"] == "bursty"
    for key, true in (("rate_per_s", 2.0), ("peak_to_mean", 4.0), ("burst_s", 20.0)):
        assert abs(bursty.block[key] / true - 1) < 0.25, (key, bursty.block)
    stamps = pd.to_datetime(pd.read_csv(AZURE)["TIMESTAMP"]).astype("int64").to_numpy() / 1e9
    azure = fit_arrivals(stamps)
    assert azure.supported, azure.evidence
    assert azure.block["kind"] == "bursty"
    mean_rate = (len(stamps) - 1) / (stamps.max() - stamps.min())
    assert abs(azure.block["rate_per_s"] / mean_rate - 1) < 0.1, (azure.block, mean_rate)


def test_calls_to_log_maps_outcomes_and_overhead() -> None:
    """Outcomes become statuses (truncated -> invalid; cancelled -> timeout with the elapsed
    time to the cut, as a client logs its cancellations; one cancelled before it was sent is
    left out), queue time counts in latency and first token, and an `overhead_s` column gives
    server_latency_s."""
    calls = pd.DataFrame(
        {
            "request_id": [0, 0, 1, 2, 3],
            "resend": [0, 0, 1, 0, 0],
            "provider": ["p"] * 5,
            "model": ["m"] * 5,
            "start_s": [0.0, 1.0, 2.0, 3.0, 4.0],
            "queue_s": [0.5, 0.0, 0.0, 0.0, 0.0],
            "ttft_s": [1.0, np.nan, 0.2, 0.3, np.nan],
            "end_s": [4.0, 2.0, 2.5, 3.5, 4.0],
            "outcome": ["ok", "cancelled", "truncated", "rate_limited", "cancelled"],
            "input_tokens": [10, 10, 10, 0, 10],
            "output_tokens": [5, 0, 7, 0, 5],
            "overhead_s": [0.1, 0.1, 0.2, 0.0, 0.0],
        }
    )
    log = calls_to_log(calls)
    assert list(log["status"]) == ["ok", "timeout", "invalid", "rate_limited"]
    assert log["http_status"].tolist()[:1] + log["http_status"].tolist()[2:] == [200, 200, 429]
    assert log["http_status"].isna().tolist() == [False, True, False, False]
    assert list(log["request_id"]) == ["0", "0", "1.1", "2"]
    assert log["latency_s"].tolist() == pytest.approx([4.0, 1.0, 0.5, 0.5])
    assert log["ttft_s"].tolist()[::2] == pytest.approx([1.5, 0.2])
    assert np.isnan(log["ttft_s"].iloc[1])
    assert log["server_latency_s"].tolist() == pytest.approx([3.9, 0.9, 0.3, 0.5])
    assert np.isnan(calls_to_log(calls.drop(columns="overhead_s"))["server_latency_s"]).all()
