"""`tailsim validate`: prints the table of checks and exits 1 when any check fails.

The checks themselves are tested in test_theory.py; here they are replaced by fixed results so the
command's table and exit code are tested quickly and deterministically.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import sim.study.validation
from sim.cli import main
from sim.study.validation import CheckResult

PASS = CheckResult("always inside", 1.0, 1.01, 0.9, 1.1, True, "fixed")
FAIL = CheckResult("far outside", 1.0, 2.0, 0.9, 1.1, False, "fixed")


@pytest.mark.parametrize(("results", "code"), [([PASS], 0), ([PASS, FAIL], 1)])
def test_validate_prints_the_table_and_exits_nonzero_on_a_fail(
    monkeypatch: pytest.MonkeyPatch, results: list[CheckResult], code: int
) -> None:
    seen: dict[str, int] = {}

    def fake_run_checks(size: int, seed: int) -> list[CheckResult]:
        seen.update(size=size, seed=seed)
        return results

    monkeypatch.setattr(sim.study.validation, "run_checks", fake_run_checks)
    outcome = CliRunner().invoke(main, ["validate", "--size", "1000", "--seed", "3"])
    assert outcome.exit_code == code, outcome.output
    assert seen == {"size": 1000, "seed": 3}
    for header in ("check", "theory", "simulated", "interval", "pass/fail"):
        assert header in outcome.output
    assert "always inside" in outcome.output
    assert ("far outside" in outcome.output) == (code == 1)
    assert f"{len(results) - (code == 1)}/{len(results)} checks passed" in outcome.output


def test_validate_rejects_a_tiny_size() -> None:
    outcome = CliRunner().invoke(main, ["validate", "--size", "999"])
    assert outcome.exit_code == 2
