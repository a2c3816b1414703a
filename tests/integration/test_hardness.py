"""Hard requests (`hardness`, `models.M.when_hard`) on whole runs: junk and answer length belong
to the request.

Closed forms (constant latencies, so nothing but the outcome draws matters and the deadline
never binds): with a share h of requests hard, junk probability p_hard on them and p_easy on the
rest, one try succeeds with 1 - pbar (pbar = h p_hard + (1 - h) p_easy), two tries of the same
model with 1 - [h p_hard^2 + (1 - h) p_easy^2], which is below the 1 - pbar^2 of independent
draws (Jensen), and a try of small then one of big with 1 - [h p_hard q_hard + (1 - h) p_easy
q_easy]. Statistical checks fix the seed and allow Z = 4 binomial standard errors (a correct
simulator fails one by chance with probability ~6e-5); each states what a wrong one would give."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import sim
import sim.engine.choice
import sim.model.streams
from sim.analysis.capacity import ALL, NONE
from sim.cli import main
from sim.model.scenario import scenario_from_dict
from tests.helpers import scenario_dict, step
from tests.model.test_hardness import P_EASY, P_HARD, Q_EASY, Q_HARD, H, hard_scenario

Z = 4.0


def _hit(result: sim.RunResult, policy: str) -> tuple[float, int]:
    ok = result.requests.loc[result.requests["policy"] == policy, "ok"]
    return float(ok.mean()), len(ok)


def _within(got: float, theory: float, n: int, what: str) -> None:
    se = math.sqrt(theory * (1 - theory) / n)
    assert abs(got - theory) <= Z * se, f"{what}: {got:.5f} vs {theory:.5f} +- {Z * se:.5f}"


# ---------------------------------------------------------------- closed forms


def test_retrying_the_same_model_gains_less_than_independent_draws() -> None:
    """One try, two tries of small, and small then big, against their closed forms (40,000
    requests, the vectorized engine). Drawn afresh per try (the old model) two tries would give
    1 - pbar^2 = 0.98898; shared hardness gives 0.96175, 20 SE below it."""
    policies = {
        "once": {"kind": "wait"},
        "twice": {"kind": "wait", "retries": 1},
        "fallup": {"kind": "downshift", "cutoff": 50.0, "to": "big", "retries": 1},
    }
    n = 40_000
    result = sim.run(scenario_from_dict(hard_scenario(policies)), requests=n, seed=4)
    assert set(result.engines.values()) == {"vectorized"}
    pbar = H * P_HARD + (1 - H) * P_EASY
    twice = 1 - (H * P_HARD**2 + (1 - H) * P_EASY**2)
    fallup = 1 - (H * P_HARD * Q_HARD + (1 - H) * P_EASY * Q_EASY)
    _within(_hit(result, "once")[0], 1 - pbar, n, "one try")
    _within(_hit(result, "twice")[0], twice, n, "two tries of small")
    _within(_hit(result, "fallup")[0], fallup, n, "small then big")
    se = math.sqrt(twice * (1 - twice) / n)
    assert (1 - pbar**2) - _hit(result, "twice")[0] > Z * se  # a per-try draw would pass this
    assert _hit(result, "fallup")[0] - _hit(result, "twice")[0] > Z * se


def test_a_hard_request_is_long_on_every_try_of_every_policy() -> None:
    """A hard answer on small is 3x long (300 tokens, 1 + 3 s at 100 tok/s), an easy one 100
    tokens in 2 s; big follows the length (length 1): exact per call. Every call is charged its
    answer's tokens at admission (`quota_tokens` = 1000 input + length), junk included, so every
    small call of one request, on every try and under every policy, is charged the same (exact;
    junk half the time makes several tries per request). The share of hard requests: h (Z SE)."""
    policies = {"wait": {"kind": "wait", "retries": 3}, "up": {"kind": "downshift",
                "cutoff": 50.0, "to": "big", "retries": 1}}  # fmt: skip
    data = hard_scenario(policies, small={"length": 3.0}, big={}, share=0.3)
    data["providers"]["p1"]["serves"]["small"]["invalid_rate"] = 0.5
    n = 4000
    result = sim.run(scenario_from_dict(data), requests=n, seed=2)
    calls = result.calls[result.calls["outcome"] == "ok"]
    assert set(calls.loc[calls["model"] == "small", "output_tokens"]) == {100, 300}
    assert (calls.loc[calls["model"] == "big", "output_tokens"] == 100).all()
    np.testing.assert_allclose(calls["end_s"] - calls["start_s"], 1 + calls["output_tokens"] / 100)
    small = result.calls[result.calls["model"] == "small"]
    charged = small.groupby("request_id")["quota_tokens"].agg(["min", "max", "size"])
    assert (charged["size"] > 2).mean() > 0.3  # several tries per request are common
    assert (charged["min"] == charged["max"]).all()
    assert set(charged["max"]) == {1100, 1300}
    _within(float((charged["max"] == 1300).mean()), 0.3, n, "share of hard requests")


def test_a_hard_answer_past_max_tokens_is_truncated_on_every_try() -> None:
    """max_tokens 150 and length x2 on small: a hard request's every answer on small is cut at
    150 tokens (`truncated`, billed 150), an easy one's never (exact per request); re-drawing
    small never rescues it, falling up to big (length 1) always does (no junk here). Share of
    truncated requests: h (Z SE)."""
    policies = {
        "redraw": {"kind": "wait", "retries": 2},
        "fallup": {"kind": "downshift", "cutoff": 50.0, "to": "big", "retries": 1},
    }
    steps = [step("s1", model="small", max_tokens=150)]
    data = hard_scenario(policies, small={"length": 2.0}, big={}, share=0.25, steps=steps)
    data["providers"]["p1"]["serves"]["small"]["invalid_rate"] = 0.0
    data["providers"]["p1"]["serves"]["big"]["invalid_rate"] = 0.0
    n = 3000
    result = sim.run(scenario_from_dict(data), requests=n, seed=6)
    calls, req = result.calls, result.requests.set_index(["policy", "request_id"])
    redraw = calls[calls["policy"] == "redraw"]
    cut = redraw.assign(cut=redraw["outcome"] == "truncated").groupby("request_id")["cut"]
    tries = cut.agg(["sum", "size"])
    hard = tries["sum"] > 0
    assert (tries.loc[hard, "sum"] == 3).all()
    assert (tries.loc[hard, "size"] == 3).all()
    assert (tries.loc[~hard, "size"] == 1).all()  # an easy request: answered at once
    assert (calls.loc[calls["outcome"] == "truncated", "output_tokens"] == 150).all()
    assert (req.loc["redraw", "ok"] == ~hard).all()
    assert req.loc["fallup", "ok"].all()
    _within(float(hard.mean()), 0.25, n, "truncated requests")


def test_a_validator_catches_its_share_of_hard_junk() -> None:
    """A validator with catches 0.5 rejects half the junk answers of hard requests (junk 0.6
    there, 0.05 on easy ones): the uniform inside the hard junk band decides. Reading the easy
    band's width instead would let through nearly all hard junk (caught share ~0.04)."""
    steps = [step("s1", model="small", validator={"catches": 0.5})]
    data = hard_scenario({"wait": {"kind": "wait"}}, share=1.0, steps=steps)
    n = 3000
    result = sim.run(scenario_from_dict(data), requests=n, seed=8)
    calls = result.calls
    caught = int((calls["outcome"] == "invalid").sum())
    passed = int(((calls["outcome"] == "ok") & ~calls["valid"]).sum())
    junk = caught + passed
    _within(junk / n, P_HARD, n, "hard junk")
    _within(caught / junk, 0.5, junk, "caught share of hard junk")


