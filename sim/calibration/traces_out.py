"""OTLP JSON traces of a scenario's runs: the other half of `tailsim fit --workflow`.

One policy of the scenario runs on the simulator (as `tailsim synth` does) and every run
becomes a trace: a root span for the workflow (name = the scenario's name, from arrival to the
run's end, status error if the run failed) and one child span per call (name = the step id,
GenAI attributes: model, provider, tokens; status error for a call that did not answer validly;
a first-chunk event where the call streamed a first token). A step's calls of one run (its
retries) are sibling spans of the same name in time order. The root carries no `gen_ai.*`
attribute, so `sim.calibration.otlp` reads the children alone as the call log.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from sim.analysis.capacity import ALL
from sim.calibration.synth import STATUS
from sim.plan import Plan
from sim.study.runner import chosen_policies, run

#: OTLP status codes (`Status.code`): 1 = OK, 2 = ERROR.
CODE_OK, CODE_ERROR = 1, 2
#: The chunk event a streamed first token is marked with (one of otlp.CHUNK_EVENTS).
FIRST_CHUNK = "gen_ai.content.chunk"
#: The error.type a client cut (timeout or cancel) is marked with (otlp reads it as timeout).
CUT = "timeout"


def otlp_value(value: Any) -> dict[str, Any]:
    """A Python value as an OTLP JSON AnyValue (a list or tuple as an arrayValue)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [otlp_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attributes(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": otlp_value(v)} for k, v in pairs.items() if v is not None]


def _nanos(seconds: float) -> str:
    """Seconds as OTLP's unix nanoseconds (a decimal string, as the JSON encoding has it)."""
    return str(round(seconds * 1e9))


def trace_id(number: int) -> str:
    """The 32-hex-digit trace id of the run numbered `number` (from 0; never all zeros)."""
    return f"{number + 1:032x}"


def span_id(number: int, index: int) -> str:
    """The 16-hex-digit id of span `index` (0 = the root) of run `number`, unique in the file."""
    return f"{number + 1:010x}{index:06x}"


def synth_traces(
    plan: Plan,
    *,
    requests: int | None = None,
    seed: int | None = None,
    policy: str | None = None,
    epoch_s: float = 0.0,
) -> dict[str, Any]:
    """One policy's runs (default: the scenario's first) as one OTLP JSON document.

    Times are the simulation's seconds plus `epoch_s` (so the spans can sit on a real clock)."""
    name = chosen_policies(plan, [policy] if policy else None, "--policy")[0]
    result = run(plan, requests=requests, seed=seed, policies=[name], records=ALL)
    return runs_to_traces(result.requests, result.calls, plan.name, epoch_s)


def runs_to_traces(
    requests: pd.DataFrame, calls: pd.DataFrame, name: str, epoch_s: float = 0.0
) -> dict[str, Any]:
    """A requests table and its calls table (one policy) as an OTLP JSON document."""
    kept = calls[calls["outcome"].isin(list(STATUS))]
    # a call cancelled before it was sent (no time held) is not a span a client would record
    kept = kept[(kept["outcome"] != "cancelled") | (kept["end_s"] > kept["start_s"])]
    kept = kept.sort_values("start_s", kind="stable")
    resend = kept["resend"] if "resend" in kept else pd.Series(0, index=kept.index)
    by_run = dict(tuple(kept.groupby([kept["request_id"], resend], sort=False)))
    runs = requests.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    spans: list[dict[str, Any]] = []
    for number, row in enumerate(runs.itertuples(index=False)):
        key = (row.request_id, getattr(row, "resend", 0))
        tid, root = trace_id(number), span_id(number, 0)
        ok = bool(row.ok)
        why = row.fail_reason if isinstance(row.fail_reason, str) and row.fail_reason else "failed"
        spans.append(
            {
                "traceId": tid,
                "spanId": root,
                "name": name,
                "kind": 1,
                "startTimeUnixNano": _nanos(epoch_s + float(row.arrival_s)),
                "endTimeUnixNano": _nanos(epoch_s + float(row.end_s)),
                "attributes": _attributes({"tailsim.request_id": str(row.request_id)}),
                "status": {"code": CODE_OK} if ok else {"code": CODE_ERROR, "message": why},
            }
        )
        part = by_run.get(key)
        if part is None:
            continue
        for index, call in enumerate(part.itertuples(index=False), start=1):
            spans.append(_call_span(call, tid, span_id(number, index), root, epoch_s))
    resource = {"attributes": _attributes({"service.name": name})}
    scope = {"scope": {"name": "tailsim.synth"}, "spans": spans}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}


def _call_span(call: Any, tid: str, sid: str, parent: str, epoch_s: float) -> dict[str, Any]:
    """One call as a GenAI client span under the run's root."""
    status = STATUS[call.outcome]
    start = float(call.start_s)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": str(call.provider),
        "gen_ai.request.model": str(call.model),
        "gen_ai.usage.input_tokens": int(call.input_tokens),
        "gen_ai.usage.output_tokens": int(call.output_tokens),
    }
    if status == "rate_limited":
        attrs["http.response.status_code"] = 429
    if status != "ok":
        attrs["error.type"] = CUT if status == "timeout" else status
    span: dict[str, Any] = {
        "traceId": tid,
        "spanId": sid,
        "parentSpanId": parent,
        "name": str(call.step),
        "kind": 3,
        "startTimeUnixNano": _nanos(epoch_s + start),
        "endTimeUnixNano": _nanos(epoch_s + float(call.end_s)),
        "attributes": _attributes(attrs),
        "status": {"code": CODE_OK if status == "ok" else CODE_ERROR},
    }
    queue = 0.0 if pd.isna(call.queue_s) else float(call.queue_s)
    first = start + queue + float(call.ttft_s)
    streamed = status == "ok" or (status == "timeout" and int(call.tokens_streamed or 0) > 0)
    if streamed and math.isfinite(first) and first <= float(call.end_s):
        span["events"] = [{"name": FIRST_CHUNK, "timeUnixNano": _nanos(epoch_s + first)}]
    return span


def write_traces(document: dict[str, Any], path: Path) -> None:
    """The document written whole (a temporary file renamed), as one JSON document."""
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(document, separators=(",", ":")), encoding="utf-8")
    temp.replace(path)


def span_count(document: dict[str, Any]) -> tuple[int, int]:
    """(traces, spans) in a document this module wrote."""
    spans = [s for r in document["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    return len({s["traceId"] for s in spans}), len(spans)
