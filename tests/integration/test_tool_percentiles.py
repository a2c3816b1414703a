"""Percentile thresholds on workflows holding tool steps (issue 16, items 1 and 2).

A tool step makes no LLM call: the engine runs it, never a policy, so a policy's `cutoff`,
`after`, ... apply to no call of it and the pilot resolves none for it (docs/scenario-format.md,
"Policies"). These tests run every policy kind with a `pNN` threshold on a small RAG workflow
(retrieve tool step -> generate -> check), on both engines' entry points, and the docs' own
deadline example on scenarios/tool-resend.yaml. Before the fix each ended in `KeyError`.
"""

from __future__ import annotations

import copy
import re
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import sim
from sim.api.searches import tune as run_tune
from sim.cli import main
from sim.model.config import PolicySpec, Scenario
from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario
from sim.study.pilot import measure
from sim.study.tune import TUNED
from tests.helpers import REPO_ROOT, scenario_dict

TOOL_RESEND = REPO_ROOT / "scenarios" / "tool-resend.yaml"
FORMAT_DOC = REPO_ROOT / "docs" / "scenario-format.md"
#: Slack for comparing simulated times.
EPS = 1e-9

#: One policy per kind (two for `cut`: deadline keys too), each with a `pNN` threshold: kinds
#: without a threshold field (wait, race) take it through `admission.expected`.
POLICIES: dict[str, dict[str, Any]] = {
    "wait": {"kind": "wait", "retries": 1, "admission": {"expected": "p50"}},
    "cut": {"kind": "cut", "cutoff": "p95", "retries": 2},
    "cut_orphaned": {"kind": "cut", "cutoff": "p95", "retries": 2, "propagate_deadline": False},
    # a threshold set on the tool step itself: p5 would cut most submits if it reached them
    "cut_tool_entry": {"kind": "cut", "cutoff": "p90", "steps": {"retrieve": {"cutoff": "p5"}}},
    "race": {"kind": "race", "attempts": 2, "admission": {"expected": "p90"}},
    "hedge": {"kind": "hedge", "after": "p90", "providers": ["p1", "p2"]},
    "downshift": {"kind": "downshift", "cutoff": "p95", "to": "small"},
    "adaptive": {
        "kind": "adaptive",
        "cutoff": "p95",
        "ttft_cutoff": "p90",
        "hedge_after": "p99",
        "fall_down": "small",
    },
    "draft": {"kind": "draft", "model": "small"},  # upgrade_within: p95 by default
    "router": {"kind": "router", "num_retries": 1, "fallbacks": {"big": ["small"]}},
    "per_step": {
        "kind": "per_step",
        "steps": {"retrieve": {"kind": "cut", "cutoff": "p50"}, "generate": "hedge"},
        "default": {"kind": "cut", "cutoff": "p95"},
    },
}
#: Steps with an LLM call, and the tool step.
LLM_STEPS = ("generate", "check")
TOOL = "retrieve"


def _serving(ttft: float, speed: float, **extra: Any) -> dict[str, Any]:
    """Lognormal serving laws (p99 = 4 x median), so each step has its own percentiles."""
    return {
        "ttft_s": {"median": ttft, "p99": 4 * ttft},
        "tokens_per_s": {"median": speed, "p99": 2 * speed},
        **extra,
    }


def rag_data(policies: dict[str, Any] | None = None) -> dict[str, Any]:
    """A RAG workflow: a retrieve tool step (refused 5% of the time, one re-submit), then an
    LLM answer and an LLM check, under an 8 s deadline."""
    serves = {"big": _serving(0.5, 100.0, error_rate=0.02), "small": _serving(0.2, 300.0)}
    steps = [
        {
            "id": TOOL,
            "kind": "tool",
            "tool": {
                "commit_s": {"median": 0.2, "p99": 1.0},
                "confirm_s": {"median": 0.05, "p99": 0.3},
                "error_rate": 0.05,
                "retries": 1,
            },
        },
        {"id": "generate", "model": "big", "output_tokens": 100, "after": [TOOL]},
        {"id": "check", "model": "small", "output_tokens": 20, "after": ["generate"]},
    ]
    return scenario_dict(
        steps,
        policies or POLICIES,
        name="rag",
        seed=5,
        deadline_s=8.0,
        requests=150,
        arrivals={"kind": "poisson", "rate_per_s": 2.0},
        providers={"p1": {"serves": serves}, "p2": {"serves": copy.deepcopy(serves)}},
        pilot={"requests": 100},
    )


def _kinds() -> set[str]:
    """Every policy kind of the scenario format (read from its schema, so a new kind must be
    added to POLICIES)."""
    union = typing.get_args(PolicySpec)[0]
    return {
        typing.get_args(cls.model_fields["kind"].annotation)[0] for cls in typing.get_args(union)
    }


@pytest.fixture(scope="module")
def rag() -> Scenario:
    return scenario_from_dict(rag_data())


@pytest.fixture(scope="module")
def runs(rag: Scenario) -> dict[str, sim.RunResult]:
    """The RAG scenario under the automatic engine choice and forced onto the event engine."""
    return {"auto": sim.run(rag), "des": sim.run(rag, engine="des")}


