"""What a user reads from the commands: `tailsim check` counts one step in the singular, and a bad
sweep key names the file, not the scenario (in the CLI and the Python API alike)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import sim
from sim.cli import main
from sim.model.errors import ScenarioError
from tests.helpers import ScenarioFile


def test_check_counts_one_step_in_the_singular(scenario_file: ScenarioFile) -> None:
    path = scenario_file(
        {
            "workflow.steps": [{"id": "s1", "model": "big", "input_tokens": 100}],
            "sweep": ...,
        },
        name="one-step.yaml",
    )
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "ok (1 step, policies:" in result.stdout
    assert "1 steps" not in result.stdout


def test_a_bad_sweep_key_names_the_file_not_the_scenario(scenario_file: ScenarioFile) -> None:
    grid = {"providers.direct.concurency": [24, 48]}
    path = scenario_file({"sweep.grid": grid}, name="my-sweep.yaml")
    result = CliRunner().invoke(main, ["sweep", str(path), "-n", "20", "-q", "--no-plot"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{path}:" in result.stderr
    assert "sweep.grid.providers.direct.concurency" in result.stderr
    assert "ten-step:" not in result.stderr
    # the Python API names the file too
    with pytest.raises(ScenarioError) as info:
        sim.sweep(path, requests=20)
    assert info.value.source == str(path)
