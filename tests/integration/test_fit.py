"""`tailsim fit` and `tailsim synth` end to end: --strict exits 2 and writes nothing, unknown
files and formats exit 2, the fitted block is a file a scenario includes (samples of an empirical
fit beside it), spells are placed and the serving fitted outside them, --by groups, and synth
writes the call log."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from sim.calibration.calllog import CALL_LOG_COLUMNS
from sim.calibration.synth import synth_calls
from sim.cli import main
from sim.model.scenario import load_scenario, scenario_from_dict
from sim.plan import compile_scenario
from tests.calibration.test_fit_bounded import calls_table, three_modes
from tests.calibration.test_fit_extras import small_scenario
from tests.calibration.test_fit_readers import garbage_csv


def test_fit_writes_the_samples_beside_the_fitted_file(tmp_path: Path) -> None:
    """`--out fits/f.yaml` writes fits/f.p.m.csv; a scenario in another folder includes the
    fitted file and replays exactly the log's calls."""
    latency = three_modes(6)
    log = tmp_path / "calls.csv"
    calls_table(latency)[["provider", "model", "latency_s"]].to_csv(log, index=False)
    (tmp_path / "fits").mkdir()
    out = tmp_path / "fits" / "f.yaml"
    result = CliRunner().invoke(main, ["fit", str(log), "--no-extras", "--out", str(out)])
    assert result.exit_code == 0, result.output
    samples = tmp_path / "fits" / "f.p.m.csv"
    assert samples.exists()
    block = yaml.safe_load(out.read_text())["providers"]["p"]["serves"]["m"]
    assert block["ttft_s"] == {"dist": "empirical", "file": "f.p.m.csv", "column": "latency_s"}
    (tmp_path / "runs").mkdir()
    scenario = tmp_path / "runs" / "s.yaml"
    scenario.write_text(
        "name: s\ninclude: ../fits/f.yaml\n"
        "workflow: {steps: [{id: a, model: m, provider: p, output_tokens: 20}]}\n"
        "policies: {wait: {kind: wait}}\n"
    )
    loaded = load_scenario(scenario)
    replayed = loaded.providers["p"].serves["m"].ttft_s.samples
    assert replayed is not None
    np.testing.assert_allclose(replayed, np.sort(latency), rtol=1e-5)  # written to 6 digits


def test_synth_command_writes_the_call_log(tmp_path: Path) -> None:
    """`tailsim synth` writes the normalized call log's columns; bad input exits 2 with nothing
    written."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario()))
    target = tmp_path / "trace.csv"
    result = CliRunner().invoke(main, ["synth", str(scenario), "--out", str(target), "-n", "50"])
    assert result.exit_code == 0, result.output
    log = pd.read_csv(target)
    assert list(log.columns) == list(CALL_LOG_COLUMNS)
    assert len(log) >= 150
    assert set(log["status"]) <= {"ok", "error", "invalid"}
    assert (log["latency_s"] >= log["ttft_s"]).all()
    assert log["request_id"].nunique() == 50
    bad = CliRunner().invoke(main, ["synth", str(scenario), "--out", str(tmp_path)])
    assert bad.exit_code == 2
    assert "folder" in bad.output
    missing = tmp_path / "none.csv"
    absent = CliRunner().invoke(main, ["synth", str(tmp_path / "no.yaml"), "--out", str(missing)])
    assert absent.exit_code == 2
    assert not missing.exists()
    unknown = CliRunner().invoke(
        main, ["synth", str(scenario), "--out", str(missing), "--policy", "x"]
    )
    assert unknown.exit_code == 2
    assert "unknown policy" in unknown.output
    assert not missing.exists()


def test_fit_strict_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    path = garbage_csv(tmp_path / "log.csv")
    out = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(main, ["fit", str(path), "--strict", "--out", str(out)])
    assert result.exit_code == 2
    assert "6 of 9 rows skipped (--strict: rejected)" in result.output
    assert "negative latency: 1 row (e.g. row 2)" in result.output
    assert list(tmp_path.iterdir()) == [path]


def test_fit_unknown_file_and_format_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["fit", str(tmp_path / "none.csv")])
    assert result.exit_code == 2
    assert "file not found" in result.output
    other = tmp_path / "log.xlsx"
    other.write_text("x")
    result = CliRunner().invoke(main, ["fit", str(other)])
    assert result.exit_code == 2
    assert "unknown log format" in result.output
    assert "Traceback" not in result.output


def test_fit_writes_a_block_a_scenario_includes(tmp_path: Path) -> None:
    """Garbage skipped (said on stderr), a fitted file written, and a scenario that includes it
    loads with the fitted serving; the scenario's own model entry wins."""
    rng = np.random.default_rng(4)
    n = 400
    ttft = np.exp(np.log(0.5) + 0.4 * rng.standard_normal(n))
    frame = pd.DataFrame(
        {
            "provider": "acme/eu",
            "model": "m1",
            "output_tokens": 100,
            "ttft_s": ttft,
            "latency_s": ttft + 100 / np.exp(np.log(50) + 0.2 * rng.standard_normal(n)),
        }
    )
    path = tmp_path / "calls.csv"
    frame.to_csv(path, index=False)
    with path.open("a") as handle:
        handle.write("acme/eu,m1,100,0.5,-3\n")
    out = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(main, ["fit", str(path), "--out", str(out), "--min-calls", "50"])
    assert result.exit_code == 0, result.output
    assert f"negative latency: 1 row (e.g. row {n + 1})" in result.output
    for name in ("fitted.yaml", "fitted.report.csv", "fitted.buckets.csv", "fitted.png"):
        assert (tmp_path / name).exists()
    report = pd.read_csv(tmp_path / "fitted.report.csv")
    assert report.loc[0, "n"] == n
    assert report.loc[0, "provider"] == "acme/eu"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\ninclude: fitted.yaml\nmodels: {m1: {price_per_mtok: {input: 1, output: 2}}}\n"
        "workflow: {steps: [{id: a, model: m1, output_tokens: 100}]}\n"
        "policies: {wait: {kind: wait}}\n"
    )
    loaded = load_scenario(scenario)
    serving = loaded.providers["acme-eu"].serves["m1"]
    assert serving.ttft_s.median == pytest.approx(0.5, rel=0.1)
    assert serving.tokens_per_s.median == pytest.approx(50, rel=0.05)
    assert loaded.models["m1"].price_per_mtok.output == 2


