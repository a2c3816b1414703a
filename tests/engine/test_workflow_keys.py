"""Issue 27's workflow keys on the event engine (when, repeat, loop, map) against their closed
forms, their bad input, and "without the keys nothing changes".

Every statistical check runs a fixed seed on N requests and holds the estimate within 4
standard errors of the closed form (a false alarm about once in 16 000 seeds); with constant
latencies the times are exact, so only the counted rates carry sampling error."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.stats import lognorm

from sim.analysis.metrics import calls_frame, requests_frame
from sim.engine.choice import single_policy
from sim.engine.qualify import qualifies
from sim.engine.simulation import Simulation
from sim.model.arrivals import arrival_times
from sim.model.config import CountSpec, Scenario
from sim.model.errors import ScenarioError
from sim.model.flow import count
from sim.model.latency import lognormal_params
from sim.model.scenario import scenario_from_dict
from sim.model.streams import CallDrawBank, Streams, WindowedDrawBank
from sim.plan import compile_scenario
from tests.helpers import build, resolved_plan, scenario_dict, serving, step

N = 4000
#: Standard errors a rate may stray from its closed form (see the module's docstring).
Z = 4.0


def run(
    scenario: Scenario, n: int = N, seed: int = 0, policy: str = "it"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The event engine's (requests, calls) of `policy` on `n` requests of `scenario`."""
    plan = resolved_plan(scenario, seed)
    streams = Streams(seed, "main")
    times = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
    bank = CallDrawBank(streams.child("calls"), n)
    records = Simulation(plan, single_policy(plan.runtime(policy)), bank, streams).run(times)
    return requests_frame(records), calls_frame(records)


def scenario(
    steps: list[dict[str, Any]],
    serve: dict[str, Any] | None = None,
    deadline_s: float = 1000.0,
    policy: dict[str, Any] | None = None,
    **overrides: Any,
) -> Scenario:
    """Steps on p1 (serving `big` as `serve`), policy `it` (a wait with no retries), sparse
    arrivals (no queueing: each request sees the bare laws)."""
    providers = {"p1": {"serves": {"big": serve or serving(), "small": serving()}}}
    return build(
        steps,
        {"it": policy or {"kind": "wait"}},
        providers=providers,
        arrivals={"kind": "poisson", "rate_per_s": 0.001},
        deadline_s=deadline_s,
        **overrides,
    )


def within(estimate: float, expected: float, n: int, what: str) -> None:
    """`estimate` (a share of `n` requests) within Z standard errors of `expected`."""
    se = math.sqrt(max(expected * (1 - expected), 1e-12) / n)
    assert abs(estimate - expected) <= Z * se, (
        f"{what}: {estimate:.4f} vs {expected:.4f} (se {se:.4f})"
    )


# ---------------------------------------------------------------- when


def test_when_probability_runs_the_step_for_its_share_and_the_latency_is_the_mixture() -> None:
    # constant laws: a request takes 2 s (a, b) or 4 s (a, the optional c, then b)
    steps = [step("a"), step("c", "a", when={"probability": 0.3}), step("b", "c")]
    requests, calls = run(scenario(steps))
    ran = calls[calls.step == "c"].request_id.nunique() / N
    within(ran, 0.3, N, "share of requests running c")
    assert requests.ok.all()  # a skipped step is not a failure: b went on
    latency = requests.latency_s.to_numpy()
    assert set(np.round(latency, 9)) == {4.0, 6.0}
    # the mixture's mean: P * 6 + (1 - P) * 4, its error from the share only (sd 2 * se)
    expected = 0.3 * 6.0 + 0.7 * 4.0
    assert abs(latency.mean() - expected) <= Z * 2 * math.sqrt(0.3 * 0.7 / N)


def test_when_probability_is_the_same_draw_for_every_policy() -> None:
    steps = [step("a"), step("c", "a", when={"probability": 0.5})]
    data = scenario(steps)
    both = build(
        steps,
        {"it": {"kind": "wait"}, "other": {"kind": "wait", "timeout_s": 50.0}},
        arrivals={"kind": "poisson", "rate_per_s": 0.001},
    )
    _, one = run(data, n=500)
    _, two = run(both, n=500, policy="other")
    assert set(one[one.step == "c"].request_id) == set(two[two.step == "c"].request_id)


