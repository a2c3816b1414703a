"""OpenTelemetry spans (OTLP JSON, GenAI semantic conventions) as the normalized call log.

A call is a span carrying `gen_ai.*` attributes: model `gen_ai.request.model` (else
`gen_ai.response.model`), provider `gen_ai.system` / `gen_ai.provider.name` (else
`server.address`), tokens `gen_ai.usage.input_tokens` / `output_tokens`, start and end in unix
nanoseconds, status code 2 = error (HTTP 429 = rate limited). A GenAI span whose parent is also
one is the provider's inner view of its parent: its duration becomes the parent's
`server_latency_s` (the client's overhead is the difference). Reads one JSON document
(`{"resourceSpans": [...]}`) or JSON lines of them, as the OTLP file exporter writes.

Streams: the first-token time is the attribute `gen_ai.response.time_to_first_chunk` (the GenAI
conventions' name, beside the older `time_to_first_token` keys) where set, else the time of the
span's first chunk event (`CHUNK_EVENTS`: `llm.content.completion.chunk`, one per chunk, as
OpenLLMetry's openai instrumentation adds it in `ChatStream._process_item`; `gen_ai.content.chunk`;
`ai.stream.firstChunk` of the Vercel AI SDK) from the span's start. The conventions' own
`gen_ai.content.completion` / `gen_ai.choice` events carry the whole answer at the end, so they
time nothing. A span that failed after a chunk arrived is a broken stream (status `broken`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.calibration.calllog import Garbage, conform, empty_call_log
from sim.model.errors import ScenarioError

MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model")
PROVIDER_KEYS = ("gen_ai.system", "gen_ai.provider.name", "server.address")
INPUT_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
TTFT_KEYS = (
    "gen_ai.response.time_to_first_token",
    "gen_ai.server.time_to_first_token",
    "gen_ai.response.time_to_first_chunk",
)
#: Span events that mark a chunk of a streamed answer arriving (see the module's docstring).
CHUNK_EVENTS = ("llm.content.completion.chunk", "gen_ai.content.chunk", "ai.stream.firstChunk")
HTTP_KEYS = ("http.response.status_code", "http.status_code")
STATUS_ERROR = 2


def _value(node: Any) -> Any:
    """An OTLP AnyValue (`{"stringValue": ..}`, `{"intValue": "12"}`, ...) as Python."""
    if not isinstance(node, dict):
        return node
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in node:
            return node[key]
    if "intValue" in node:
        try:
            return int(node["intValue"])
        except (TypeError, ValueError):
            return node["intValue"]
    return None


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    found = {}
    for item in span.get("attributes") or []:
        if isinstance(item, dict) and "key" in item:
            found[item["key"]] = _value(item.get("value"))
    return found


def _first(attrs: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if attrs.get(key) not in (None, ""):
            return attrs[key]
    return None


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ScenarioError(
                    str(path), [(f"line {number}", f"not OTLP JSON: {exc.msg}")]
                ) from None
        return
    yield from document if isinstance(document, list) else [document]


def _spans(path: Path) -> Iterator[dict[str, Any]]:
    for document in _documents(path):
        if not isinstance(document, dict) or "resourceSpans" not in document:
            raise ScenarioError(str(path), [("resourceSpans", "missing: not an OTLP trace export")])
        for resource in document["resourceSpans"] or []:
            resource_attrs = _attributes(resource.get("resource") or {})
            for scope in (
                resource.get("scopeSpans") or resource.get("instrumentationLibrarySpans") or []
            ):
                for span in scope.get("spans") or []:
                    yield {**span, "_resource": resource_attrs}


def _nanos(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _first_chunk(span: dict[str, Any]) -> int | None:
    """The time (unix ns) of the span's first chunk event, None where it has none."""
    times = [
        _nanos(event.get("timeUnixNano"))
        for event in span.get("events") or []
        if isinstance(event, dict) and event.get("name") in CHUNK_EVENTS
    ]
    known = [t for t in times if t is not None]
    return min(known) if known else None


