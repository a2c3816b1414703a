"""`tailsim tune` names its moves for what they are (issue 25, item 15): it wrote `fall_up: mid`
on quality-floor, a "fall up" from `big` (quality 1.0) to a weaker model (0.9). A fall-up is now
only to a model of higher quality than the step's, a fall-down only to a faster one."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.model.scenario import load_scenario, scenario_from_dict
from sim.plan import compile_scenario
from sim.study.tune import Evaluator, Knobs, _Space, median_call_s, tune

ROOT = Path(__file__).resolve().parents[2]
QUALITY_FLOOR = ROOT / "scenarios" / "quality-floor.yaml"


def _weak_first() -> dict:
    """quality-floor with its first step on `small` (weak, fast): big and mid are stronger and
    slower, so they are fall-ups and never fall-downs for that step."""
    data = yaml.safe_load(QUALITY_FLOOR.read_text(encoding="utf-8"))
    data["workflow"]["steps"][0]["model"] = "small"
    return data


def test_fall_ups_are_stronger_and_fall_downs_faster() -> None:
    plan = compile_scenario(load_scenario(QUALITY_FLOOR))
    space = _Space(plan, plan.workflow.steps)
    assert space.fall_up_for == [[None]] * 4  # big is the strongest model: nothing to fall up to
    assert space.fall_up_options == [None]
    assert space.fall_down_for == [[None, "mid", "small"]] * 4  # both faster than big

    weak = compile_scenario(scenario_from_dict(_weak_first(), source="weak-first"))
    steps = weak.workflow.steps
    space = _Space(weak, steps)
    assert space.fall_up_for[0] == [None, "big", "mid"]
    assert space.fall_down_for[0] == [None]  # big and mid are slower than small
    assert median_call_s(weak, "big", steps[0]) > median_call_s(weak, "small", steps[0])


def test_a_weaker_fall_up_is_never_written() -> None:
    scenario = load_scenario(QUALITY_FLOOR)
    ev = Evaluator(compile_scenario(scenario), seed=3, requests=20, max_cost=None, min_quality=0.0)
    knobs = Knobs(cutoff_pct=(95.0,) * 4, fall_down=("mid",) * 4, ttft_pct=None,
                  hedge_pct=None, fall_up="mid", all_providers=False, attempts=3)  # fmt: skip
    for spec in ev.step_specs(knobs).values():
        assert "fall_up" not in spec  # mid (0.9) is weaker than big (1.0)
        assert spec["fall_down"] == "mid"


def test_tune_writes_only_honest_moves() -> None:
    weak = compile_scenario(scenario_from_dict(_weak_first(), source="weak-first"))
    quality = weak.model_quality
    result = tune(weak, requests=60, seed=2)
    steps = {s.id: s for s in weak.workflow.steps}
    for step_id, spec in result.step_specs.items():
        model = steps[step_id].model
        if "fall_up" in spec:
            assert quality[spec["fall_up"]] > quality[model], (step_id, spec)
        if "fall_down" in spec:
            own = median_call_s(weak, model, steps[step_id])
            assert median_call_s(weak, spec["fall_down"], steps[step_id]) < own, (step_id, spec)