def test_when_step_answer_reads_an_ancestors_validity() -> None:
    # a's junk (30 %) passes its validator (catches nothing): a's answer is then invalid
    serve = serving(invalid_rate=0.3)
    steps = [
        step("a", validator={"catches": 0.0}),
        step("fix", "a", when={"step": "a", "answer": "invalid"}),
        step("ship", "a", when={"step": "a", "answer": "valid"}),
    ]
    _, calls = run(scenario(steps, serve=serve), n=2000)
    bad = set(calls[(calls.step == "a") & ~calls.valid].request_id)
    assert set(calls[calls.step == "fix"].request_id) == bad
    assert set(calls[calls.step == "ship"].request_id) == set(range(2000)) - bad
    within(len(bad) / 2000, 0.3, 2000, "share of invalid a")


# ---------------------------------------------------------------- bad input


def _problem(edit: dict[str, Any]) -> str:
    data = scenario_dict([step("a"), {**step("b", "a"), **edit}])
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    return str(caught.value)


def test_bad_workflow_keys_name_their_key_path() -> None:
    text = _problem({"loop": {"count": {"dist": "zipf", "mean": 2}}})
    assert "workflow.steps[1].loop.count.dist" in text
    text = _problem({"loop": {"count": {"dist": "constant", "value": 2}, "max": 0}})
    assert "workflow.steps[1].loop.max" in text
    text = _problem({"repeat": {"max": 0}})
    assert "workflow.steps[1].repeat.max" in text
    text = _problem({"when": {"step": "b", "answer": "valid"}})
    assert "workflow.steps[1].when.step" in text
    assert "not a step 'b' comes after" in text
    text = _problem({"map": {"count": {"dist": "constant", "value": 2}, "join": {"first": 3}}})
    assert "workflow.steps[1].map.join.first" in text
    assert "first <= 2" in text
    text = _problem({"loop": {"count": {"dist": "geometric", "mean": 0.5}}})
    assert "workflow.steps[1].loop.count.mean" in text
    text = _problem({"repeat": {"max": 2}, "loop": {"count": {"dist": "constant", "value": 2}}})
    assert "workflow.steps[1].loop" in text


def test_the_count_laws_invert_their_cdf() -> None:
    u = (np.arange(20000) + 0.5) / 20000  # a fine grid: the empirical mean is the law's
    geometric = CountSpec(dist="geometric", mean=3.0)
    assert abs(np.mean([count(geometric, x) for x in u]) - 3.0) < 0.01
    assert max(count(geometric, x, 8) for x in u) == 8
    plus = CountSpec(dist="poisson", mean=2.0)
    assert abs(np.mean([count(plus, x) for x in u]) - 3.0) < 0.01
    emp = CountSpec(dist="empirical", values=[1, 4], weights=[3.0, 1.0])
    assert abs(np.mean([count(emp, x) for x in u]) - 1.75) < 1e-3
    assert count(CountSpec(dist="constant", value=5), 0.7) == 5


# ---------------------------------------------------------------- repeat


@pytest.mark.parametrize("asks", [1, 3])
def test_repeat_until_valid_succeeds_with_one_minus_r_to_the_k(asks: int) -> None:
    # junk at rate r, caught (no validator): each ask is a fresh draw, so P(ok) = 1 - r^K
    r = 0.4
    steps = [step("a", repeat={"until": "valid", "max": asks})]
    requests, calls = run(scenario(steps, serve=serving(invalid_rate=r)))
    within(requests.ok.mean(), 1 - r**asks, N, f"P(ok) with {asks} asks")
    # ask k is the calls table's iteration k; an ask follows only an invalid one
    per = calls.groupby("request_id").iteration.agg(["max", "count"])
    assert (per["count"] == per["max"] + 1).all()
    assert per["max"].max() == asks - 1
    again = calls[calls.iteration > 0].request_id
    before = calls.set_index(["request_id", "iteration"]).outcome
    assert all(
        before[(i, k - 1)] == "invalid"
        for i, k in zip(again, calls.iteration[calls.iteration > 0], strict=True)
    )