@pytest.mark.slow
def test_fit_places_spells_and_fits_the_serving_outside_them(tmp_path: Path) -> None:
    """A synthetic log with bad spells (every 100 s, 10 s long, 2x slower; `tailsim synth`'s
    engine): the fitted file carries `providers.p.episodes`, and p's serving is fitted on the
    calls outside spells, so the spells are not counted twice: its median total (first token +
    300 tokens at the median speed, 5.5 s) within 4% (SE of a median of ~4,500 calls ~0.6%; a
    fit on every call, spells included, would be ~8% slower)."""
    spec = {
        "name": "spells",
        "seed": 3,
        "deadline_s": 1e6,
        "arrivals": {"kind": "poisson", "rate_per_s": 1.0},
        "models": {"m": {}},
        "providers": {
            "p": {
                "episodes": {"every_s": 100, "last_s": 10, "slowdown": 2.0},
                "serves": {
                    "m": {
                        "ttft_s": {"median": 0.5, "p99": 2.0},
                        "tokens_per_s": {"median": 60, "p99": 110},
                    }
                },
            }
        },
        "workflow": {"steps": [{"id": "a", "model": "m", "output_tokens": 300}]},
        "policies": {"wait": {"kind": "wait"}},
    }
    path = tmp_path / "spells.csv"
    synth_calls(compile_scenario(scenario_from_dict(spec)), requests=5000).to_csv(path, index=False)
    out = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(main, ["fit", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "calls outside bad spells" in text
    fitted = yaml.safe_load(text)
    spells = fitted["providers"]["p"]["episodes"]
    assert spells["slowdown"] == pytest.approx(2.0, rel=0.2)
    report = pd.read_csv(tmp_path / "fitted.report.csv")
    assert report.loc[0, "p50_fit_s"] == pytest.approx(0.5 + 300 / 60, rel=0.04)
    assert "episodes" in report.loc[0, "extras"]


def test_by_groups_and_rejects_unknown_columns(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    rows = [
        {"provider": provider, "model": "m", "latency_s": float(x)}
        for provider, scale in (("a", 1.0), ("b", 3.0))
        for x in np.exp(np.log(scale) + 0.3 * rng.standard_normal(200))
    ]
    path = tmp_path / "two.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = tmp_path / "f.yaml"
    result = CliRunner().invoke(main, ["fit", str(path), "--no-extras", "--out", str(out)])
    assert result.exit_code == 0, result.output
    fitted = yaml.safe_load(out.read_text())
    assert set(fitted["providers"]) == {"a", "b"}
    medians = [fitted["providers"][p]["serves"]["m"]["ttft_s"]["median"] for p in ("a", "b")]
    assert medians[1] / medians[0] == pytest.approx(3.0, rel=0.1)  # SE of each ~2%
    result = CliRunner().invoke(
        main, ["fit", str(path), "--no-extras", "--by", "model", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert set(yaml.safe_load(out.read_text())["providers"]) == {"all"}
    result = CliRunner().invoke(main, ["fit", str(path), "--by", "region"])
    assert result.exit_code == 2
    assert "unknown column" in result.output
