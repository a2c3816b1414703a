"""What `tailsim fit` prints and `tailsim synth` writes, read as a user reads them: every column
of the fit table has a header (the extras column had none), and a synthetic log's token counts
are integers ("800", not "800.000000") (issue 25, items 12 and 13)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from sim.calibration.call_log import write_call_log
from sim.calibration.synth import synth_calls
from sim.cli import main
from sim.cli.fit import _table
from sim.model.scenario import load_scenario
from sim.plan import compile_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_every_column_of_the_fit_table_has_a_header() -> None:
    row = {
        "provider": "direct", "model": "big", "n": 4018, "fitted_from": "first_token",
        "p50_obs_s": 6.0, "p50_fit_s": 6.0, "p95_obs_s": 9.6, "p95_fit_s": 9.9,
        "p99_obs_s": 33.0, "p99_fit_s": 41.7, "ks": 0.01, "stall": "0.029 x 30 s",
        "error_rate": 0.0126, "invalid_rate": 0.0207, "extras": "none",
    }  # fmt: skip
    table = _table(pd.DataFrame([row]))
    headers = [str(column.header) for column in table.columns]
    assert all(headers), headers
    assert headers[-1] == "extras"


def test_synth_writes_token_counts_as_integers(tmp_path: Path) -> None:
    out = tmp_path / "trace.csv"
    result = CliRunner().invoke(
        main, ["synth", str(ROOT / "scenarios" / "default.yaml"), "--out", str(out), "-n", "30"]
    )
    assert result.exit_code == 0, result.output
    lines = out.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    first = dict(zip(header, lines[1].split(","), strict=True))
    assert first["input_tokens"] == "6000"
    assert first["output_tokens"] == "300"
    assert first["latency_s"].count(".") == 1  # seconds keep their six decimals
    # the numbers are the same as before: only their spelling changed
    log = synth_calls(
        compile_scenario(load_scenario(ROOT / "scenarios" / "default.yaml")), requests=30
    )
    back = pd.read_csv(out)
    assert (back["output_tokens"].to_numpy(float) == log["output_tokens"].to_numpy(float)).all()


def test_a_fractional_count_keeps_its_decimals(tmp_path: Path) -> None:
    log = synth_calls(
        compile_scenario(load_scenario(ROOT / "scenarios" / "default.yaml")), requests=5
    )
    log.loc[0, "output_tokens"] = 12.5  # a cancelled call billed in part
    out = write_call_log(log, tmp_path / "partial.csv")
    back = pd.read_csv(out)
    assert back.loc[0, "output_tokens"] == 12.5
    assert "6000," in out.read_text(encoding="utf-8")  # the other column is still whole