def test_repeat_re_asks_an_invalid_answer_the_validator_let_through() -> None:
    # junk passes the validator (catches nothing) as an invalid answer: asked again up to 3
    # times; the request is valid with 1 - r^3, and never fails
    r = 0.5
    steps = [step("a", validator={"catches": 0.0}, repeat={"max": 3})]
    requests, _ = run(scenario(steps, serve=serving(invalid_rate=r)))
    assert requests.ok.all()
    within(requests.valid.mean(), 1 - r**3, N, "P(valid)")


# ---------------------------------------------------------------- loop


def _loop_scenario(law: dict[str, Any], q: float, cap: int | None = None) -> Scenario:
    loop: dict[str, Any] = {"count": law}
    if cap is not None:
        loop["max"] = cap
    return scenario([step("act", loop=loop)], serve=serving(error_rate=1 - q))


def test_a_geometric_loop_of_q_reliable_steps_succeeds_with_its_pgf() -> None:
    # N geometric from 1 with mean M (p = 1/M), each iteration ok with q (no retries):
    # P(success) = E[q^N] = q p / (1 - (1 - p) q), not q^M
    q, mean = 0.9, 3.0
    p = 1 / mean
    requests, calls = run(_loop_scenario({"dist": "geometric", "mean": mean}, q))
    expected = q * p / (1 - (1 - p) * q)
    within(requests.ok.mean(), expected, N, "P(success), geometric loop")
    assert abs(expected - q**mean) > 0.02  # the point: the mean count is not the answer
    # iterations run one after another: each starts when the one before ended
    ok = calls[calls.request_id.isin(requests.request_id[requests.ok])]
    for _, group in list(ok.groupby("request_id"))[:50]:
        one = group.sort_values("iteration")
        assert (one.iteration.to_numpy() == np.arange(len(one))).all()
        assert np.allclose(one.start_s.to_numpy()[1:], one.end_s.to_numpy()[:-1])


def test_a_poisson_plus_one_loop_succeeds_with_its_pgf() -> None:
    # N = 1 + Poisson(M): E[q^N] = q exp(M (q - 1))
    q, mean = 0.85, 2.0
    requests, _ = run(_loop_scenario({"dist": "poisson", "mean": mean}, q))
    within(requests.ok.mean(), q * math.exp(mean * (q - 1)), N, "P(success), poisson loop")


def test_a_capped_loop_and_its_count_are_the_same_for_every_policy() -> None:
    # max caps the count: with q = 1 every request runs min(N, 2) iterations exactly
    law = {"dist": "geometric", "mean": 4.0}
    requests, calls = run(_loop_scenario(law, 1.0, cap=2), n=1000)
    assert requests.ok.all()
    counts = calls.groupby("request_id").size()
    assert counts.max() == 2
    within((counts == 2).mean(), 0.75, 1000, "P(N >= 2)")  # P(N >= 2) = 1 - p
    # a policy with a cut sees the same counts (the count's stream is the request's)
    data = build(
        [step("act", loop={"count": law, "max": 2})],
        {"it": {"kind": "wait", "timeout_s": 60.0}},
        arrivals={"kind": "poisson", "rate_per_s": 0.001},
    )
    _, other = run(data, n=1000)
    assert (other.groupby("request_id").size() == counts).all()


def test_a_loop_stops_at_the_deadline_and_admission_refuses_an_unfundable_iteration() -> None:
    # 10 iterations of 2 s under a 9 s deadline: never done in time; with admission the
    # 5th iteration (starting at 8 s, 1 s left) is refused rather than sent
    law = {"dist": "constant", "value": 10}
    policy = {"kind": "wait", "admission": {"expected": 2.0}}
    data = scenario([step("act", loop={"count": law})], deadline_s=9.0, policy=policy)
    requests, calls = run(data, n=50)
    assert not requests.ok.any()
    assert (calls.groupby("request_id").size() == 4).all()
    assert (requests.refused_starts == 1).all()


# ---------------------------------------------------------------- map

MEDIAN, P99 = 2.0, 10.0  # the first token's lognormal law (generation: a constant 1 s)


