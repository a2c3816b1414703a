"""The sweep store (sim.output.store): a stored part is named by everything that makes its
numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim.model.scenario import load_scenario, with_overrides
from sim.output.store import fingerprint
from sim.plan import compile_scenario
from sim.study.sweep import expand


@pytest.fixture
def tiny(scenario_file: Any) -> Path:
    """The contract cut to a quick sweep: 2 slot counts x 2 replications, a small pilot."""
    return scenario_file(
        {
            "requests": 40,
            "pilot": {"requests": 40},
            "sweep": {"grid": {"providers.direct.concurrency": [24, 64]}, "replications": 2},
        }
    )


def test_a_part_is_named_by_everything_that_makes_its_numbers(
    tiny: Path, tmp_path: Path, write_yaml: Any, contract_data: dict[str, Any]
) -> None:
    spec = load_scenario(tiny)
    base = fingerprint(compile_scenario(spec), None, ["wait", "cut"])
    # the same inputs spelled differently are the same sweep
    assert fingerprint(compile_scenario(spec), spec.requests, ["wait", "cut"]) == base
    assert fingerprint(compile_scenario(spec), None, ["wait", "cut"], engine=None) == base
    # anything that changes a point's numbers changes every part's name
    trace = tmp_path / "arrivals.csv"
    trace.write_text("TIMESTAMP\n0\n1.5\n2\n", encoding="utf-8")
    traced = write_yaml(
        {**contract_data, "arrivals": {"kind": "trace", "file": "arrivals.csv"}}, "traced.yaml"
    )
    traced_before = fingerprint(compile_scenario(load_scenario(traced)), None, None)
    trace.write_text("TIMESTAMP\n0\n0.5\n2\n", encoding="utf-8")  # the trace's content only
    others = {
        "requests": fingerprint(compile_scenario(spec), 41, ["wait", "cut"]),
        "policies": fingerprint(compile_scenario(spec), None, ["wait"]),
        "policy order": fingerprint(compile_scenario(spec), None, ["cut", "wait"]),
        "engine": fingerprint(compile_scenario(spec), None, ["wait", "cut"], engine="des"),
        "seed": fingerprint(
            compile_scenario(with_overrides(spec, {"seed": 8})), None, ["wait", "cut"]
        ),
        "content": fingerprint(
            compile_scenario(
                with_overrides(spec, {"providers.direct.serves.big.error_rate": 0.02})
            ),
            None,
            ["wait", "cut"],
        ),
        "replications": fingerprint(
            compile_scenario(with_overrides(spec, {"sweep.replications": 3})), None, ["wait", "cut"]
        ),
        "trace file bytes": traced_before,
    }
    assert fingerprint(compile_scenario(load_scenario(traced)), None, None) != traced_before
    assert base not in others.values()
    assert len(set(others.values())) == len(others)
    point = expand(compile_scenario(spec))[0]
    names = {what: point.key(print_) for what, print_ in others.items()}
    assert point.key(base) not in names.values()
    assert len(set(names.values())) == len(names)
