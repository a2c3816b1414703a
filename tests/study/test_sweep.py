"""sim.study.sweep: grid expansion (`zip` included), replication seeds and bad grid keys. A sweep
point against a plain run, and the `tailsim sweep` face, are in tests/integration/test_sweep.py."""

from __future__ import annotations

from typing import Any

import pytest

import sim
from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario
from sim.study.sweep import expand, label, replication_seed


def swept(contract_data: dict[str, Any], grid: dict[str, list[Any]], reps: int) -> sim.Scenario:
    """The contract with its sweep replaced."""
    data = {**contract_data, "sweep": {"grid": grid, "replications": reps}}
    return scenario_from_dict(data, source="swept.yaml")


def test_expand_is_the_grid_product_times_replications(contract_data: dict[str, Any]) -> None:
    scenario = swept(
        contract_data, {"arrivals.rate_per_s": [0.2, 0.4], "deadline_s": [60, 90, 120]}, 2
    )
    points = expand(compile_scenario(scenario))
    assert len(points) == 2 * 3 * 2
    assert {(p.overrides["arrivals.rate_per_s"], p.overrides["deadline_s"]) for p in points} == {
        (r, d) for r in (0.2, 0.4) for d in (60, 90, 120)
    }
    # replication r has one seed at every grid point; replication 0 is the scenario's own seed
    seeds = {(p.replication, p.seed) for p in points}
    assert seeds == {(0, scenario.seed), (1, replication_seed(scenario.seed, 1))}
    assert replication_seed(scenario.seed, 1) != scenario.seed
    assert replication_seed(scenario.seed, 2) != replication_seed(scenario.seed, 1)


@pytest.mark.parametrize(
    ("grid", "needle"),
    [
        ({"arrivals.rate_per_sec": [1.0]}, "unknown key"),
        ({"arrivals.rate_per_s": [1.0, -2.0]}, "greater than 0"),
        ({"nothere.key": [1]}, "no key 'nothere'"),
    ],
)
def test_bad_grid_keys_and_values_are_named(
    contract_data: dict[str, Any], grid: dict[str, list[Any]], needle: str
) -> None:
    scenario = swept(contract_data, grid, 1)
    with pytest.raises(ScenarioError) as info:
        expand(compile_scenario(scenario))
    key = next(iter(grid))
    paths = [path for path, _ in info.value.problems]
    assert paths == [f"sweep.grid.{key}"]
    assert needle in info.value.render()


def test_zip_pairs_values_and_crosses_the_grid(contract_data: dict[str, Any]) -> None:
    data = {
        **contract_data,
        "sweep": {
            "grid": {"deadline_s": [60, 90]},
            "zip": {
                "arrivals.rate_per_s": [0.2, 0.4, 0.8],
                "providers.direct.concurrency": [8, 16, 32],
            },
            "replications": 2,
        },
    }
    points = expand(compile_scenario(scenario_from_dict(data, source="z.yaml")))
    assert len(points) == 2 * 3 * 2
    pairs = {
        (p.overrides["arrivals.rate_per_s"], p.overrides["providers.direct.concurrency"])
        for p in points
    }
    assert pairs == {(0.2, 8), (0.4, 16), (0.8, 32)}
    assert [p.index for p in points] == list(range(len(points)))
    assert len({p.key() for p in points}) == len(points)
    # the seed is the replication's, whatever the grid coordinates
    assert {p.seed for p in points if p.replication == 1} == {replication_seed(data["seed"], 1)}


def test_zip_lists_of_unequal_length_are_refused(contract_data: dict[str, Any]) -> None:
    data = {**contract_data, "sweep": {"zip": {"deadline_s": [60, 90], "seed": [1]}}}
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data, source="z.yaml")
    assert "sweep.zip.seed" in info.value.render()
    assert "equally long" in info.value.render()


def test_a_swept_mapping_is_a_hashable_cell() -> None:
    """A swept count law (a mapping, as scenarios/agent-loop.yaml sweeps) tags its points with
    the law's compact JSON text, so the points group; a scalar stays as it is. The whole sweep:
    tests/integration/test_sweep.py."""
    assert label({"dist": "constant", "value": 3}) == '{"dist": "constant", "value": 3}'
    assert label([1, 2]) == "[1, 2]"
    assert label(0.5) == 0.5
