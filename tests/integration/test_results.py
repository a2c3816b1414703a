"""Writing a real run's results (sim.output.results on a `sim.run` result): every file and no
staging left, an earlier results folder replaced, a foreign folder refused untouched, no partial
folder after a failed write, the resolved scenario reloading with its thresholds, run.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import sim
import sim.output.results
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario, scenario_from_dict
from sim.output.results import (
    FIGURE,
    RESULT_FILES,
    resolved_yaml,
    run_metadata,
    write_results,
)
from sim.study.result import RunResult


@pytest.fixture(scope="module")
def small_run(contract_path: Path) -> RunResult:
    """Every policy of the contract on 40 requests (resolving its 'pNN' thresholds)."""
    return sim.run(load_scenario(contract_path), requests=40, seed=5)


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` (relative path -> bytes)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


# ---------------------------------------------------------------- writing


def test_write_results_writes_every_file_and_no_staging(
    small_run: RunResult, tmp_path: Path
) -> None:
    target = tmp_path / "results" / "ten-step" / "run1"
    assert write_results(small_run, target, "contract.yaml", "9.9") == target
    assert sorted(p.name for p in target.iterdir()) == sorted([*RESULT_FILES, "figures"])
    assert [p.name for p in target.parent.iterdir()] == ["run1"]
    figure = (target / FIGURE).read_bytes()
    assert figure.startswith(b"\x89PNG")
    assert len(figure) > 20_000
    summary = pd.read_csv(target / "summary.csv")
    assert list(summary["policy"]) == list(small_run.summary["policy"])
    assert len(pd.read_parquet(target / "requests.parquet")) == len(small_run.requests)
    assert len(pd.read_parquet(target / "calls.parquet")) == len(small_run.calls)
    meta = json.loads((target / "run.json").read_text(encoding="utf-8"))
    assert meta["source"] == "contract.yaml"
    assert meta["tailsim_version"] == "9.9"
    assert meta["seed"] == 5
    assert meta["requests"] == 40
    assert meta["policies"] == ["wait", "cut", "race", "hedge", "downshift"]


def test_write_results_replaces_an_earlier_results_folder(
    small_run: RunResult, tmp_path: Path
) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "run.json").write_text("{}", encoding="utf-8")
    (target / "old.png").write_bytes(b"old")
    write_results(small_run, target, "s.yaml", "0", overwrite=True)
    assert sorted(p.name for p in target.iterdir()) == sorted([*RESULT_FILES, "figures"])


def test_write_results_refuses_a_foreign_folder_untouched(
    small_run: RunResult, tmp_path: Path
) -> None:
    target = tmp_path / "thesis"
    target.mkdir()
    (target / "chapter1.tex").write_text("precious", encoding="utf-8")
    before = _snapshot(tmp_path)
    with pytest.raises(ScenarioError):
        write_results(small_run, target, "s.yaml", "0")
    assert _snapshot(tmp_path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["thesis"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
@pytest.mark.parametrize("earlier", [False, True], ids=["fresh", "over-earlier-results"])
def test_failed_write_leaves_no_partial_folder(
    small_run: RunResult,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    earlier: bool,
) -> None:
    """A write that dies half-way leaves neither a target nor a staging folder behind."""
    target = tmp_path / "results" / "ten-step" / "run1"
    if earlier:
        target.mkdir(parents=True)
        (target / "run.json").write_text('{"earlier": true}', encoding="utf-8")
    before = _snapshot(tmp_path)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(pd.DataFrame, "to_parquet", broken)
    # an OSError becomes a clean ScenarioError (exit 2 in the CLI); other errors pass through
    expected = ScenarioError if isinstance(error, OSError) else type(error)
    with pytest.raises(expected):
        write_results(small_run, target, "s.yaml", "0", overwrite=earlier)
    leftovers = [p.name for p in target.parent.iterdir() if p.name != "run1"]
    assert leftovers == [], f"staging left behind: {leftovers}"
    assert target.exists() == earlier
    assert _snapshot(tmp_path) == before


# ---------------------------------------------------------------- the resolved scenario


def test_resolved_yaml_holds_the_thresholds_and_reloads(small_run: RunResult) -> None:
    text = resolved_yaml(small_run)
    data = yaml.safe_load(text)
    thresholds = run_metadata(small_run, "s.yaml", "0")["resolved_thresholds_s"]
    for policy in ("cut", "hedge", "downshift"):  # also noted in the YAML, as comments
        assert f"#   {policy}: s1=" in text
    steps = [s.id for s in small_run.scenario.workflow.steps]
    # every policy with a 'pNN' threshold has seconds for every step; the others have none
    assert set(thresholds) == {"cut", "hedge", "downshift"}
    for policy, per_step in thresholds.items():
        assert list(per_step) == steps, policy
        assert all(isinstance(v, float) and 0 < v < 1000 for v in per_step.values()), per_step
        assert per_step == pytest.approx(small_run.thresholds[policy], abs=1e-6)
    reloaded = scenario_from_dict(data, source="resolved")
    assert reloaded.seed == small_run.seed == 5
    assert reloaded.requests == small_run.requests_count == 40
    expected = small_run.scenario.model_copy(update={"seed": 5, "requests": 40})
    assert reloaded.model_dump() == expected.model_dump()


def test_run_metadata_is_json(small_run: RunResult) -> None:
    meta = run_metadata(small_run, "s.yaml", sim.__version__)
    assert json.loads(json.dumps(meta)) == meta
    assert meta["scenario"] == "ten-step"
    assert set(meta["wall_s"]) >= {"pilot", *small_run.scenario.policies}
