"""`tailsim nines`: on the bundled scenario it tells apart at 99.99% what 99% cannot; bad input
exits 2 and writes nothing; the figure is written."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sim.cli import main
from sim.model.scenario import load_scenario
from tests.helpers import REPO_ROOT

CHAIN = REPO_ROOT / "tests" / "data" / "nines-chain.yaml"


def test_the_bundled_scenario_tells_apart_at_99_99_what_99_cannot(tmp_path: Path) -> None:
    """Must-show (d): on scenarios/nines.yaml a plain run of its 20,000 requests gives race and
    hedge overlapping 95% CIs; `tailsim nines` separates them and says so."""
    from sim.study.runner import run  # noqa: PLC0415

    scenario = load_scenario(REPO_ROOT / "scenarios" / "nines.yaml")
    summary = run(scenario, records="none").summary.set_index("policy")
    assert summary.at["race", "hit_rate"] >= 0.99
    assert summary.at["hedge", "hit_rate"] >= 0.99
    assert summary.at["race", "hit_rate_lo"] <= summary.at["hedge", "hit_rate_hi"]
    assert summary.at["hedge", "hit_rate_lo"] <= summary.at["race", "hit_rate_hi"]
    out = tmp_path / "n"
    result = CliRunner().invoke(main, ["nines", str(REPO_ROOT / "scenarios" / "nines.yaml"),
                                       "--out", str(out), "--no-plot"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "race misses less than hedge: their 95% CIs do not overlap" in result.output
    table = (out / "nines.csv").read_text().splitlines()
    header = table[0].split(",")
    for column in (
        "policy",
        "miss_probability",
        "ci_lo",
        "ci_hi",
        "rel_error",
        "runs",
        "seconds",
        "fail_probability",
        "ess",
        "max_weight_share",
        "fallback",
        "tilt",
    ):
        assert column in header  # fmt: skip
    assert (out / "tilt.txt").exists()
    assert not (out / "figures").exists()


def test_nines_refuses_bad_input_with_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "n"
    result = CliRunner().invoke(main, ["nines", str(CHAIN), "-p", "nope", "--out", str(out)])
    assert result.exit_code == 2
    assert "unknown policy 'nope'" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    result = CliRunner().invoke(main, ["nines", str(CHAIN), "--target-rel-error", "0"])
    assert result.exit_code == 2


def test_nines_writes_the_figure(tmp_path: Path) -> None:
    out = tmp_path / "n"
    result = CliRunner().invoke(main, ["nines", str(CHAIN), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "figures" / "nines.png").stat().st_size > 1000
    assert "99.99" in result.output  # the hit rate as nines
