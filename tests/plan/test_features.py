"""The compiler's feature table: every field of the format classified, the engine choice the
one the old field whitelist made (held on the bundled scenarios)."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import pytest
from pydantic import BaseModel

import sim.model.config as config
from sim.model.scenario import load_scenario
from sim.plan import compile_scenario
from sim.plan.features import CLASS_FEATURES, FIELD_FEATURES, NEUTRAL, WALKED_KINDS

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml")) + sorted(
    (REPO / "tests" / "data").glob("*.yaml")
)


def _reachable() -> set[type[BaseModel]]:
    """Format classes whose fields the compiler walks: reached from `Scenario` (policies aside)
    through NEUTRAL fields, and the policy kinds it walks field by field."""
    seen: set[type[BaseModel]] = set()
    todo: list[type[BaseModel]] = [config.Scenario, *WALKED_KINDS]
    classes = [c for c in vars(config).values() if inspect.isclass(c) and issubclass(c, BaseModel)]
    while todo:
        cls = todo.pop()
        if cls in seen or cls in CLASS_FEATURES:
            continue
        seen.add(cls)
        for name, info in cls.model_fields.items():
            if FIELD_FEATURES.get((cls, name)) != NEUTRAL:
                continue
            text = repr(info.annotation)
            todo.extend(c for c in classes if c.__name__ in text and c not in seen)
    return seen


def test_every_field_the_compiler_walks_is_classified() -> None:
    """A new format key must name the feature it is (or say it is neutral), else it would reach
    the vectorized engine unseen: `FIELD_FEATURES` covers every field of every walked class."""
    missing = [
        f"{cls.__name__}.{name}"
        for cls in _reachable()
        for name in cls.model_fields
        if (cls, name) not in FIELD_FEATURES
        and not (issubclass(cls, config.PolicyBase) and (config.PolicyBase, name) in FIELD_FEATURES)
        and not (cls is config.Scenario and name in ("policies", "sweep", "slo"))
    ]
    assert not missing, f"classify these fields in sim/plan/features.py: {missing}"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_bundled_scenario_compiles_and_pickles(path: Path) -> None:
    """A plan is what crosses to worker processes: it pickles and comes back equal."""
    plan = compile_scenario(load_scenario(path))
    back = pickle.loads(pickle.dumps(plan))
    assert back.policies == plan.policies
    assert back.latencies == plan.latencies
    assert list(back.workflow.steps) == list(plan.workflow.steps)


def test_a_policy_feature_names_its_key_path() -> None:
    scenario = load_scenario(REPO / "scenarios" / "sdk-stacking.yaml")
    plan = compile_scenario(scenario)
    reasons = {name: [f.reason for f in p.features] for name, p in plan.policies.items()}
    assert all(any("sdk" in r for r in rs) for rs in reasons.values()), reasons