def span_outcome(span: dict[str, Any], attrs: dict[str, Any]) -> tuple[str, Any]:
    """A GenAI span's status (the call log's words) and its first-token time, s (None if the
    span has none): status code 2 = error, HTTP 429 = rate limited, `error.type` timeout =
    timeout, an error after a chunk arrived = broken."""
    start = _nanos(span.get("startTimeUnixNano"))
    code = (span.get("status") or {}).get("code")
    http = _first(attrs, HTTP_KEYS)
    status = "error" if code in (STATUS_ERROR, "STATUS_CODE_ERROR") else "ok"
    if http is not None and str(http) == "429":
        status = "rate_limited"
    elif attrs.get("error.type") in ("timeout", "TimeoutError"):
        status = "timeout"
    elif attrs.get("error.type") not in (None, ""):
        status = "error"
    ttft = _first(attrs, TTFT_KEYS)
    chunk = _first_chunk(span)
    if ttft is None and chunk is not None and start is not None:
        ttft = (chunk - start) / 1e9
    if status == "error" and chunk is not None:
        status = "broken"
    return status, ttft


def otlp_spans(path: Path) -> list[dict[str, Any]]:
    """Every span of an OTLP JSON export, each with its own and its resource's attributes
    merged under `_attrs` (unreadable file or JSON: a ScenarioError naming the file)."""
    try:
        spans = list(_spans(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(path), [("", f"cannot be read: {exc}")]) from None
    return [{**s, "_attrs": {**s["_resource"], **_attributes(s)}} for s in spans]


def attribute(attrs: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The first of `keys` set (not None or empty) in `attrs`, None if none is."""
    return _first(attrs, keys)


def read_otlp_log(
    path: Path, garbage: Garbage, progress: Callable[[int, int], None] | None = None
) -> pd.DataFrame:
    """The GenAI spans of an OTLP JSON export as the normalized call log (garbage skipped)."""
    try:
        spans = list(_spans(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(path), [("", f"cannot be read: {exc}")]) from None
    records: list[dict[str, Any]] = []
    inner: dict[str, float] = {}  # parent span id -> duration of its GenAI child, s
    ids: set[str] = set()
    for number, span in enumerate(spans, start=1):
        attrs = {**span["_resource"], **_attributes(span)}
        if not any(key.startswith("gen_ai.") for key in attrs):
            continue
        start, end = _nanos(span.get("startTimeUnixNano")), _nanos(span.get("endTimeUnixNano"))
        http = _first(attrs, HTTP_KEYS)
        status, ttft = span_outcome(span, attrs)
        records.append(
            {
                "row": number,
                "span": span.get("spanId"),
                "parent": span.get("parentSpanId") or None,
                "duration_s": (end - start) / 1e9
                if start is not None and end is not None
                else float("nan"),
                "start_s": start / 1e9 if start is not None else float("nan"),
                "ttft_s": ttft,
                "provider": _first(attrs, PROVIDER_KEYS),
                "model": _first(attrs, MODEL_KEYS),
                "input_tokens": _first(attrs, INPUT_KEYS),
                "output_tokens": _first(attrs, OUTPUT_KEYS),
                "status": status,
                "http_status": http,
                "request_id": span.get("traceId"),
            }
        )
        if span.get("spanId"):
            ids.add(span["spanId"])
    garbage.rows_read += len(spans)
    if progress is not None:
        progress(len(spans), max(1, len(spans)))
    if not records:
        return empty_call_log()
    frame = pd.DataFrame.from_records(records)
    duration = frame["duration_s"].astype("float64")
    nested = frame["parent"].isin(ids).to_numpy()
    for parent, seconds in zip(frame.loc[nested, "parent"], duration[nested], strict=True):
        inner[parent] = seconds
    frame = frame[~nested].reset_index(drop=True)
    duration = duration[~nested].reset_index(drop=True)
    frame["server_latency_s"] = frame["span"].map(inner).astype("float64")
    rows = frame["row"].to_numpy()
    keep = np.ones(len(frame), dtype=bool)
    for kind, mask in (
        ("missing start or end time", duration.isna().to_numpy()),
        ("end before start (clock skew)", (duration < 0).to_numpy()),
    ):
        hit = mask & keep
        garbage.add(kind, rows[hit])
        keep &= ~hit
    for name in ("ttft_s", "input_tokens", "output_tokens", "http_status"):
        numbers = pd.to_numeric(frame[name], errors="coerce")
        text = numbers.isna() & frame[name].notna()
        hit = text.to_numpy() & keep
        garbage.add(f"text in numeric attribute '{name}'", rows[hit])
        keep &= ~hit
        frame[name] = numbers.astype("float64")
    frame["latency_s"] = duration
    frame["http_status"] = frame["http_status"].round().astype("Int64")
    return conform(frame[keep])
