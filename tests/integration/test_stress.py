"""`tailsim stress` and a run's storm files: the load-aware margin ranks above plain retrying,
arrivals without a base rate are refused, and a run with a storm writes its time series and
figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from sim.cli import main
from tests.helpers import REPO_ROOT

STORM = REPO_ROOT / "scenarios" / "retry-storm.yaml"


def test_stress_ranks_the_load_aware_margin_above_plain_retrying(tmp_path: Path) -> None:
    """On retry-storm, a 3x minute-long burst: plain retrying does not recover from it (its
    margin ends below 3x), the guarded policy does; table, CSVs and figure are written."""
    out = tmp_path / "stress"
    result = CliRunner().invoke(
        main,
        [
            "stress", str(STORM), "-p", "retry,guarded", "--duration", "60",
            "--multiplier", "1.5", "--multiplier", "3", "--window", "120", "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "storm margin" in result.output
    best = pd.read_csv(out / "margins.csv").set_index("policy")
    assert best.loc["guarded", "margin_requests"] > best.loc["retry", "margin_requests"]
    assert best.loc["retry", "first_failed"] <= 3.0
    assert best.loc["guarded", "largest_multiplier"] == 3.0
    assert (out / "stress.csv").is_file()
    assert (out / "figures" / "stress.png").stat().st_size > 0


def test_stress_refuses_arrivals_without_a_base_rate(tmp_path: Path) -> None:
    trace = REPO_ROOT / "scenarios" / "azure-code-burst.yaml"
    result = CliRunner().invoke(main, ["stress", str(trace), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "arrivals.kind" in result.output
    assert not (tmp_path / "x").exists()


def test_run_writes_the_timeseries_and_a_storm_figure_when_there_is_a_storm(
    tmp_path: Path,
) -> None:
    """retry-storm's burst brings re-sends: `tailsim run` writes timeseries.parquet (one row per
    policy and bin) and figures/storm.png; the default scenario has neither re-sends nor 429s
    and gets the table but no storm figure."""
    storm, calm = tmp_path / "storm", tmp_path / "calm"
    args = ["run", str(STORM), "-n", "800", "-p", "retry,guarded", "-q", "--out", str(storm)]
    assert CliRunner().invoke(main, args).exit_code == 0
    series = pd.read_parquet(storm / "timeseries.parquet")
    assert set(series["policy"]) == {"retry", "guarded"}
    assert series["burst"].any()
    assert series["resent"].sum() > 0
    assert (storm / "figures" / "storm.png").stat().st_size > 0
    args = ["run", "-n", "50", "-p", "wait", "-q", "--out", str(calm)]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert (calm / "timeseries.parquet").is_file()
    assert not (calm / "figures" / "storm.png").exists()
