"""Results folders (sim.output.results): naming and refusing foreign folders. Writing a real
run's results (every file, all or nothing, the resolved scenario, run.json) is in
tests/integration/test_results.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import sim
import sim.output.results
from sim.model.errors import ScenarioError
from sim.output.results import (
    check_writable,
    claim_folder,
    default_folder,
)

STAMP = re.compile(r"^\d{8}T\d{6}Z$")


class _FrozenClock(datetime):
    """A datetime whose now() is fixed, so that default_folder cannot tick to a new second."""

    @classmethod
    def now(cls, tz: Any = None) -> _FrozenClock:  # type: ignore[override]
        return cls(2025, 1, 2, 3, 4, 5, tzinfo=tz or UTC)


# ---------------------------------------------------------------- folder naming


def test_default_folder_is_results_name_timestamp() -> None:
    folder = default_folder("ten-step")
    assert folder.parts[:2] == ("results", "ten-step")
    assert STAMP.match(folder.name), folder


def test_default_folder_never_reuses_an_existing_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim.output.results, "datetime", _FrozenClock)
    names = []
    for _ in range(3):
        folder = claim_folder(default_folder("demo", root=tmp_path))
        assert folder.is_dir()
        assert list(folder.iterdir()) == []
        names.append(folder.name)
    assert names == ["20250102T030405Z", "20250102T030405Z-2", "20250102T030405Z-3"]


# ---------------------------------------------------------------- refusing foreign folders


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda p: None, id="absent"),
        pytest.param(lambda p: p.mkdir(), id="empty-folder"),
    ],
)
def test_check_writable_accepts(tmp_path: Path, make: Any) -> None:
    target = tmp_path / "out"
    make(target)
    check_writable(target)


def test_check_writable_replaces_earlier_results_only_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "run.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ScenarioError, match="--force"):
        check_writable(target)
    check_writable(target, overwrite=True)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda p: (p.mkdir(), (p / "notes.txt").write_text("mine")), id="files"),
        pytest.param(lambda p: (p.mkdir(), (p / "sub").mkdir()), id="subfolder"),
        pytest.param(lambda p: p.write_text("a file"), id="a-file"),
    ],
)
def test_check_writable_refuses_what_is_not_a_results_folder(tmp_path: Path, make: Any) -> None:
    target = tmp_path / "out"
    make(target)
    with pytest.raises(ScenarioError) as info:
        check_writable(target)
    assert str(info.value).startswith(f"{target}: ")
    assert "--out" in str(info.value)
