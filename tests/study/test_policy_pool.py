"""Policies handed to workers (sim.study.policy_pool, progress_lines): the policies that start
more calls go first, progress lines each tenth and when slow, and a scenario error survives
pickling back from a worker. Runs on processes and dask are in
tests/integration/test_parallel_run.py."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario
from sim.plan import compile_scenario
from sim.study.pilot import prepare
from sim.study.policy_pool import heaviest_first
from sim.study.policy_run import RunJob
from sim.study.progress_lines import ProgressLines

POLICIES = ("cut", "race", "race_capped", "race_polite")


@pytest.fixture
def contended(repo_root: Path) -> Path:
    """Four policies on one shared TPM quota (the event engine only), a pilot for `cut: p95`."""
    return repo_root / "scenarios" / "tpm-saturation.yaml"


def test_progress_lines_each_tenth_and_when_slow() -> None:
    """A line per policy per tenth of its requests, one after `every_s` without a tenth, and
    counting again from zero when a policy starts over (its vectorized chunks dropped)."""
    now = [0.0]
    lines: list[str] = []
    tick = ProgressLines(["a", "b"], 1000, lines.append, every_s=30.0, clock=lambda: now[0])
    tick("a", 50)  # under a tenth, and soon: nothing
    assert lines == []
    tick("a", 60)
    tick("b", 250)  # two tenths at once: one line
    assert lines == ["run: a 11% (110 of 1,000 requests, 0 s)",
                     "run: b 25% (250 of 1,000 requests, 0 s)"]  # fmt: skip
    now[0] = 31.0
    tick("a", 1)  # no new tenth, but half a minute since a's last line
    assert lines[-1] == "run: a 11% (111 of 1,000 requests, 31 s)"
    tick("a", 1)
    assert len(lines) == 3  # it just said so
    tick("b", -250)  # b starts over
    tick("b", 100)
    assert lines[-1] == "run: b 10% (100 of 1,000 requests, 31 s)"
    tick("b", 900)
    assert lines[-1] == "run: b 100% (1,000 of 1,000 requests, 31 s)"


def test_a_scenario_error_survives_pickling() -> None:
    """Errors cross from workers whole: source and problems, not a one-argument rebuild."""
    error = ScenarioError("f.yaml", [("engine", "cannot"), ("seed", "bad")])
    back = pickle.loads(pickle.dumps(error))
    assert (back.source, back.problems, str(back)) == (error.source, error.problems, str(error))


def test_policies_that_start_more_calls_are_handed_out_first(contended: Path) -> None:
    """A race (two calls at once per step) before a cut (one): the long policies start first,
    so no worker is left with a long one at the end; ties keep the run's order."""
    plan, _ = prepare(compile_scenario(load_scenario(contended)))
    job = RunJob(plan, ["cut", *POLICIES[1:]], "all")
    assert heaviest_first(job) == ["race", "race_capped", "race_polite", "cut"]