def _map_scenario(join: Any, copies: int = 4) -> Scenario:
    serve = serving(ttft=1.0)
    serve["ttft_s"] = {"dist": "lognormal", "median": MEDIAN, "p99": P99}
    law = {"dist": "constant", "value": copies}
    return scenario([step("read", map={"count": law, "join": join})], serve=serve)


def _ttft_cdf(t: np.ndarray) -> np.ndarray:
    mu, sigma = lognormal_params(MEDIAN, P99)
    return lognorm(s=sigma, scale=math.exp(mu)).cdf(t)


def test_a_join_all_map_takes_the_maximum_of_its_copies() -> None:
    # n iid copies side by side: P(latency <= t) = F(t - 1)^n (1 s of generation each)
    n = 4
    requests, calls = run(_map_scenario("all", n))
    assert requests.ok.all()
    assert (calls.groupby("request_id").iteration.nunique() == n).all()
    latency = requests.latency_s.to_numpy()
    for t in (3.0, 5.0, 9.0):
        expected = float(_ttft_cdf(np.asarray([t - 1.0]))[0]) ** n
        within(float((latency <= t).mean()), expected, N, f"P(max <= {t})")


def test_a_join_first_k_map_takes_the_kth_order_statistic_and_cancels_the_rest() -> None:
    n, k = 4, 2
    requests, calls = run(_map_scenario({"first": k}, n))
    assert requests.ok.all()
    latency = requests.latency_s.to_numpy()
    for t in (2.5, 4.0, 7.0):
        f = float(_ttft_cdf(np.asarray([t - 1.0]))[0])
        expected = sum(math.comb(n, j) * f**j * (1 - f) ** (n - j) for j in range(k, n + 1))
        within(float((latency <= t).mean()), expected, N, f"P(X_({k}) <= {t})")
    # the other n - k copies are cancelled when the k-th answers (ties aside: none here)
    cancelled = calls[calls.outcome == "cancelled"]
    assert (cancelled.ended_by == "loser").all()
    assert (cancelled.groupby("request_id").size() == n - k).all()
    assert np.allclose(
        cancelled.groupby("request_id").end_s.max().to_numpy(),
        calls[calls.outcome == "ok"].groupby("request_id").end_s.max().to_numpy(),
    )


def test_a_map_fails_once_too_many_copies_failed() -> None:
    # each copy fails with 0.3; join first 2 of 3 needs at least 2 of 3 ok:
    # P = q^3 + 3 q^2 (1 - q) with q = 0.7
    q = 0.7
    law = {"dist": "constant", "value": 3}
    data = scenario(
        [step("read", map={"count": law, "join": {"first": 2}})], serve=serving(error_rate=1 - q)
    )
    requests, _ = run(data)
    within(requests.ok.mean(), q**3 + 3 * q**2 * (1 - q), N, "P(2 of 3)")


# ---------------------------------------------------------------- nothing changes without them


def test_a_step_without_keys_compiles_to_no_flow_and_draws_as_before() -> None:
    plain = compile_scenario(scenario([step("a"), step("b", "a")]))
    assert all(s.flow is None for s in plain.workflow.steps)
    # iteration 0 of a keyed step draws exactly what the plain step draws; iteration 1 its own
    serve = serving(ttft_s={"dist": "lognormal", "median": MEDIAN, "p99": P99})
    loop = {"count": {"dist": "constant", "value": 2}}
    _, before = run(scenario([step("a")], serve=serve), n=300)
    _, after = run(scenario([step("a", loop=loop)], serve=serve), n=300)
    assert (before.iteration == 0).all()
    first = after[after.iteration == 0].reset_index(drop=True)
    second = after[after.iteration == 1].reset_index(drop=True)
    assert ((first.end_s - first.start_s) == (before.end_s - before.start_s)).all()
    assert not np.allclose(second.end_s - second.start_s, before.end_s - before.start_s)


# ---------------------------------------------------------------- loop on a group


