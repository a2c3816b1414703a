"""`tailsim check` and `tailsim run` refuse a step's `max_tokens` below its `output_tokens` with
exit 2 at the key path, before any simulation (issue 25, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import assert_exit, cli, scenario_dict, step


@pytest.fixture
def capped_below(tmp_path: Path) -> Path:
    """A scenario file whose one step has output_tokens 60 and max_tokens 10."""
    file = tmp_path / "capped.yaml"
    data = scenario_dict([step("s1", output_tokens=60, max_tokens=10)])
    file.write_text(yaml.safe_dump(data), encoding="utf-8")
    return file


@pytest.mark.parametrize("command", [["check"], ["run", "-p", "wait", "-q"]])
def test_max_tokens_below_output_tokens_exits_2_at_the_key_path(
    capped_below: Path, tmp_path: Path, command: list[str]
) -> None:
    out = tmp_path / "out"
    args = [*command, capped_below] + (["--out", out] if command[0] == "run" else [])
    result = cli(*args)
    assert_exit(result, 2)
    assert str(capped_below) in result.stderr
    assert "workflow.steps[0].max_tokens" in result.stderr
    assert "below output_tokens (60)" in result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert not out.exists()
