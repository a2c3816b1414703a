"""`tailsim export openai`: a policy as openai client code that `tailsim drive` runs to the
policy's own numbers; what it cannot say is listed or refused with exit 2."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sim.api import drive, export_openai, load_handler
from tests.helpers import REPO_ROOT, assert_exit, cli

SCENARIO = REPO_ROOT / "scenarios" / "drive.yaml"


def _hits(requests, policy: str, deadline_s: float) -> np.ndarray:
    mine = requests[requests["policy"] == policy].sort_values("request_id")
    return (mine["ok"].to_numpy(bool) & (mine["latency_s"].to_numpy() <= deadline_s)).astype(float)


@pytest.mark.parametrize("policy", ["openai-wait", "cut", "race", "hedge"])
def test_the_exported_handler_meets_its_policys_numbers(policy: str, tmp_path: Path) -> None:
    """Driven on the same arrivals and draws, the exported code's hit rate is the policy's:
    the paired 95% CI of the difference covers 0 and is under 2 points wide each side (800
    paired requests: 1.96 sd(d)/sqrt(n), about 0.3-0.6 points here); calls per request
    agree within 2% (a race makes exactly 2, the others differ only where a retry's or
    hedge's draws do)."""
    path = tmp_path / "exported.py"
    result = cli("export", "openai", SCENARIO, "--policy", policy, "--out", path)
    assert_exit(result, 0)
    handler = load_handler(f"{path}:handle")
    run = drive(SCENARIO, handler, requests=800, compare=[policy], name="exported")
    deadline = run.plan.deadline_s
    d = _hits(run.requests, "exported", deadline) - _hits(run.requests, policy, deadline)
    half = 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d))
    assert half < 0.02
    assert abs(float(d.mean())) <= half or half == 0 == float(d.mean())
    summary = run.summary.set_index("policy")
    mine, theirs = (summary.at[p, "calls_per_request"] for p in ("exported", policy))
    assert abs(mine - theirs) <= 0.02 * theirs


def test_what_the_code_does_not_carry_out_is_listed() -> None:
    exported = export_openai(REPO_ROOT / "scenarios" / "futile-retry.yaml", "admitted")
    assert any("admission" in line for line in exported.unexpressed), exported.unexpressed
    assert "deadline-aware admission" in exported.code
    compile(exported.code, "exported", "exec")


def test_a_kind_code_cannot_say_or_an_unknown_policy_is_exit_2(tmp_path: Path) -> None:
    result = cli("export", "openai", REPO_ROOT / "scenarios" / "default.yaml", "--policy",
                 "downshift", "--out", tmp_path / "x.py")  # fmt: skip
    assert_exit(result, 2)
    assert "allowed: wait, cut, race, hedge" in result.stderr
    assert not (tmp_path / "x.py").exists()
    result = cli("export", "openai", SCENARIO, "--policy", "nope")
    assert_exit(result, 2)
    assert "known: openai-wait" in result.stderr
