"""`tailsim plot` and `tailsim report` on real results folders: every run figure redrawn, the
storm drawn where a time series exists, a sweep folder drawn cleanly, what is not a results folder
refused, the report self-contained and complete, and a RunResult that saves and plots."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import sim
from sim.cli import main
from sim.model.scenario import scenario_from_dict
from sim.output.plots import folder_figures


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory, contract_path: Path) -> Path:
    """A `tailsim run` folder of the contract on 150 requests."""
    out = tmp_path_factory.mktemp("run") / "r"
    result = CliRunner().invoke(
        main, ["run", str(contract_path), "-n", "150", "-q", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory: pytest.TempPathFactory, contract_path: Path) -> Path:
    """A finished `tailsim sweep` folder of the contract (wait and race, 40 requests)."""
    out = tmp_path_factory.mktemp("sweep") / "s"
    args = ["sweep", str(contract_path), "-n", "40", "-p", "wait", "-p", "race", "-q"]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_plot_redraws_every_run_figure(run_folder: Path) -> None:
    result = CliRunner().invoke(main, ["plot", str(run_folder), "--svg"])
    assert result.exit_code == 0, result.output
    for stem in ("policies", "ecdf", "pareto", "dumbbells", "strip"):
        assert (run_folder / "figures" / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
        assert b"<svg" in (run_folder / "figures" / f"{stem}.svg").read_bytes()[:2000]


def test_plot_draws_the_storm_when_a_time_series_exists(run_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    folder.mkdir()
    for file in run_folder.iterdir():
        if file.is_file():
            (folder / file.name).write_bytes(file.read_bytes())
    t = np.arange(0, 100, 10.0)
    series = pd.DataFrame(
        {
            "policy": np.repeat(["wait", "race"], len(t)),
            "t_s": np.tile(t, 2),
            "offered": 5,
            "resent": 1,
            "started": 5,
            "succeeded": 4,
            "rate_limited": 1,
            "in_flight": 3,
            "tpm_used": 1000,
            "burst": np.tile(t >= 50, 2),
        }
    )  # the columns timeseries.parquet has (sim.analysis.timeseries)
    series.to_parquet(folder / "timeseries.parquet")
    result = CliRunner().invoke(main, ["plot", str(folder)])
    assert result.exit_code == 0, result.output
    assert (folder / "figures" / "storm.png").is_file()


@pytest.mark.slow
def test_plot_on_a_sweep_folder_draws_the_sweep_cleanly(sweep_folder: Path) -> None:
    result = CliRunner().invoke(main, ["plot", str(sweep_folder)])
    assert result.exit_code == 0, result.output
    assert (sweep_folder / "figures" / "sweep.png").is_file()
    assert (sweep_folder / "figures" / "pareto.png").is_file()
    figures = dict(folder_figures(sweep_folder))
    legends = figures["sweep"].legends
    assert len(legends) == 1  # one legend, not one per line
    labels = [t.get_text() for t in legends[0].get_texts()]
    assert labels == ["wait", "race"]


@pytest.mark.parametrize("command", ["plot", "report"])
def test_plot_and_report_refuse_what_is_not_a_results_folder(tmp_path: Path, command: str) -> None:
    (tmp_path / "x.txt").write_text("no")
    result = CliRunner().invoke(main, [command, str(tmp_path)])
    assert result.exit_code == 2
    assert "not a tailsim results folder" in result.stderr
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]


def _report(folder: Path) -> str:
    result = CliRunner().invoke(main, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    return (folder / "report.html").read_text(encoding="utf-8")


def _check_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert page.rstrip().endswith("</html>")
    assert "<script" not in page
    assert "<link" not in page
    assert "@import" not in page
    # every resource is inline: no src or href that reaches outside the file
    for url in re.findall(r'(?:src|href)="([^"]*)"', page):
        assert url.startswith("data:image/png;base64,"), url[:60]
    assert "url(" not in page


def test_report_of_a_run_is_self_contained_and_complete(run_folder: Path) -> None:
    (run_folder / "breakdown.csv").write_text("policy,fail_reason,step,runs\nwait,deadline,s3,7\n")
    page = _report(run_folder)
    _check_self_contained(page)
    for section in ("reading", "comparison", "figures", "breakdown", "scenario"):
        assert f'<section id="{section}">' in page
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', page)
    assert images == ["policies", "ecdf", "pareto", "dumbbells", "strip"]
    summary = pd.read_csv(run_folder / "summary.csv")
    for policy in summary["policy"]:
        assert f'<td class="l">{policy}</td>' in page
    assert "$/success" in page
    assert "deadline_s:" in page
    assert "meets the deadline most often" in page


@pytest.mark.slow
def test_report_of_a_sweep_has_the_sweep_figures(sweep_folder: Path) -> None:
    page = _report(sweep_folder)
    _check_self_contained(page)
    images = re.findall(r'<img alt="([^"]+)"', page)
    assert images == ["sweep", "pareto"]
    assert "providers.direct.concurrency=24" in page
    assert '<section id="breakdown">' not in page


def test_run_result_saves_and_plots(tmp_path: Path, contract_data: dict[str, Any]) -> None:
    scenario = scenario_from_dict({**contract_data, "pilot": {"requests": 40}}, source="c.yaml")
    result = sim.run(scenario, requests=30, policies=["wait"])
    folder = result.save(tmp_path / "r", figures=False)
    assert (folder / "summary.csv").is_file()
    assert result.plot().axes