def test_a_group_loops_its_steps_in_order_and_succeeds_with_the_pgf_of_q_squared() -> None:
    # plan -> act loop together N times (geometric, mean 2), then answer once; each call ok
    # with q: an iteration succeeds with q^2, the request with q E[(q^2)^N]
    q, mean = 0.9, 2.0
    p = 1 / mean
    loop = {"count": {"dist": "geometric", "mean": mean}}
    steps = [step("plan"), step("act", "plan"), step("answer", "act")]
    data = scenario(
        steps,
        serve=serving(error_rate=1 - q),
        workflow={"steps": steps, "groups": {"tools": {"steps": ["plan", "act"], "loop": loop}}},
    )
    requests, calls = run(data)
    q2 = q * q
    within(requests.ok.mean(), q * q2 * p / (1 - (1 - p) * q2), N, "P(success), group loop")
    # in order: iteration k's plan, then its act, then k+1's plan; answer once at the end
    good = calls[calls.request_id.isin(requests.request_id[requests.ok])]
    for _, group in list(good.groupby("request_id"))[:50]:
        one = group.sort_values("start_s")
        n = len(one) // 2
        names = list(one.step)
        assert names == ["plan", "act"] * n + ["answer"]
        assert list(one.iteration) == [k for k in range(n) for _ in (0, 1)] + [0]


def test_a_group_must_be_a_chain_nothing_outside_waits_on_its_inside() -> None:
    loop = {"count": {"dist": "constant", "value": 2}}
    steps = [step("plan"), step("act", "plan"), step("peek", "plan")]
    data = scenario_dict(steps)
    data["workflow"]["groups"] = {"tools": {"steps": ["plan", "act"], "loop": loop}}
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    assert "workflow.groups.tools.steps" in str(caught.value)
    assert "peek" in str(caught.value)
    data["workflow"]["steps"] = [step("plan"), step("act")]
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    assert "workflow.groups.tools.steps[1]" in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value", "feature"),
    [
        ("when", {"probability": 0.5}, "workflow.when"),
        ("repeat", {"max": 2}, "workflow.repeat"),
        ("loop", {"count": {"dist": "constant", "value": 2}}, "workflow.loop"),
        ("map", {"count": {"dist": "constant", "value": 2}}, "workflow.map"),
    ],
)
def test_the_keys_are_features_the_vectorized_engine_lacks(
    key: str, value: dict[str, Any], feature: str
) -> None:
    plan = compile_scenario(scenario([step("a"), step("b", "a", **{key: value})]))
    ok, why = qualifies(plan.policies["it"])
    assert not ok
    assert f"workflow.steps[1].{key}" in why


def test_a_first_k_map_waits_for_valid_answers_and_falls_back_on_let_through_ones() -> None:
    # 2 copies, junk at r let through by the validator: first 1 waits for a valid answer,
    # taking an invalid one only when both are: P(valid) = 1 - r^2, and never a failure
    r = 0.5
    law = {"dist": "constant", "value": 2}
    steps = [step("read", validator={"catches": 0.0}, map={"count": law, "join": {"first": 1}})]
    requests, _ = run(scenario(steps, serve=serving(invalid_rate=r)))
    assert requests.ok.all()
    within(requests.valid.mean(), 1 - r**2, N, "P(valid), first 1 of 2")


def test_counts_and_branches_are_the_same_in_a_windowed_bank() -> None:
    # a big run's windowed bank (blocks of 64 requests) draws what the plain bank draws
    steps = [
        step("a", loop={"count": {"dist": "geometric", "mean": 2.0}}),
        step("b", "a", when={"probability": 0.5}),
        step("c", "b", map={"count": {"dist": "poisson", "mean": 1.0}, "join": "all"}),
    ]
    data = scenario(steps, serve=serving(ttft_s={"dist": "lognormal", "median": 1, "p99": 5}))
    plan = resolved_plan(data, 0)
    frames = []
    for bank_of in (lambda s: CallDrawBank(s, 500), lambda s: WindowedDrawBank(s, 500, rows=64)):
        streams = Streams(0, "main")
        times = arrival_times(data.arrivals, 500, streams.generator("arrivals"))
        bank = bank_of(streams.child("calls"))
        records = Simulation(plan, single_policy(plan.runtime("it")), bank, streams).run(times)
        frames.append(calls_frame(records))
    pd.testing.assert_frame_equal(frames[0], frames[1])
    assert frames[0].iteration.max() > 0
