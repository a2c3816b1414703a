"""Independent checks of issue 9's bundled scenarios, on their golden runs (the same size and
seed as tests/golden/records): deadline-propagation, futile-retry, tool-resend.

A record only compares the code with itself; these re-derive each claim from the tables
(requests, calls, actions) or from the scenario file, with exact laws where they hold and a
standard-error margin where the claim is statistical. `CHECKS` maps each scenario's file stem
to its checks; tests/golden/test_bundled_scenarios.py runs them on its golden runs (they are
part of its `INDEPENDENT` registry, at its golden size), so they run once, not here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

import sim
from sim.study.pilot import measure
from tests.helpers import REPO_ROOT

#: Requests of the golden runs these checks are written for (test_bundled_scenarios.py's).
GOLDEN_REQUESTS = 300
#: Lead, in standard errors of the difference, an ordering asks of the better policy.
ORDER_Z = 2.0
#: Slack for simulated times.
EPS = 1e-9
KEYS = ["policy", "request_id", "resend"]


def _with_deadline(result: sim.RunResult, table: pd.DataFrame) -> pd.DataFrame:
    """`table` with each row's run deadline (arrival + deadline_s) joined on."""
    at = result.requests.set_index(KEYS)["arrival_s"] + result.scenario.deadline_s
    return table.join(at.rename("deadline_at"), on=KEYS)


def _per_request_cost(result: sim.RunResult, policy: str) -> pd.Series:
    """Billed cost per request id (all its runs), from calls.parquet."""
    calls = result.calls[result.calls["policy"] == policy]
    ids = pd.Index(range(result.requests_count), name="request_id")
    return calls.groupby("request_id")["cost_usd"].sum().reindex(ids, fill_value=0.0)


def _hit(result: sim.RunResult, policy: str) -> tuple[float, int]:
    runs = result.requests[result.requests["policy"] == policy]
    return float(runs["ok"].mean()), len(runs)


# --------------------------------------------------------------------------- deadline-propagation

PAIRS = (("wait", "wait-orphan"), ("cut", "cut-orphan"))


def propagation_same_draws(result: sim.RunResult) -> None:
    """Both halves of each pair see the same arrivals (first sends), exactly."""
    first = result.requests[result.requests["resend"] == 0]
    for on, off in PAIRS:
        a = first[first["policy"] == on].sort_values("request_id")["arrival_s"].to_numpy()
        b = first[first["policy"] == off].sort_values("request_id")["arrival_s"].to_numpy()
        np.testing.assert_array_equal(a, b)


def _list_price(result: sim.RunResult, calls: pd.DataFrame) -> pd.Series:
    """Each call's billed tokens at its model's list price from the scenario (USD), not the
    cost the code recorded."""
    models = result.scenario.models
    price_in = calls["model"].map({m: s.price_per_mtok.input / 1e6 for m, s in models.items()})
    price_out = calls["model"].map({m: s.price_per_mtok.output / 1e6 for m, s in models.items()})
    return calls["input_tokens"] * price_in + calls["output_tokens"] * price_out


def propagation_leaves_no_orphan(result: sim.RunResult) -> None:
    """With propagation no call outlives its run's deadline (exact, from calls.parquet);
    without it some do (found by their end, not by the `orphan` column), an orphan that
    answered was billed its step's whole input and output (from the scenario), and the
    summary's orphan figures are those calls' count, tokens and cost at list price."""
    calls = _with_deadline(result, result.calls)
    late = calls["end_s"] > calls["deadline_at"] + EPS
    summary = result.summary.set_index("policy")
    asked = {s.id: (s.input_tokens, s.output_tokens) for s in result.scenario.workflow.steps}
    for on, off in PAIRS:
        assert not late[calls["policy"] == on].any(), on
        orphans = calls[(calls["policy"] == off) & late]
        assert len(orphans) >= 50, f"{off}: only {len(orphans)} orphan calls"
        answered = orphans[orphans["outcome"] == "ok"]
        assert len(answered) > 0
        billed = list(zip(answered["input_tokens"], answered["output_tokens"], strict=True))
        assert billed == [asked[str(step)] for step in answered["step"]]
        assert summary.loc[off, "orphan_calls"] == len(orphans)
        tokens = int((orphans["input_tokens"] + orphans["output_tokens"]).sum())
        assert summary.loc[off, "orphan_tokens"] == tokens
        cost = float(_list_price(result, orphans).sum())
        assert summary.loc[off, "orphan_cost_usd"] == pytest.approx(cost, rel=1e-9)
        assert summary.loc[on, "orphan_calls"] == 0


