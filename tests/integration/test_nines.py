"""`tailsim nines`: on the bundled scenario it tells apart at 99.99% what 99% cannot; bad input
exits 2 and writes nothing; the figure is written; what ended the run is printed and kept in
notes.txt, and a run the wall-clock budget ended says its numbers depend on the machine.

Every run here has a budget far past its end (`NO_BUDGET`), so the target ends it and its
numbers are the same on any machine; the budget's own test moves a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.model.scenario import load_scenario
from sim.rare import nines as nines_module
from tests.helpers import REPO_ROOT

CHAIN = REPO_ROOT / "tests" / "data" / "nines-chain.yaml"
#: `--budget-s` for runs the precision target must end, whatever the machine's speed.
NO_BUDGET = ("--budget-s", "1e9")


@pytest.mark.slow
def test_the_bundled_scenario_tells_apart_at_99_99_what_99_cannot(tmp_path: Path) -> None:
    """Must-show (d): on scenarios/nines.yaml a plain run of its 20,000 requests gives race and
    hedge overlapping 95% CIs; `tailsim nines` separates them and says so."""
    from sim.plan import compile_scenario  # noqa: PLC0415
    from sim.study.runner import run  # noqa: PLC0415

    scenario = load_scenario(REPO_ROOT / "scenarios" / "nines.yaml")
    summary = run(compile_scenario(scenario), records="none").summary.set_index("policy")
    assert summary.at["race", "hit_rate"] >= 0.99
    assert summary.at["hedge", "hit_rate"] >= 0.99
    assert summary.at["race", "hit_rate_lo"] <= summary.at["hedge", "hit_rate_hi"]
    assert summary.at["hedge", "hit_rate_lo"] <= summary.at["race", "hit_rate_hi"]
    out = tmp_path / "n"
    result = CliRunner().invoke(main, ["nines", str(REPO_ROOT / "scenarios" / "nines.yaml"),
                                       "--out", str(out), "--no-plot", *NO_BUDGET])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "race misses less than hedge: their 95% CIs do not overlap" in result.output
    assert "stopped: at the target (every policy's 95% CI within 10% of its" in result.output
    assert "machine" not in result.output
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
    notes = (out / "notes.txt").read_text(encoding="utf-8")
    assert notes.startswith("stopped: at the target")
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
    result = CliRunner().invoke(main, ["nines", str(CHAIN), "--out", str(out), *NO_BUDGET])
    assert result.exit_code == 0, result.output
    assert (out / "figures" / "nines.png").stat().st_size > 1000
    assert "99.99" in result.output  # the hit rate as nines


class _Clock:
    """A wall clock that moves `step` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_a_run_the_budget_ends_says_so_on_screen_and_in_its_notes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a clock that moves 10 s a read, `--budget-s 25` ends the run before its 1% target:
    the output says the budget, not the precision, ended it and that the numbers depend on
    this machine (the pilot's cut too), and notes.txt keeps the same lines."""
    monkeypatch.setattr(nines_module, "time", _Clock(10.0))
    out = tmp_path / "n"
    args = ["nines", str(CHAIN), "--budget-s", "25", "--target-rel-error", "0.01"]
    result = CliRunner().invoke(main, [*args, "--no-plot", "--out", str(out)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "stopped: by the time budget (--budget-s 25), not the target" in said
    assert "depends on this machine's speed and load" in said
    assert "stopped: the cross-entropy pilot of 'wait' ran out of its share" in said
    assert "notes.txt" in said
    notes = (out / "notes.txt").read_text(encoding="utf-8").splitlines()
    assert notes[0].startswith("stopped: by the time budget (--budget-s 25), not the target")
    assert notes[1].startswith("stopped: the cross-entropy pilot of 'wait'")
    assert any(line.startswith("warning: policy 'wait': relative error") for line in notes)
