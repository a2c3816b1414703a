"""The span reader's step spans around instrumented calls (`lift_calls`): a step span without a
model takes the last-started call's model, provider, tokens, first-token time and status below
it; spans deeper than the steps need no model; a step with no call below is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.calibration.workflow_spans import read_spans, step_spans
from sim.model.errors import ScenarioError

TRACE = "0" * 31 + "1"


def _span(sid: int, parent: int | None, name: str, start: float, end: float, **kw: Any) -> dict:
    """One OTLP span of the trace; `model` etc. given: a GenAI call span."""
    attrs = []
    if "model" in kw:
        attrs = [
            {"key": "gen_ai.request.model", "value": {"stringValue": kw["model"]}},
            {"key": "gen_ai.system", "value": {"stringValue": "openai"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": str(kw["inp"])}},
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": str(kw["out"])}},
        ]
    if "ttft" in kw:
        attrs.append(
            {"key": "gen_ai.response.time_to_first_chunk", "value": {"doubleValue": kw["ttft"]}}
        )
    out = {
        "traceId": TRACE,
        "spanId": f"{sid:016x}",
        "name": name,
        "startTimeUnixNano": str(round(start * 1e9)),
        "endTimeUnixNano": str(round(end * 1e9)),
        "attributes": attrs,
        "status": {"code": 2 if kw.get("failed") else 0},
    }
    if parent is not None:
        out["parentSpanId"] = f"{parent:016x}"
    return out


def _write(path: Path, spans: list[dict]) -> Path:
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    return path


def test_a_step_span_takes_the_last_call_below_it(tmp_path: Path) -> None:
    """plan wraps a failed call then an ok one (the ok one's columns win, status ok); act wraps
    one call with an HTTP span under it (no model: ignored) and fails itself (status error,
    tokens the call's); first-token times count from the step's start."""
    spans = [
        _span(1, None, "workflow", 0.0, 10.0),
        _span(2, 1, "plan", 0.0, 3.0),
        _span(3, 2, "chat a", 0.1, 1.0, model="a", inp=5, out=6, failed=True),
        _span(4, 2, "chat b", 1.5, 3.0, model="b", inp=7, out=8, ttft=0.5),
        _span(5, 1, "act", 3.0, 9.0, failed=True),
        _span(6, 5, "chat c", 3.5, 9.0, model="c", inp=9, out=10),
        _span(7, 6, "POST /v1/chat/completions", 3.6, 8.9),
    ]
    _, steps = step_spans(read_spans(_write(tmp_path / "t.json", spans)))
    got = steps.set_index("name")
    assert list(got.index) == ["plan", "act"]
    assert got.loc["plan", ["model", "provider", "status"]].tolist() == ["b", "openai", "ok"]
    assert got.loc["plan", ["input_tokens", "output_tokens"]].tolist() == [7.0, 8.0]
    assert got.loc["plan", "ttft_s"] == pytest.approx(2.0)  # 1.5 s in, then 0.5 s
    assert got.loc["act", ["model", "status", "output_tokens"]].tolist() == ["c", "error", 10.0]


def test_a_step_span_with_no_call_below_is_refused(tmp_path: Path) -> None:
    """A step span with neither a model nor a call below it: one line naming it."""
    spans = [_span(1, None, "workflow", 0.0, 2.0), _span(2, 1, "plan", 0.0, 1.0)]
    with pytest.raises(ScenarioError, match="no model"):
        read_spans(_write(tmp_path / "t.json", spans))