def propagation_hit_rate_equal_or_better(result: sim.RunResult) -> None:
    """Propagation's hit rate is not below the orphaning twin's by more than ORDER_Z SE of the
    difference (unpaired binomial SEs: conservative under common random numbers)."""
    for on, off in PAIRS:
        (p1, n1), (p2, n2) = _hit(result, on), _hit(result, off)
        se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
        assert p1 - p2 > -ORDER_Z * se, f"{on} {p1:.3f} vs {off} {p2:.3f} (SE {se:.3f})"


def propagation_costs_less(result: sim.RunResult) -> None:
    """Cost per request is lower with propagation: the paired per-request difference (same
    requests, same draws) is below zero by more than ORDER_Z standard errors."""
    for on, off in PAIRS:
        diff = _per_request_cost(result, on) - _per_request_cost(result, off)
        se = float(diff.std(ddof=1)) / math.sqrt(len(diff))
        assert diff.mean() < -ORDER_Z * se, f"{on} - {off}: {diff.mean():.5f} (SE {se:.5f})"


# --------------------------------------------------------------------------- futile-retry


def futile_admission_keeps_hit_rate(result: sim.RunResult) -> None:
    """Admission refuses only retries that could not finish: the hit rate moves by at most one
    standard error of the difference."""
    (p1, n1), (p2, n2) = _hit(result, "admitted"), _hit(result, "retry")
    se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    assert abs(p1 - p2) <= se, f"admitted {p1:.4f} vs retry {p2:.4f} (SE {se:.4f})"


def futile_admission_cuts_futile_cost(result: sim.RunResult) -> None:
    """The cost of retries that did not answer (futile) falls, and every retry admission let
    start had more time left than the step's pilot median (re-measured here)."""
    calls = _with_deadline(result, result.calls)
    retries = calls[calls["attempt"] > 0]
    futile = retries[retries["outcome"] != "ok"].groupby("policy")["cost_usd"].sum()
    assert futile.get("admitted", 0.0) < 0.25 * futile["retry"], futile
    median = float(np.median(measure(result.plan, result.seed)["answer"]))
    started = retries[retries["policy"] == "admitted"]
    assert (started["deadline_at"] - started["start_s"] > median).all()
    refused = result.requests.groupby("policy")["refused_retries"].sum()
    assert refused["admitted"] > 0
    assert refused["retry"] == 0


# --------------------------------------------------------------------------- tool-resend


def tool_budget_arithmetic(result: sim.RunResult) -> None:
    """The seed's planning budget, read from the scenario: step budgets 0.3 + 0.7 + 4.5 + 1.2
    (the tools run side by side) and 0.5 reserve leave 0.8 s of the 8 s deadline."""
    s = result.scenario
    budget = {step.id: step.budget_s for step in s.workflow.steps}
    path = budget["admit"] + budget["retrieve"] + budget["generate"] + budget["book"]
    assert budget["book"] == budget["notify"]
    assert s.deadline_s - path - s.workflow.reserve_s == pytest.approx(0.8)


def tool_calls_keep_their_step_budget(result: sim.RunResult) -> None:
    """No call lasts longer than its step's budget (exact)."""
    budget = {step.id: step.budget_s for step in result.scenario.workflow.steps}
    calls = result.calls
    allowed = calls["step"].map(budget).astype(float)
    assert (calls["end_s"] - calls["start_s"] <= allowed + EPS).all()