def test_a_resend_is_as_hard_as_its_first_send() -> None:
    """Hardness belongs to the request, re-sends included: easy requests never fail here, hard
    ones are junk 99% of the time, so a failed first send is hard and its re-sends fail ~99% of
    the time (hardness drawn afresh per send would make it h x 0.99 = 0.5)."""
    data = hard_scenario(
        {"wait": {"kind": "wait"}},
        small={"invalid_rate": 0.99},
        share=0.5,
        customers={"retry": {"probability": 1.0, "max": 2, "delay_s": 1.0}},
    )
    data["providers"]["p1"]["serves"]["small"]["invalid_rate"] = 0.0
    result = sim.run(scenario_from_dict(data), requests=1000, seed=1)
    req = result.requests
    resends = req[req["resend"] > 0]
    assert len(resends) > 300
    _within(float((~resends["ok"]).mean()), 0.99, len(resends), "re-sends failing")


# ---------------------------------------------------------------- nothing else moves


def _tail(hardness: dict[str, Any] | None, small: dict[str, Any] | None) -> dict[str, Any]:
    """Two heavy-tailed steps (big then small) with errors, junk and stalls."""
    tail = {
        "ttft_s": {"median": 0.5, "p99": 3.0},
        "tokens_per_s": {"median": 80.0, "p99": 160.0},
        "stall": {"probability": 0.1, "extra_s": {"median": 4.0, "p99": 20.0}},
        "error_rate": 0.05,
        "invalid_rate": 0.1,
    }
    data = scenario_dict(
        [step("s1"), step("s2", "s1", model="small")],
        {"cut": {"kind": "cut", "cutoff": 3.0, "retries": 2}, "race": {"kind": "race"}},
        deadline_s=20.0,
        arrivals={"kind": "poisson", "rate_per_s": 1.0},
    )
    data["providers"] = {"p1": {"serves": {"big": dict(tail), "small": dict(tail)}}}
    if hardness is not None:
        data["hardness"] = hardness
    if small is not None:
        data["models"]["small"]["when_hard"] = small
    return data


