"""Sweeps end to end: a sweep point equals a plain run of it, and `tailsim sweep` writes the
stacked and pooled tables (and exits 2 without a grid)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from click.testing import CliRunner

import sim
from sim.cli import main
from sim.model.scenario import with_overrides
from sim.plan import compile_scenario
from sim.study.sweep import run_sweep
from tests.helpers import REPO_ROOT
from tests.study.test_sweep import swept


def test_a_sweep_point_equals_a_plain_run_of_it(contract_data: dict[str, Any]) -> None:
    scenario = swept(contract_data, {"deadline_s": [60, 90]}, 2)
    result = run_sweep(compile_scenario(scenario), requests=120, policies=["wait", "cut"])
    assert list(result.summary.columns[:3]) == ["deadline_s", "replication", "seed"]
    assert len(result.summary) == 2 * 2 * 2
    point = result.summary[
        (result.summary["deadline_s"] == 60) & (result.summary["replication"] == 0)
    ]
    plain = sim.run(
        with_overrides(scenario, {"deadline_s": 60}), requests=120, policies=["wait", "cut"]
    )
    pd.testing.assert_frame_equal(
        point.drop(columns=["deadline_s", "replication", "seed"]).reset_index(drop=True),
        plain.summary,
    )
    # the tighter deadline cannot raise the hit rate of the same draws (common random numbers)
    by = result.summary.set_index(["deadline_s", "replication", "policy"])["hit_rate"]
    for rep in (0, 1):
        for policy in ("wait", "cut"):
            assert by[(60, rep, policy)] <= by[(90, rep, policy)]
    # the runs table is stacked and tagged the same way
    assert set(result.requests["deadline_s"]) == {60, 90}
    assert len(result.requests) == 2 * 2 * 2 * 120


def test_sweep_cli_writes_the_stacked_and_pooled_tables(
    tmp_path: Path, contract_path: Path
) -> None:
    out = tmp_path / "sw"
    result = CliRunner().invoke(
        main, ["sweep", str(contract_path), "-n", "60", "-p", "wait", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    stacked = pd.read_csv(out / "replications.csv")
    assert sorted(set(stacked["providers.direct.concurrency"])) == [24, 32, 48, 64]
    assert len(stacked) == 4 * 2  # four slot counts, two replications, one policy
    pooled = pd.read_csv(out / "summary.csv")
    assert len(pooled) == 4
    assert set(pooled["replications"]) == {2}
    assert (out / "requests.parquet").is_file()
    assert (out / "figures" / "sweep.png").read_bytes().startswith(b"\x89PNG")
    assert "providers.direct.concurrency" in result.stdout
    assert "$/success" in result.stdout


def test_sweep_cli_without_a_grid_exits_2(tmp_path: Path, contract_data: dict[str, Any]) -> None:
    data = {k: v for k, v in contract_data.items() if k != "sweep"}
    path = tmp_path / "nosweep.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = CliRunner().invoke(main, ["sweep", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "sweep: missing" in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_sweep_over_a_count_law_aggregates_its_points() -> None:
    """scenarios/agent-loop.yaml zips a count law (a mapping) with the loop's cap: its points
    aggregate (4 points, one row each for one policy), the law shown as its JSON text."""
    result = sim.sweep(REPO_ROOT / "scenarios" / "agent-loop.yaml", requests=20, policies=["wait"])
    table = result.aggregate
    key = "workflow.groups.tools.loop.count"
    assert len(table) == 4
    assert set(table[key]) == {
        '{"dist": "geometric", "mean": 3}',
        '{"dist": "constant", "value": 3}',
    }
    assert list(table["workflow.groups.tools.loop.max"]) == [8, 8, 4, 2]