def tool_duplicates_only_without_key(result: sim.RunResult) -> None:
    """The keyed action (book) is never committed twice for a request; the unkeyed one
    (notify) is, and as often as book's re-submits are recognised: both tools start together
    after `generate` with the same budget, so every second submit of a request is one of each.
    Counted from actions.parquet: effects per request and step."""
    actions = result.actions
    effects = actions[actions["committed_s"].notna()].groupby(["step", "request_id"]).size()
    assert effects.loc["book"].max() == 1
    extra = int((effects.loc["notify"] - 1).clip(lower=0).sum())
    assert extra > 0
    assert extra == int(actions.loc[actions["step"] == "book", "recognised"].sum())
    summary = result.summary.set_index("policy")
    assert summary.loc["wait", "duplicate_actions"] == extra


def tool_unknown_after_submit(result: sim.RunResult) -> None:
    """An action the workflow stopped waiting for is unknown, was submitted, and is never
    followed by a blind re-submit of the same unkeyed action within its run."""
    actions = result.actions
    unknown = actions[actions["state"] == "unknown"]
    assert len(unknown) > 0
    assert unknown["submitted_s"].notna().all()
    assert unknown["answered_s"].isna().all()
    notify = actions[actions["step"] == "notify"].sort_values([*KEYS, "attempt"])
    for _, group in notify.groupby(KEYS):
        states = [str(x) for x in group["state"]]
        if "unknown" in states:
            assert states.index("unknown") == len(states) - 1, states


def tool_first_signal_share(result: sim.RunResult) -> None:
    """first_signal_hit_rate recomputed from calls.parquet, not from the requests' own
    `first_signal_s` the summary is built from: a run's first signal is the earliest first
    token (start + queue + first token) of an answer that came before the run ended."""
    runs = result.requests[result.requests["policy"] == "wait"].set_index(KEYS[1:])
    calls = result.calls[(result.calls["policy"] == "wait") & (result.calls["outcome"] == "ok")]
    ran = runs[["arrival_s", "end_s"]].rename(columns={"end_s": "run_end_s"})
    calls = calls.join(ran, on=KEYS[1:])
    calls = calls[~(calls["end_s"] > calls["run_end_s"] + EPS)]  # answered before the run ended
    signal = calls["start_s"] + calls["queue_s"] + calls["ttft_s"] - calls["arrival_s"]
    first = signal.groupby([calls["request_id"], calls["resend"]]).min()
    first = first.reindex(runs.index)  # NaN: no answer in time
    np.testing.assert_allclose(first, runs["first_signal_s"], rtol=1e-12, atol=EPS)
    met = first <= result.scenario.first_signal_s
    assert met.any()
    assert not met.all()
    summary = result.summary.set_index("policy")
    assert summary.loc["wait", "first_signal_hit_rate"] == pytest.approx(float(met.mean()))


CHECKS: dict[str, tuple[Callable[[sim.RunResult], None], ...]] = {
    "deadline-propagation": (
        propagation_same_draws,
        propagation_leaves_no_orphan,
        propagation_hit_rate_equal_or_better,
        propagation_costs_less,
    ),
    "futile-retry": (futile_admission_keeps_hit_rate, futile_admission_cuts_futile_cost),
    "tool-resend": (
        tool_budget_arithmetic,
        tool_calls_keep_their_step_budget,
        tool_duplicates_only_without_key,
        tool_unknown_after_submit,
        tool_first_signal_share,
    ),
}


def test_checked_scenarios_are_bundled() -> None:
    bundled = {p.stem for p in (REPO_ROOT / "scenarios").glob("*.yaml")}
    assert set(CHECKS) <= bundled


def test_checks_run_at_the_golden_size() -> None:
    """The golden suite runs these checks on its own runs: same size, same seed."""
    from tests.integration.golden.test_bundled_scenarios import INDEPENDENT, _size  # noqa: PLC0415 - it imports us

    for stem, checks in CHECKS.items():
        assert INDEPENDENT[stem] == checks
        assert _size(stem) == GOLDEN_REQUESTS
