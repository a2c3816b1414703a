"""`tailsim sweep --engine` (issue 16): the same choices and meaning as `tailsim run --engine`,
reaching every point, and part of what identifies a stored sweep."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner, Result

import sim
import sim.study.policy_run
from sim.cli import main
from sim.model.errors import ScenarioError
from sim.output.store import default_sweep_folder
from sim.plan import compile_scenario
from sim.study.sweep import with_engine

#: Two points (deadlines), one replication, two policies, few requests: fast on any engine.
SMALL = ["-n", "40", "-p", "wait,cut", "--no-plot", "-q"]


@pytest.fixture
def small_sweep(scenario_file: Callable[..., Path]) -> Path:
    """The contract with a two-point sweep."""
    return scenario_file({"sweep": {"grid": {"deadline_s": [60, 120]}, "replications": 1}})


def _sweep(path: Path, out: Path, *extra: str) -> Result:
    return CliRunner().invoke(main, ["sweep", str(path), *SMALL, "--out", str(out), *extra])


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Record (engine asked for, "" if it ran vectorized else why not) of every policy run of
    every point (the summaries-only path a sweep point takes: `vectorized_in_chunks`)."""
    asked: list[tuple[str, str]] = []
    real = sim.study.policy_run.vectorized_in_chunks

    def spy(scenario: Any, policy: Any, streams: Any, arrivals: Any, engine: str, *rest: Any,
            **kw: Any) -> str:  # fmt: skip
        why = real(scenario, policy, streams, arrivals, engine, *rest, **kw)
        asked.append((engine, why))
        return why

    monkeypatch.setattr(sim.study.policy_run, "vectorized_in_chunks", spy)
    return asked


def test_the_engine_reaches_every_point_and_keeps_the_numbers(
    tmp_path: Path, small_sweep: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--engine des runs every point's every policy on the event engine; without it (the
    contract's `auto`) they run vectorized; the engines agree to float rounding, so the pooled
    tables match to 1e-9 relative."""
    asked = _spy(monkeypatch)
    got = _sweep(small_sweep, tmp_path / "des", "--engine", "des")
    assert got.exit_code == 0, got.output
    assert asked == [("des", "engine: des")] * 4  # 2 points x 2 policies
    assert "engine: des" in (tmp_path / "des" / "scenario.resolved.yaml").read_text()
    asked.clear()
    got = _sweep(small_sweep, tmp_path / "auto")
    assert got.exit_code == 0, got.output
    assert asked == [("auto", "")] * 4  # every one ran vectorized
    des = pd.read_csv(tmp_path / "des" / "replications.csv")
    auto = pd.read_csv(tmp_path / "auto" / "replications.csv")
    pd.testing.assert_frame_equal(des, auto, check_exact=False, rtol=1e-9)


def test_vectorized_where_it_cannot_run_exits_2(tmp_path: Path, scenario_file: Callable) -> None:
    """Customer re-sends are shared between requests: the vectorized engine cannot run them.
    Forced, the sweep stops with exit 2 naming why (as `tailsim run --engine vectorized`) and
    leaves no folder; under `auto` the same file runs."""
    path = scenario_file(
        {
            "sweep": {"grid": {"deadline_s": [60, 120]}, "replications": 1},
            "customers": {"retry": {"probability": 0.5, "max": 1, "delay_s": 1}},
        }
    )
    out = tmp_path / "forced"
    got = _sweep(path, out, "--engine", "vectorized")
    assert got.exit_code == 2, got.output
    assert "vectorized engine cannot run policy 'wait'" in got.stderr
    assert "customers.retry" in got.stderr
    assert "Traceback" not in got.output
    assert not out.exists()
    assert _sweep(path, tmp_path / "auto").exit_code == 0


def test_the_engine_is_part_of_the_sweep_identity(tmp_path: Path, small_sweep: Path) -> None:
    """A folder swept with --engine des is not resumed by the sweep on another engine (it
    could hold other numbers), only by the same command; the default folders differ; `--engine
    auto` on an `auto` scenario is the same sweep as no flag."""
    out = tmp_path / "sw"
    assert _sweep(small_sweep, out, "--engine", "des").exit_code == 0
    other = _sweep(small_sweep, out)
    assert other.exit_code == 2
    assert "holds a different sweep" in other.stderr
    again = CliRunner().invoke(
        main, ["sweep", str(small_sweep), *SMALL[:-1], "--out", str(out), "--engine", "des"]
    )
    assert again.exit_code == 0, again.output
    assert "2 of 2 points already finished" in again.stderr
    spec = sim.load_scenario(small_sweep)
    plan = compile_scenario(spec)
    assert default_sweep_folder(with_engine(plan, "des"), 40, None) != default_sweep_folder(
        plan, 40, None
    )
    assert default_sweep_folder(with_engine(plan, "auto"), 40, None) == default_sweep_folder(
        plan, 40, None
    )


def test_bad_engines_exit_2(tmp_path: Path, scenario_file: Callable) -> None:
    """An unknown engine (the same choices as `tailsim run`), and --engine on a sweep that
    varies `engine` itself, exit 2 before any work."""
    plain = scenario_file({"sweep": {"grid": {"deadline_s": [60]}, "replications": 1}})
    got = _sweep(plain, tmp_path / "a", "--engine", "fast")
    assert got.exit_code == 2
    assert "'auto', 'des', 'vectorized'" in got.stderr
    varied = scenario_file({"sweep": {"grid": {"engine": ["des", "auto"]}, "replications": 1}})
    got = _sweep(varied, tmp_path / "b", "--engine", "des")
    assert got.exit_code == 2
    assert "varies `engine` per point" in got.stderr
    assert "Traceback" not in got.output
    assert not (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists()


def test_the_api_takes_the_engine_too(small_sweep: Path) -> None:
    result = sim.sweep(small_sweep, requests=20, policies=["wait"], engine="des")
    assert result.scenario is not None
    assert result.scenario.engine == "des"
    with pytest.raises(ScenarioError, match="engine"):
        sim.sweep(small_sweep, requests=20, engine="fast")