def test_every_policy_kind_is_covered() -> None:
    assert {spec["kind"] for spec in POLICIES.values()} == _kinds()


def test_auto_runs_every_kind_on_the_event_engine_and_equals_des(
    runs: dict[str, sim.RunResult],
) -> None:
    """The vectorized engine does not run tool steps: `auto` must say so and fall back (it
    crashed with KeyError: 'retrieve' before it could), giving the event engine's tables."""
    auto, des = runs["auto"], runs["des"]
    assert set(auto.engines) == set(POLICIES)
    assert set(auto.engines.values()) == {"des"}
    for name, note in auto.engine_notes.items():
        assert "workflow.steps[0]" in note, (name, note)  # the tool step is named
    for table in ("summary", "requests", "calls", "actions"):
        pd.testing.assert_frame_equal(getattr(auto, table), getattr(des, table))


@pytest.mark.parametrize("name", ["cut", "hedge", "per_step"])
def test_forcing_the_vectorized_engine_is_a_clear_error(rag: Scenario, name: str) -> None:
    with pytest.raises(ScenarioError, match=f"cannot run policy '{name}'.*steps\\[0\\]"):
        sim.run(rag, engine="vectorized", policies=[name])


def test_results_are_sane_for_every_kind(runs: dict[str, sim.RunResult]) -> None:
    """Every request ran under every policy, hit rates are fractions inside their interval and
    well above zero (each LLM step fails < 3% of the time at these rates), the tool step made
    no LLM call but every request submitted it, and the LLM steps did make calls."""
    result = runs["auto"]
    summary = result.summary.set_index("policy")
    for name in POLICIES:
        row = summary.loc[name]
        assert row["requests"] == 150
        assert 0.0 <= row["hit_rate_lo"] <= row["hit_rate"] <= row["hit_rate_hi"] <= 1.0
        assert row["hit_rate"] > 0.8, name
        requests = result.requests[result.requests["policy"] == name]
        assert sorted(requests["request_id"]) == list(range(150))
        calls = result.calls[result.calls["policy"] == name]
        assert set(calls["step"]) == set(LLM_STEPS), name
        actions = result.actions[result.actions["policy"] == name]
        assert set(actions["step"]) == {TOOL}
        assert set(actions["request_id"]) == set(range(150)), name


def test_policies_do_not_reach_the_tool_step(runs: dict[str, sim.RunResult]) -> None:
    """retrieve is the first step: its submits start at arrival with the same draws under every
    policy, and no policy's threshold reaches them (not even `cut_tool_entry`'s p5 on it), so
    its action records are the same under every policy, and none was cut."""
    actions = runs["auto"].actions
    first = actions[actions["policy"] == "wait"].drop(columns="policy").reset_index(drop=True)
    assert (first["state"] != "unknown").all()
    assert (first["state"] == "failed").any()  # a refusal was re-submitted: the law bites
    for name in POLICIES:
        mine = actions[actions["policy"] == name].drop(columns="policy").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, first, obj=name)


def test_thresholds_are_the_llm_steps_own_percentiles(
    rag: Scenario, runs: dict[str, sim.RunResult]
) -> None:
    """Resolved thresholds name the LLM steps only, each the percentile of that step's pilot
    latencies (recomputed here), and the cut really binds each LLM call at it."""
    thresholds = runs["auto"].thresholds
    for name in POLICIES:
        assert TOOL not in thresholds[name], name
    pilot = measure(compile_scenario(rag))

    def pct(step: str, q: float) -> Any:
        return pytest.approx(float(np.percentile(pilot[step], q)), rel=1e-12)

    assert thresholds["cut"] == {"generate": pct("generate", 95), "check": pct("check", 95)}
    assert thresholds["hedge"] == {"generate": pct("generate", 90), "check": pct("check", 90)}
    # per_step: retrieve -> cut p50 (a tool step: none), generate -> hedge, default cut p95
    assert thresholds["per_step"] == {"generate": pct("generate", 90), "check": pct("check", 95)}
    calls = runs["auto"].calls
    cut = calls[calls["policy"] == "cut"]
    for step in LLM_STEPS:
        mine = cut[cut["step"] == step]
        span = mine["end_s"] - mine["start_s"]
        assert (span <= thresholds["cut"][step] + EPS).all(), step
        assert (mine["outcome"] == "timeout").any(), step  # some calls were cut at it


@pytest.mark.parametrize("records", ["requests", "none"])
def test_summaries_only_give_the_same_summary(
    rag: Scenario, runs: dict[str, sim.RunResult], records: str
) -> None:
    """The summaries-only path (the one `tailsim sweep` takes) chooses its engine by chunks:
    it must run the same policies and give the same summary."""
    names = ["cut", "hedge", "draft"]
    lean = sim.run(rag, policies=names, records=records)
    full = runs["auto"].summary.set_index("policy").loc[names].reset_index()
    pd.testing.assert_frame_equal(lean.summary, full, check_exact=False, rtol=1e-12)


# ------------------------------------------------------------------ the docs' own example


