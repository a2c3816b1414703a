"""The first token as the person sees it (`first_signal: {step, target_s}`, issue 26 item 4).

Scripted runs check the definition exactly (the named step's delivered answer, a retry's first
token, NaN and its place in the percentiles); a lognormal first token checks the hit rate and
the median against their closed forms; the engines, the tallied path and the key's errors are
checked against each other and the format."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

import sim
from sim.analysis.metrics import summarize
from sim.analysis.user_signal import fill_user_first_token
from sim.model.config import FirstSignalSpec
from sim.model.errors import ScenarioError
from sim.model.latency import lognormal_params
from sim.model.scenario import scenario_from_dict
from tests.helpers import (
    ScriptedBank,
    assert_exit,
    build,
    cli,
    error,
    ok,
    scenario_dict,
    serving,
    simulate,
    step,
)

CHAIN = [step("s1"), step("answer", "s1")]


def _tables(bank: ScriptedBank, retries: int = 1) -> tuple:
    s = build(CHAIN, {"p": {"kind": "wait", "retries": retries}}, first_signal={"step": "answer"})
    result = simulate(s, "p", bank, arrivals=(3.0,))
    return fill_user_first_token(result.requests, result.calls, "answer"), result.calls


def test_user_first_token_is_the_named_steps_delivered_answer_not_the_runs_first() -> None:
    """s1 answers at 0.3 s to first token (1.3 s in all); the answer step's first attempt errs
    at 0.5 s (1.8 s), its retry starts then and streams its first token 0.7 s later: 2.5 s
    after arrival, while the run's first signal is s1's, at 0.3 s."""
    bank = ScriptedBank(
        {("s1", 0): ok(0.3, 1.0), ("answer", 0): error(0.5), ("answer", 1): ok(0.7, 1.0)}
    )
    requests, calls = _tables(bank)
    assert requests["first_signal_s"].iloc[0] == pytest.approx(0.3)
    assert requests["user_ttft_s"].iloc[0] == pytest.approx(2.5)
    row = summarize(requests, calls, first_signal=FirstSignalSpec(step="answer", target_s=2.4))
    assert row["user_ttft_p50_s"].iloc[0] == pytest.approx(2.5)
    assert row["user_ttft_hit_rate"].iloc[0] == 0.0  # 2.5 s > 2.4 s
    row = summarize(requests, calls, first_signal=FirstSignalSpec(step="answer", target_s=2.5))
    assert row["user_ttft_hit_rate"].iloc[0] == 1.0


def test_a_step_that_never_answers_is_a_miss_counted_at_the_runs_latency() -> None:
    bank = ScriptedBank({("s1", 0): ok(0.3, 1.0), ("answer", 0): error(0.5)})
    requests, calls = _tables(bank, retries=0)
    assert math.isnan(requests["user_ttft_s"].iloc[0])
    row = summarize(requests, calls, first_signal=FirstSignalSpec(step="answer", target_s=50.0))
    latency = requests["latency_s"].iloc[0]  # failed: counted at its deadline
    assert latency == pytest.approx(100.0)
    assert row["user_ttft_p50_s"].iloc[0] == pytest.approx(latency)
    assert row["user_ttft_hit_rate"].iloc[0] == 0.0


def test_without_first_signal_the_metrics_are_nan_and_nothing_else_moves() -> None:
    bank = ScriptedBank({("s1", 0): ok(0.3, 1.0), ("answer", 0): ok(0.7, 1.0)})
    s = build(CHAIN, {"p": {"kind": "wait"}})
    result = simulate(s, "p", bank, arrivals=(3.0,))
    requests = fill_user_first_token(result.requests, result.calls, None)
    assert requests["user_ttft_s"].isna().all()
    row = summarize(requests, result.calls).iloc[0]
    assert all(math.isnan(row[c]) for c in row.index if str(c).startswith("user_ttft"))


#: A lognormal first token (median 0.8 s, p99 4 s) and a fixed 1 s of generation.
MEDIAN, P99, N = 0.8, 4.0, 4000


def _lognormal_run(engine: str, records: str = "all") -> sim.api.RunResult:
    constant = {"dist": "constant", "value": 100.0}
    serve = {"ttft_s": {"median": MEDIAN, "p99": P99}, "tokens_per_s": constant}
    data = scenario_dict(
        [step("answer")],
        {"wait": {"kind": "wait"}},
        providers={"p1": {"serves": {"big": serve, "small": serving()}}},
        first_signal={"step": "answer", "target_s": 1.5},
        requests=N,
        engine=engine,
    )
    return sim.api.run(scenario_from_dict(data), records=records)


@pytest.fixture(scope="module")
def lognormal_runs() -> dict[str, sim.api.RunResult]:
    return {engine: _lognormal_run(engine) for engine in ("des", "vectorized")}


def test_hit_rate_and_median_hold_the_lognormal_closed_form(lognormal_runs: dict) -> None:
    """One step, no queue: the user's first token is the call's first token, so the hit rate
    is P(TTFT <= 1.5 s) = Phi((ln 1.5 - mu) / sigma), held to 4 binomial standard errors
    (sqrt(p(1-p)/N) = 0.0077 at N = 4000), and the median to 4 standard errors of a sample
    median, 1 / (2 f(m) sqrt(N)) with f the lognormal density at its median."""
    mu, sigma = lognormal_params(MEDIAN, P99)
    row = lognormal_runs["des"].summary.iloc[0]
    p = norm.cdf((math.log(1.5) - mu) / sigma)
    assert abs(row["user_ttft_hit_rate"] - p) < 4 * math.sqrt(p * (1 - p) / N)
    density = norm.pdf(0.0) / (sigma * MEDIAN)
    assert abs(row["user_ttft_p50_s"] - MEDIAN) < 4 / (2 * density * math.sqrt(N))
    assert row["user_ttft_p50_s"] <= row["user_ttft_p90_s"] <= row["user_ttft_p99_s"]


def test_both_engines_and_the_tallied_path_agree_to_the_last_bit(lognormal_runs: dict) -> None:
    des, vectorized = lognormal_runs["des"], lognormal_runs["vectorized"]
    assert set(vectorized.engines.values()) == {"vectorized"}
    np.testing.assert_array_equal(
        des.requests["user_ttft_s"].to_numpy(), vectorized.requests["user_ttft_s"].to_numpy()
    )
    tallied = _lognormal_run("des", records="none")  # aggregated as the run goes
    kept = _lognormal_run("vectorized", records="requests")  # in chunks, requests kept
    np.testing.assert_array_equal(
        kept.requests["user_ttft_s"].to_numpy(), des.requests["user_ttft_s"].to_numpy()
    )
    columns = ["user_ttft_p50_s", "user_ttft_p90_s", "user_ttft_p99_s", "user_ttft_hit_rate"]
    for column in columns:
        assert tallied.summary[column].iloc[0] == des.summary[column].iloc[0], column
        assert vectorized.summary[column].iloc[0] == des.summary[column].iloc[0], column
        assert kept.summary[column].iloc[0] == des.summary[column].iloc[0], column


@pytest.mark.parametrize(
    ("signal", "said"),
    [
        ({"step": "nope"}, "'nope' is not a step of the workflow"),
        ({"step": "act"}, "'act' is a tool step"),
        ({"step": "s1", "target_s": -1}, "greater than 0"),
        ({"step": "s1", "when": 3}, "when"),
    ],
)
def test_bad_first_signal_names_the_key_path(signal: dict, said: str) -> None:
    tool = {
        "id": "act",
        "kind": "tool",
        "after": ["s1"],
        "tool": {"commit_s": {"dist": "constant", "value": 1.0}},
    }
    data = scenario_dict([step("s1"), tool], first_signal=signal)
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    assert "first_signal" in str(caught.value)
    assert said in str(caught.value)


def test_the_cli_refuses_a_bad_step_with_exit_2(tmp_path) -> None:
    text = (sim.model.scenario.default_scenario_path()).read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "\nfirst_signal: {step: s99}\n", encoding="utf-8")
    result = cli("check", bad)
    assert_exit(result, 2)
    assert "first_signal.step" in result.output
    assert "s99" in result.output