@pytest.mark.parametrize(
    ("hardness", "small"),
    [({"share": 0.0}, {"invalid_rate": 0.7, "length": 2.0}), ({"share": 0.4}, {})],
    ids=["share-0", "no-effect"],
)
def test_hardness_that_changes_nothing_gives_the_same_tables(
    hardness: dict[str, Any], small: dict[str, Any]
) -> None:
    plain = sim.run(scenario_from_dict(_tail(None, None)), requests=300)
    same = sim.run(scenario_from_dict(_tail(hardness, small)), requests=300)
    pd.testing.assert_frame_equal(same.summary, plain.summary)
    pd.testing.assert_frame_equal(same.calls, plain.calls)


@pytest.mark.parametrize("engine", ["des", "vectorized"])
def test_hardness_moves_no_other_draw(engine: str) -> None:
    """With hardness on, arrivals and every call's first token are those of the run without it
    (exact), a call's outcome only moves from ok to invalid (hard junk 0.7 above 0.1, from the
    same uniform), and only on small; a share of the requests changes at all."""
    plain = sim.run(scenario_from_dict(_tail(None, None)), requests=400, engine=engine)
    hard = _tail({"share": 0.4}, {"invalid_rate": 0.7})
    harder = sim.run(scenario_from_dict(hard), requests=400, engine=engine)
    key = ["policy", "request_id", "resend", "step", "attempt"]
    a = plain.calls.set_index(key)
    b = harder.calls.set_index(key)
    both = pd.merge(a, b, left_index=True, right_index=True, suffixes=("_plain", ""))
    first = both[both.index.get_level_values("attempt") == 0]
    first = first[first["outcome_plain"].isin(["ok", "invalid", "error"])]
    first = first[first["outcome"].isin(["ok", "invalid", "error"])]
    np.testing.assert_array_equal(first["ttft_s_plain"].isna(), first["ttft_s"].isna())
    np.testing.assert_array_equal(first["start_s_plain"], first["start_s"])  # s1: big, alike
    np.testing.assert_array_equal(first["ttft_s_plain"], first["ttft_s"])
    moved = first[first["outcome_plain"] != first["outcome"]]
    assert len(moved) > 0
    assert (moved["outcome_plain"] == "ok").all()
    assert (moved["outcome"] == "invalid").all()
    assert (moved["model"] == "small").all()
    np.testing.assert_array_equal(
        plain.requests["arrival_s"].to_numpy(), harder.requests["arrival_s"].to_numpy()
    )


def test_check_exits_2_naming_the_file_and_key(tmp_path: Path, write_yaml: Any) -> None:
    data = hard_scenario({"wait": {"kind": "wait"}})
    data["models"]["small"]["when_hard"] = {"invalid_rate": 0.96}
    data["providers"]["p1"]["serves"]["small"]["error_rate"] = 0.05
    path = write_yaml(data, "hard.yaml")
    out = CliRunner().invoke(main, ["check", str(path)])
    assert out.exit_code == 2, out.output
    assert str(path) in out.output
    assert "models.small.when_hard.invalid_rate" in out.output
    assert "Traceback" not in out.output


# ---------------------------------------------------------------- in chunks, in windows


@pytest.mark.parametrize("engine", ["vectorized", "des"])
def test_summaries_only_give_the_numbers_of_one_pass(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept as summaries only, the vectorized engine runs in chunks of requests (each drawing its
    own rows of the hardness stream) and the event engine draws from windows of rows: the
    numbers of the run with every table (rtol 1e-12, the same sums in another order)."""
    data = _tail({"share": 0.4}, {"invalid_rate": 0.7, "length": 2.0})
    data["engine"] = engine
    scenario = scenario_from_dict(data)
    full = sim.run(scenario, requests=1000, records=ALL)
    monkeypatch.setattr(sim.engine.choice, "CHUNK_REQUESTS", 170)  # many chunk boundaries
    monkeypatch.setattr(sim.model.streams, "WINDOW_ROWS", 64)  # and many small blocks of draws
    tallied = sim.run(scenario, requests=1000, records=NONE)
    assert set(tallied.engines.values()) == {engine}
    pd.testing.assert_frame_equal(
        full.summary, tallied.summary, check_dtype=False, rtol=1e-12, atol=0
    )
