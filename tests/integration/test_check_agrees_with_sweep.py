"""`tailsim check` checks everything `tailsim sweep` checks before any work: on every scenario
in tests/data (not its LiteLLM configs) and scenarios/, the bad ones in tests/data/bad included,
both exit 0 or both exit 2 naming the same key path. A good scenario's sweep is stopped just
before its first point runs (where the work begins), so the test runs no simulation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.api import sweeps
from tests.helpers import REPO_ROOT, cli

SCENARIOS = sorted(
    [
        *(p for p in (REPO_ROOT / "tests" / "data").rglob("*.yaml") if "litellm" not in p.parts),
        *(REPO_ROOT / "scenarios").glob("*.yaml"),
    ]
)  # tests/data/litellm holds LiteLLM configs, not scenarios
BAD = REPO_ROOT / "tests" / "data" / "bad"


class _WorkBeginsError(Exception):
    """Raised where the sweep would start running points: everything before it passed."""


def _key_paths(stderr: str) -> list[str]:
    """The key paths an error names (`  sweep.grid.x: ...` or `file: 1 problem:` lines)."""
    return re.findall(r"^\s+([\w.\[\]-]+|\(top level\)):", stderr, re.M) or [stderr.strip()]


def test_the_bad_scenarios_are_there() -> None:
    assert len(list(BAD.glob("*.yaml"))) >= 5


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_check_and_sweep_agree(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*_args: object, **_options: object) -> None:
        raise _WorkBeginsError

    monkeypatch.setattr(sweeps, "_store_points", stop)
    checked = cli("check", path)
    swept = cli("sweep", path, "--out", tmp_path / "sweep", "-n", "1", "--no-plot")
    has_sweep = "sweep:" in path.read_text(encoding="utf-8")
    if checked.exit_code == 0 and not has_sweep:  # nothing to sweep: only that is said
        assert swept.exit_code == 2
        assert "sweep: missing" in swept.stderr
        return
    if checked.exit_code == 0:
        assert isinstance(swept.exception, _WorkBeginsError), (swept.stdout, swept.stderr)
        return
    assert checked.exit_code == swept.exit_code == 2, (checked.stderr, swept.stderr)
    assert _key_paths(checked.stderr) == _key_paths(swept.stderr)
    assert path.is_relative_to(BAD), f"{path} is bad but not under tests/data/bad"
    assert "Traceback" not in checked.stderr + swept.stderr


def test_a_swept_key_that_does_not_exist_fails_check_at_its_key_path() -> None:
    checked = cli("check", BAD / "sweep-unknown-key.yaml")
    assert checked.exit_code == 2
    assert "sweep.grid.providers.direct.tmp" in checked.stderr
    assert "did you mean 'tpm'?" in checked.stderr
