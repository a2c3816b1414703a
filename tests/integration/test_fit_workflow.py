"""`tailsim synth --traces` and `tailsim fit --workflow`: the traces' shape, the structure read
back from a chain and a fan-out (as data, and a scenario `tailsim check` accepts), loops,
branches and fan-outs from hand-written spans of known laws, and bad traces refused in one line
with exit 2 and nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from sim import api
from sim.cli import main
from tests.calibration.test_fit_extras import small_scenario


def chain(**extra: Any) -> dict[str, Any]:
    """The three-step chain (s0 -> s1 -> s2) with 5% errors, 2 retries and a 25 s deadline."""
    scenario = small_scenario(deadline_s=25.0, **extra)
    scenario["providers"]["p"]["serves"]["m"]["error_rate"] = 0.05
    scenario["policies"] = {"wait": {"kind": "wait", "retries": 2}}
    return scenario


def fan_out(**extra: Any) -> dict[str, Any]:
    """s0, then a and b in parallel, then join after both."""
    scenario = chain(**extra)
    steps = scenario["workflow"]["steps"]
    steps[1]["id"], steps[2]["id"], steps[2]["after"] = "a", "b", ["s0"]
    steps[2]["output_tokens"] = 150
    steps.append(
        {"id": "join", "model": "m", "input_tokens": 500, "output_tokens": 100, "after": ["a", "b"]}
    )
    return scenario


def spans_of(path: Path) -> list[dict[str, Any]]:
    document = json.loads(path.read_text())
    return [s for r in document["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]


def test_synth_traces_writes_a_root_per_run_and_a_span_per_call(tmp_path: Path) -> None:
    """Per run one root (the scenario's name, arrival to end, error if the run failed) and one
    child per call under it, named by step, with the GenAI attributes; ids unique; otlp.py
    reads the children as the same calls the call log has."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(chain()))
    traces, log = tmp_path / "t.json", tmp_path / "c.csv"
    result = CliRunner().invoke(
        main, ["synth", str(scenario), "--traces", str(traces), "--out", str(log), "-n", "200"]
    )
    assert result.exit_code == 0, result.output
    spans = spans_of(traces)
    roots = [s for s in spans if "parentSpanId" not in s]
    assert len(roots) == 200 == len({s["traceId"] for s in spans})
    assert len({s["spanId"] for s in spans}) == len(spans)
    assert {s["name"] for s in roots} == {"fit-extras"}
    calls = [s for s in spans if "parentSpanId" in s]
    assert {s["name"] for s in calls} == {"s0", "s1", "s2"}
    ids = {s["spanId"]: s["traceId"] for s in roots}
    assert all(ids[s["parentSpanId"]] == s["traceId"] for s in calls)
    keys = {a["key"] for a in calls[0]["attributes"]}
    assert {"gen_ai.request.model", "gen_ai.system", "gen_ai.usage.input_tokens"} <= keys
    assert any(s["status"]["code"] == 2 for s in calls)  # some calls failed (5% errors)
    assert any(s["status"]["code"] == 2 for s in roots)  # and some runs (the 25 s deadline)
    ok_calls = [s for s in calls if s["status"]["code"] == 1]
    assert all(s["events"][0]["name"] == "gen_ai.content.chunk" for s in ok_calls)
    fitted = api.fit([traces], extras=False, progress=False)
    assert int(fitted.table["n"].sum()) == len(pd.read_csv(log))  # the same calls
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for span in calls:
        by_trace.setdefault(span["traceId"], []).append(span)
    for group in by_trace.values():  # a step's retries: siblings of one name in time order
        starts = [int(s["startTimeUnixNano"]) for s in group]
        assert starts == sorted(starts)


@pytest.mark.parametrize("shape", ["chain", "fan_out"])
def test_fit_workflow_reads_back_the_steps_after_models_and_sizes(
    tmp_path: Path, shape: str
) -> None:
    """The chain and the fan-out come back with their steps, `after`, models and token sizes,
    the policy's retries (2; seen at 5% errors over 400 runs: P(two in a row somewhere) ~ 0.9,
    at this seed seen), the 25 s deadline, and a scenario `tailsim check` accepts."""
    original = chain(requests=400) if shape == "chain" else fan_out(requests=400)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(original))
    traces = tmp_path / "t.json"
    api.synth(scenario, traces=traces)
    out = tmp_path / "inferred.yaml"
    result = CliRunner().invoke(main, ["fit", "--workflow", str(traces), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "400 traces read" in result.output
    inferred = yaml.safe_load(out.read_text())
    want = {s["id"]: s for s in original["workflow"]["steps"]}
    got = {s["id"]: s for s in inferred["workflow"]["steps"]}
    assert set(got) == set(want)
    for name, step in want.items():
        assert sorted(got[name].get("after", [])) == sorted(step.get("after", []))
        assert got[name]["model"] == "m"
        assert got[name]["input_tokens"] == step["input_tokens"]
        assert got[name]["output_tokens"] == step["output_tokens"]
        assert not {"loop", "when", "map"} & set(got[name])
    assert inferred["deadline_s"] == pytest.approx(25.0)
    assert inferred["policies"] == {"traced": {"kind": "wait", "retries": 2}}
    assert inferred["arrivals"]["kind"] == "trace"
    arrivals = pd.read_csv(tmp_path / inferred["arrivals"]["file"])
    assert len(arrivals) == 400
    assert arrivals["TIMESTAMP"].iloc[0] == 0
    report = json.loads((tmp_path / "inferred.workflow.json").read_text())
    assert report["traces"] == 400
    assert report["ambiguous"] == []
    assert (tmp_path / "inferred.workflow.md").read_text().startswith("# Workflow inferred")
    checked = CliRunner().invoke(main, ["check", str(out)])
    assert checked.exit_code == 0, checked.output


LOOP_LAW = {1: 0.5, 2: 0.3, 3: 0.2}
MAP_LAW = {2: 0.5, 4: 0.5}
CHECK_PRESENT = 0.7
TIMEOUT_S = 5.0


def span(trace: int, index: int, name: str, start: float, end: float, **kw: Any) -> dict:
    """One OTLP span (index 0: the root, with no parent and no model)."""
    attrs = [] if index == 0 else [
        {"key": "gen_ai.request.model", "value": {"stringValue": kw.get("model", "m")}},
        {"key": "gen_ai.system", "value": {"stringValue": "p"}},
        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": str(kw.get("inp", 800))}},
        {"key": "gen_ai.usage.output_tokens", "value": {"intValue": str(kw.get("out", 200))}},
    ]  # fmt: skip
    if kw.get("timeout"):
        attrs.append({"key": "error.type", "value": {"stringValue": "timeout"}})
    out: dict[str, Any] = {
        "traceId": f"{trace + 1:032x}",
        "spanId": f"{trace + 1:08x}{index:08x}",
        "name": name,
        "startTimeUnixNano": str(round(start * 1e9)),
        "endTimeUnixNano": str(round(end * 1e9)),
        "attributes": attrs,
        "status": {"code": 2 if kw.get("timeout") else 1},
    }
    if index:
        out["parentSpanId"] = f"{trace + 1:08x}{0:08x}"
    return out


def agent_traces(n: int, seed: int) -> list[dict[str, Any]]:
    """Traces of plan -> read x K (parallel) -> act x N (in sequence; 10% of calls time out at
    5 s and are retried) -> check (in 70% of runs) -> answer, with known laws of K and N."""
    rng = np.random.default_rng(seed)
    spans: list[dict[str, Any]] = []
    t0 = 0.0
    for trace in range(n):
        t0 += rng.exponential(2.0)
        out: list[dict[str, Any]] = []
        t = t0

        def call(
            name: str,
            start: float,
            timeout: bool = False,
            into: list = out,
            number: int = trace,
            **kw: Any,
        ) -> float:
            end = start + (TIMEOUT_S if timeout else rng.lognormal(0.0, 0.3))
            into.append(span(number, len(into) + 1, name, start, end, timeout=timeout, **kw))
            return end

        t = call("plan", t)
        copies = rng.choice(list(MAP_LAW), p=list(MAP_LAW.values()))
        t = max(call("read", t, out=50) for _ in range(copies))
        for _ in range(rng.choice(list(LOOP_LAW), p=list(LOOP_LAW.values()))):
            while rng.random() < 0.1:
                t = call("act", t, timeout=True)
            t = call("act", t, inp=2000)
        if rng.random() < CHECK_PRESENT:
            t = call("check", t, model="small")
        t = call("answer", t)
        spans.append(span(trace, 0, "agent", t0, t))
        spans.extend(out)
    return spans


def otlp(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}


def test_loops_branches_and_fan_outs_from_hand_written_traces(tmp_path: Path) -> None:
    """1,000 traces of known laws: the loop's and the map's empirical count laws each share
    within 3 SE (sqrt(w(1-w)/1000) <= 0.016) of the law; the branch's probability within 3 SE
    (sqrt(0.21/reached) ~ 0.014); the order with check optional; retries and the 5 s timeout
    read from the timed-out spans. The keys are written in the agreed format (not run: the
    engine's loop/when/map keys are another branch's)."""
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(otlp(agent_traces(1000, seed=5))))
    fitted = api.fit_workflow(path, tmp_path / "agent.yaml", extras=False)
    steps = {s["id"]: s for s in yaml.safe_load((tmp_path / "agent.yaml").read_text())[
        "workflow"]["steps"]}  # fmt: skip
    assert list(steps) == ["plan", "read", "act", "check", "answer"]
    assert [steps[n].get("after") for n in steps] == [None, ["plan"], ["read"], ["act"], ["check"]]
    assert steps["check"]["model"] == "small"
    assert steps["act"]["input_tokens"] == 2000
    loop = steps["act"]["loop"]["count"]
    assert loop["dist"] == "empirical"
    assert loop["values"] == [1, 2, 3]
    for value, weight in zip(loop["values"], loop["weights"], strict=True):
        assert weight == pytest.approx(LOOP_LAW[value], abs=3 * math.sqrt(0.25 / 1000))
    read = steps["read"]["map"]
    assert read["join"] == "all"
    assert read["count"]["values"] == [2, 4]
    assert read["count"]["weights"][0] == pytest.approx(0.5, abs=3 * math.sqrt(0.25 / 1000))
    reached = next(s for s in fitted.report["steps"] if s["id"] == "check")["traces_reached"]
    assert reached == 1000
    se = math.sqrt(CHECK_PRESENT * (1 - CHECK_PRESENT) / reached)
    assert steps["check"]["when"]["probability"] == pytest.approx(CHECK_PRESENT, abs=3 * se)
    for name in ("plan", "answer"):
        assert not {"loop", "when", "map"} & set(steps[name])
    policy = fitted.report["policy"]
    assert policy["kind"] == "wait"
    assert policy["timeout_s"] == TIMEOUT_S
    assert policy["retries"] >= 2  # P(a second timeout in a row) = 1%, over ~1,700 act calls


def write(path: Path, spans: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(otlp(spans)))
    return path


def bad_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each bad trace file and the words its one-line error must hold."""
    good = agent_traces(3, seed=1)
    missing = [dict(s) for s in good]
    missing[1]["parentSpanId"] = "ffffffffffffffff"
    cycle = [dict(s) for s in good if s["traceId"] != good[0]["traceId"]]
    a, b = dict(good[1]), dict(good[2])
    a["parentSpanId"], b["parentSpanId"] = b["spanId"], a["spanId"]
    cycle += [a, b, good[0]]
    no_model = [dict(s) for s in good]
    no_model[2]["attributes"] = []
    empty = tmp_path / "empty.json"
    empty.write_text("")
    csv = tmp_path / "spans.csv"
    pd.DataFrame(
        {"trace_id": ["t", "t"], "span_id": ["r", "c"], "parent_id": [None, "x"],
         "name": ["w", "s"], "start": [0, 0], "end": [1, 1], "model": [None, "m"],
         "status": ["ok", "ok"]}
    ).to_csv(csv, index=False)  # fmt: skip
    return {
        "empty": (empty, "no spans"),
        "missing": (write(tmp_path / "missing.json", missing), "ffffffffffffffff is not in"),
        "cycle": (write(tmp_path / "cycle.json", cycle), "a cycle in parentage"),
        "no_model": (write(tmp_path / "nomodel.json", no_model), "no model"),
        "csv_missing": (csv, "its parent x is not in the trace"),
        "empty_export": (write(tmp_path / "none.json", []), "no spans"),
        "too_few": (write(tmp_path / "few.json", good), "fewer than 20"),
    }


@pytest.mark.parametrize(
    "case", ["empty", "missing", "cycle", "no_model", "csv_missing", "empty_export", "too_few"]
)
def test_bad_traces_exit_2_in_one_line_and_write_nothing(tmp_path: Path, case: str) -> None:
    """Each bad file: exit 2, one error line naming the file (and the trace or span), no
    traceback, and nothing written beside the inputs."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    path, words = bad_cases(inputs)[case]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    result = CliRunner().invoke(
        main, ["fit", "--workflow", str(path), "--out", str(out_dir / "s.yaml")]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert str(path) in lines[0]
    assert words in lines[0]
    assert "Traceback" not in result.output
    assert list(out_dir.iterdir()) == []


def test_fit_workflow_reads_a_span_csv_and_refuses_mixed_arguments(tmp_path: Path) -> None:
    """The CSV form (trace_id, span_id, parent_id, name, start, end, model, tokens, status) gives
    the structure the OTLP form gives; TRACES beside --workflow, or neither, exit 2."""
    rows = []
    for s in agent_traces(300, seed=2):
        attrs = {a["key"]: next(iter(a["value"].values())) for a in s["attributes"]}
        rows.append(
            {
                "trace_id": s["traceId"], "span_id": s["spanId"],
                "parent_id": s.get("parentSpanId"), "name": s["name"],
                "start": int(s["startTimeUnixNano"]) / 1e9,
                "end": int(s["endTimeUnixNano"]) / 1e9,
                "model": attrs.get("gen_ai.request.model"),
                "provider": attrs.get("gen_ai.system"),
                "input_tokens": attrs.get("gen_ai.usage.input_tokens"),
                "output_tokens": attrs.get("gen_ai.usage.output_tokens"),
                "status": "timeout" if s["status"]["code"] == 2 else "ok",
            }
        )  # fmt: skip
    csv = tmp_path / "spans.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    fitted = api.fit_workflow(csv)
    assert fitted.written == []
    steps = [s["id"] for s in fitted.report["steps"]]
    assert steps == ["plan", "read", "act", "check", "answer"]
    assert "loop:" in fitted.scenario
    assert "when:" in fitted.scenario
    both = CliRunner().invoke(main, ["fit", str(csv), "--workflow", str(csv)])
    assert both.exit_code == 2
    neither = CliRunner().invoke(main, ["fit"])
    assert neither.exit_code == 2


def test_an_order_seen_in_80_percent_of_traces_is_reported_ambiguous(tmp_path: Path) -> None:
    """B starts after A ends in 80 of 100 traces and overlaps it in 20: not `after` (that needs
    95%), and the report names the share."""
    spans = []
    for trace in range(100):
        t0 = 10.0 * trace
        b_start = t0 + (1.5 if trace % 5 else 0.5)
        spans += [
            span(trace, 0, "w", t0, t0 + 3.0),
            span(trace, 1, "A", t0, t0 + 1.0),
            span(trace, 2, "B", b_start, b_start + 1.0),
        ]
    fitted = api.fit_workflow(write(tmp_path / "t.json", spans), extras=False)
    assert fitted.report["ambiguous"] == ["B after A in 80% of 100 traces (taken as parallel)"]
    assert [s["after"] for s in fitted.report["steps"]] == [[], []]
