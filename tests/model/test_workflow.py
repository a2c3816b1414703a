"""sim.model.workflow: the compiled DAG (roots, unlocks, downstream) and how the engine walks it."""

from __future__ import annotations

from sim.plan import compile_scenario
from tests.helpers import ScriptedBank, build, ok, serving, simulate, step, timeline

DIAMOND = [step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")]


def test_diamond_structure() -> None:
    wf = compile_scenario(build(DIAMOND)).workflow
    ids = [s.id for s in wf.steps]
    assert ids == ["a", "b", "c", "d"]
    assert [s.index for s in wf.steps] == [0, 1, 2, 3]
    assert [s.id for s in wf.roots] == ["a"]
    assert [s.unlocks for s in wf.steps] == [(1, 2), (3,), (3,), ()]
    assert [s.depends_on for s in wf.steps] == [(), (0,), (0,), (1, 2)]
    assert wf.downstream(0) == {1, 2, 3}
    assert wf.downstream(1) == {3}
    assert wf.downstream(2) == {3}
    assert wf.downstream(3) == set()


def test_several_roots_and_a_long_chain() -> None:
    steps = [step("x"), step("y"), step("z", "x"), step("w", "z"), step("v", "w", "y")]
    wf = compile_scenario(build(steps)).workflow
    assert [s.id for s in wf.roots] == ["x", "y"]
    assert wf.downstream(0) == {2, 3, 4}  # x -> z -> w -> v
    assert wf.downstream(1) == {4}


def test_step_fields_compiled_from_spec() -> None:
    providers = {
        "p1": {"serves": {"big": serving()}},
        "p2": {"serves": {"big": serving(), "small": serving()}},
    }
    steps = [
        step("a", input_tokens=7, output_tokens=9),
        step("b", "a", model="small", required=False),
        step("c", "a", provider="p2"),
    ]
    wf = compile_scenario(build(steps, providers=providers)).workflow
    a, b, c = wf.steps
    assert (a.model, a.provider, a.input_tokens, a.output_tokens, a.required) == (
        "big",
        "p1",
        7,
        9,
        True,
    )
    assert (b.model, b.provider, b.required) == ("small", "p2", False)  # first serving `small`
    assert c.provider == "p2"  # explicit provider wins over file order


def test_diamond_runs_branches_in_parallel_and_joins_after_both() -> None:
    scenario = build(DIAMOND)
    bank = ScriptedBank(
        {
            ("a", 0): ok(ttft=1.0, generation=1.0),  # 0 -> 2
            ("b", 0): ok(ttft=1.0, generation=2.0),  # 2 -> 5
            ("c", 0): ok(ttft=3.0, generation=4.0),  # 2 -> 9
            ("d", 0): ok(ttft=0.5, generation=0.5),  # 9 -> 10
        }
    )
    result = simulate(scenario, "wait", bank, arrivals=[5.0])
    assert timeline(result.calls) == [
        ("a", 0, "p1", "big", 5.0, 7.0, "ok"),
        ("b", 0, "p1", "big", 7.0, 10.0, "ok"),
        ("c", 0, "p1", "big", 7.0, 14.0, "ok"),
        ("d", 0, "p1", "big", 14.0, 15.0, "ok"),
    ]
    request = result.requests.iloc[0]
    assert bool(request.ok)
    assert request.latency_s == 10.0


def test_join_waits_for_the_slower_branch_either_way() -> None:
    scenario = build(DIAMOND)
    bank = ScriptedBank(
        {("b", 0): ok(ttft=5.0, generation=1.0), ("c", 0): ok(ttft=1.0, generation=1.0)}
    )  # a: 0 -> 2, b: 2 -> 8, c: 2 -> 4, d: 8 -> 10
    calls = simulate(scenario, "wait", bank).calls
    starts = dict(zip(calls["step"], calls["start_s"], strict=True))
    assert starts == {"a": 0.0, "b": 2.0, "c": 2.0, "d": 8.0}
