"""Every policy kind takes the deadline keys (`propagate_deadline`, `admission`) in a whole run."""

from __future__ import annotations

from typing import Any

import sim
from sim.model.config import Scenario
from sim.plan import compile_scenario
from tests.helpers import build, const, step

# ----------------------------------------------------------------------------- every policy kind


def _orphaning(policies: dict[str, Any]) -> Scenario:
    """One 11 s step (1 s to first token, 1000 tokens at 100/s) against a 5 s deadline."""
    law = {"ttft_s": const(1.0), "tokens_per_s": const(100.0)}
    return build(
        [step("s1", output_tokens=1000)],
        policies,
        deadline_s=5.0,
        providers={"p1": {"serves": {model: dict(law) for model in ("big", "small")}}},
    )


def test_every_policy_kind_takes_the_deadline_keys() -> None:
    """adaptive, draft and per_step carry propagate_deadline and admission like the others
    (one PolicyBase), and the run follows them: without propagation every call outlives its
    request's deadline as orphan work."""
    off = {"propagate_deadline": False}
    s = _orphaning(
        {
            "wait": {"kind": "wait"},
            "adaptive": {"kind": "adaptive", "cutoff": 100, "attempts": 1, **off},
            "draft": {"kind": "draft", "model": "small", "admission": {"expected": 0.5}, **off},
            "mixed": {"kind": "per_step", "steps": {"s1": "wait"}, **off},
        }
    )
    for name in ("adaptive", "draft", "mixed"):
        assert s.policies[name].propagate_deadline is False, name
        assert compile_scenario(s).policies[name].rules.propagate is False, name
    assert compile_scenario(s).policies["draft"].rules.expected == {"s1": 0.5}
    summary = sim.run(s, requests=3, policies=["wait", "adaptive", "mixed"]).summary
    orphans = summary.set_index("policy")["orphan_calls"]
    assert orphans["wait"] == 0
    assert orphans["adaptive"] == 3
    assert orphans["mixed"] == 3