def docs_deadline_example() -> dict[str, Any]:
    """The YAML block of docs/scenario-format.md, section "Deadlines, budgets and side effects"
    (the first ```yaml block after that heading), parsed as written."""
    text = FORMAT_DOC.read_text(encoding="utf-8")
    section = text[text.index("## Deadlines, budgets and side effects") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    data = yaml.safe_load(block.group(1))
    assert set(data["policies"]) == {"cut", "orphaned", "admitted"}
    return data


def _tool_resend() -> dict[str, Any]:
    return yaml.safe_load(TOOL_RESEND.read_text(encoding="utf-8"))


def _run_file(
    tmp_path: Path, data: dict[str, Any], name: str, tools: tuple[str, ...] = ("book", "notify")
) -> pd.DataFrame:
    """`tailsim check` then `tailsim run -n 300` of `data` written to a file; the summary."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    check = CliRunner().invoke(main, ["check", str(path)])
    assert check.exit_code == 0, check.output
    out = tmp_path / f"{name}-out"
    got = CliRunner().invoke(
        main, ["run", str(path), "-n", "300", "--out", str(out), "--no-plot", "-q"]
    )
    assert got.exit_code == 0, got.output
    assert (out / "actions.parquet").exists()
    resolved = (out / "scenario.resolved.yaml").read_text(encoding="utf-8")
    for tool in tools:
        assert f"{tool}=" not in resolved  # no threshold resolved for a tool step
    assert "generate=" in resolved
    return pd.read_csv(out / "summary.csv").set_index("policy")


def test_the_docs_deadline_policies_run_on_tool_resend(tmp_path: Path) -> None:
    """The docs' policies (`cut`, `orphaned`, `admitted`) as written, on the bundled
    tool-resend.yaml (its `wait` replaced): ended in KeyError: 'book' before."""
    data = _tool_resend()
    data["policies"] = docs_deadline_example()["policies"]
    summary = _run_file(tmp_path, data, "docs-policies")
    assert list(summary.index) == ["cut", "orphaned", "admitted"]
    for name, row in summary.iterrows():
        assert 0.0 <= row["hit_rate_lo"] <= row["hit_rate"] <= row["hit_rate_hi"] <= 1.0, name
        assert row["hit_rate"] > 0.5, name  # about 78% at 200 requests: far from zero
    # the step budgets (0.3 + 0.7 + 4.5 + 1.2 s) end every run's work before its 8 s deadline,
    # so even without propagation nothing is left running: no orphan work, the same hit rate
    assert (summary["orphan_calls"] == 0).all()
    assert summary.loc["orphaned", "hit_rate"] == summary.loc["cut", "hit_rate"]


def test_the_docs_whole_deadline_example_runs_on_tool_resend(tmp_path: Path) -> None:
    """The whole block as written (deadline, first signal, disconnects, its workflow with the
    queue and attempt budgets, its three policies), on tool-resend.yaml's models, providers and
    customer re-sends, which the block leaves out."""
    example = docs_deadline_example()
    data = _tool_resend()
    data["customers"] = {**data["customers"], **example.pop("customers")}
    data.update(example)  # deadline_s, first_signal_s, workflow and policies as the docs say
    summary = _run_file(tmp_path, data, "docs-example", tools=("book",))
    assert list(summary.index) == ["cut", "orphaned", "admitted"]
    for name, row in summary.iterrows():
        assert 0.0 <= row["hit_rate_lo"] <= row["hit_rate"] <= row["hit_rate_hi"] <= 1.0, name
        assert row["hit_rate"] > 0.5, name


def test_a_rag_file_with_percentile_policies_runs_from_the_command_line(tmp_path: Path) -> None:
    """The RAG workflow as a user writes it (ended in KeyError: 'retrieve'): `check`, then
    `run`, exit 0, and no threshold for the retrieve tool step in the resolved file."""
    path = tmp_path / "rag.yaml"
    data = rag_data({k: POLICIES[k] for k in ("cut", "hedge", "per_step")})
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert CliRunner().invoke(main, ["check", str(path)]).exit_code == 0
    out = tmp_path / "out"
    got = CliRunner().invoke(main, ["run", str(path), "--out", str(out), "--no-plot"])
    assert got.exit_code == 0, got.output
    assert "engine: cut=des" in got.output
    resolved = (out / "scenario.resolved.yaml").read_text(encoding="utf-8")
    assert "generate=" in resolved
    assert "retrieve=" not in resolved


def test_tune_searches_the_llm_steps_only(tmp_path: Path) -> None:
    """`tailsim tune` on the RAG workflow (it asked the tool step for a first-token percentile
    and crashed): the tuned specs cover the LLM steps, and the written file runs."""
    source = tmp_path / "rag.yaml"
    source.write_text(yaml.safe_dump(rag_data({"wait": {"kind": "wait"}})), encoding="utf-8")
    outcome = run_tune(source, tmp_path / "tuned.yaml", requests=40)
    assert set(outcome.result.step_specs) == set(LLM_STEPS)
    summary = outcome.comparison.set_index("policy")
    assert set(summary.index) == {"wait", TUNED}
    assert summary["hit_rate"].between(0.0, 1.0).all()
