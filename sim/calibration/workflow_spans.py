"""The spans of workflow traces as one table, checked: what `tailsim fit --workflow` reads.

Reads OTLP JSON (the GenAI conventions `sim.calibration.otlp` reads) or a CSV of spans with the
columns trace_id, span_id, parent_id, name, start, end (s), model, input_tokens, output_tokens,
status (provider and ttft_s optional). A trace is a tree: one root (no parent, the workflow) and
its spans. Traces that cannot be read as such are refused with one line naming the file and
the trace or span: an empty file, a span whose parent is not in its trace, a cycle in parentage,
two roots, a step span without a model.

A step span without a model of its own (a span the application opened around its call, named by
step: `with tracer.start_as_current_span("act")`) takes the call's from the model-carrying span
below it, as an SDK's instrumentation writes it (`chat gpt-4o`, see `lift_calls`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.calibration.calllog import conform, empty_call_log
from sim.calibration.log_readers import STATUS_WORDS
from sim.calibration.otlp import (
    INPUT_KEYS,
    MODEL_KEYS,
    OUTPUT_KEYS,
    PROVIDER_KEYS,
    attribute,
    otlp_spans,
    span_outcome,
)
from sim.model.errors import ScenarioError

#: The span table's columns.
SPAN_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_id",
    "name",
    "start_s",
    "end_s",
    "model",
    "provider",
    "input_tokens",
    "output_tokens",
    "status",
    "ttft_s",
)
#: The CSV's required columns (the rest are optional).
CSV_REQUIRED = ("trace_id", "span_id", "parent_id", "name", "start", "end", "model", "status")


def _refuse(path: Path, message: str) -> ScenarioError:
    return ScenarioError(str(path), [("", message)])


def _otlp_table(path: Path) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for span in otlp_spans(path):
        attrs = span["_attrs"]
        status, ttft = span_outcome(span, attrs)
        start, end = span.get("startTimeUnixNano"), span.get("endTimeUnixNano")
        rows.append(
            {
                "trace_id": span.get("traceId"),
                "span_id": span.get("spanId"),
                "parent_id": span.get("parentSpanId") or None,
                "name": span.get("name"),
                "start_s": int(start) / 1e9 if start is not None else np.nan,
                "end_s": int(end) / 1e9 if end is not None else np.nan,
                "model": attribute(attrs, MODEL_KEYS),
                "provider": attribute(attrs, PROVIDER_KEYS),
                "input_tokens": attribute(attrs, INPUT_KEYS),
                "output_tokens": attribute(attrs, OUTPUT_KEYS),
                "status": status,
                "ttft_s": ttft,
            }
        )
    return pd.DataFrame.from_records(rows, columns=list(SPAN_COLUMNS))


def _csv_table(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype={"trace_id": str, "span_id": str, "parent_id": str})
    except pd.errors.EmptyDataError:
        raise _refuse(path, "no spans (an empty file)") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise _refuse(path, f"cannot be read as CSV: {exc}") from None
    missing = [c for c in CSV_REQUIRED if c not in frame.columns]
    if missing:
        raise _refuse(
            path,
            f"missing column(s) {', '.join(missing)} (a span CSV has {', '.join(CSV_REQUIRED)})",
        )
    words = frame["status"].astype("string").str.strip().str.lower()
    status = words.map(lambda w: STATUS_WORDS.get(w, "error") if isinstance(w, str) else "ok")
    table = pd.DataFrame(
        {
            "trace_id": frame["trace_id"],
            "span_id": frame["span_id"],
            "parent_id": frame["parent_id"].where(frame["parent_id"].notna(), None),
            "name": frame["name"].astype(str),
            "start_s": pd.to_numeric(frame["start"], errors="coerce"),
            "end_s": pd.to_numeric(frame["end"], errors="coerce"),
            "model": frame["model"].where(frame["model"].notna(), None),
            "provider": frame.get("provider", None),
            "input_tokens": frame.get("input_tokens"),
            "output_tokens": frame.get("output_tokens"),
            "status": status,
            "ttft_s": frame.get("ttft_s", np.nan),
        }
    )
    return table[list(SPAN_COLUMNS)]


def read_spans(path: Path) -> pd.DataFrame:
    """The spans of `path` (OTLP JSON, or a CSV by its suffix) as the span table, checked as
    trees (see the module's docstring); refused with one line otherwise."""
    if not path.is_file():
        raise _refuse(path, "file not found")
    if path.stat().st_size == 0:
        raise _refuse(path, "no spans (an empty file)")
    table = _csv_table(path) if path.suffix.lower() == ".csv" else _otlp_table(path)
    if table.empty:
        raise _refuse(path, "no spans (an empty trace export)")
    for name in ("input_tokens", "output_tokens", "ttft_s"):
        table[name] = pd.to_numeric(table[name], errors="coerce").astype("float64")
    parent = table["parent_id"].astype("object")
    table["parent_id"] = parent.where(parent.map(lambda v: isinstance(v, str) and v != ""))
    check_trees(table, path)
    table = lift_calls(table)
    check_models(table, path)
    return table.reset_index(drop=True)


def check_trees(table: pd.DataFrame, path: Path) -> None:
    """Refuse spans that do not form one tree per trace (one line naming trace and span)."""
    for column in ("trace_id", "span_id", "name"):
        if table[column].isna().any():
            row = int(np.flatnonzero(table[column].isna().to_numpy())[0]) + 1
            raise _refuse(path, f"span {row} (in file order) has no {column}")
    bad_time = table["start_s"].isna() | table["end_s"].isna() | (table["end_s"] < table["start_s"])
    if bad_time.any():
        hit = table[bad_time].iloc[0]
        raise _refuse(
            path,
            f"trace {hit.trace_id} span {hit.span_id}: missing start or end, or end before start",
        )
    trees: dict[str, dict[str, str | None]] = {}
    for trace, span, up in zip(
        table["trace_id"].astype(str),
        table["span_id"].astype(str),
        table["parent_id"],
        strict=True,
    ):
        tree = trees.setdefault(trace, {})
        if span in tree:
            raise _refuse(path, f"trace {trace} span {span}: the span id appears twice")
        tree[span] = None if pd.isna(up) else str(up)
    for trace, parent in trees.items():
        for span, up in parent.items():
            if up is not None and up not in parent:
                raise _refuse(
                    path, f"trace {trace} span {span}: its parent {up} is not in the trace"
                )
        depth: dict[str, int] = {}
        for span in parent:
            seen = [span]
            while parent[seen[-1]] is not None and seen[-1] not in depth:
                seen.append(parent[seen[-1]])  # type: ignore[arg-type]
                if seen[-1] in seen[:-1]:
                    loop = " -> ".join(seen[seen.index(seen[-1]) :])
                    raise _refuse(path, f"trace {trace}: a cycle in parentage ({loop})")
            for s in seen:
                depth[s] = 0
        roots = [s for s, up in parent.items() if up is None]
        if len(roots) != 1:
            raise _refuse(
                path, f"trace {trace}: {len(roots)} root spans ({', '.join(roots)}), expected one"
            )


#: The call's columns a step span without a model takes from the call below it.
LIFTED = ("model", "provider", "input_tokens", "output_tokens", "ttft_s")


def lift_calls(table: pd.DataFrame) -> pd.DataFrame:
    """Step spans (right under a root) without a model take the call's columns from the
    last-started model-carrying span below them: an instrumented SDK names its span by the
    operation (`chat gpt-4o`), so the step's name is the application's span around the call.
    The first-token time is counted from the step's start; the status is the step's own if it
    failed, else the call's. Spans with a model, and steps with no call below, are unchanged."""
    keys = list(zip(table["trace_id"].astype(str), table["span_id"].astype(str), strict=True))
    row_of = {key: i for i, key in enumerate(keys)}
    up = [
        row_of.get((t, str(p))) if isinstance(p, str) else None
        for (t, _), p in zip(keys, table["parent_id"], strict=True)
    ]
    is_step = [u is not None and up[u] is None for u in up]
    has_model = table["model"].notna().to_numpy()
    starts = table["start_s"].to_numpy(float)
    chosen: dict[int, int] = {}  # step row -> the row of its last-started call below it
    for row in np.flatnonzero(has_model):
        node = up[row]
        while node is not None and not is_step[node]:
            node = up[node]
        if node is None or has_model[node]:
            continue
        if node not in chosen or starts[row] >= starts[chosen[node]]:
            chosen[node] = int(row)
    if not chosen:
        return table
    table = table.copy()
    steps, calls = list(chosen), list(chosen.values())
    for column in LIFTED:
        table[column] = table[column].astype("object")
        table.iloc[steps, table.columns.get_loc(column)] = table[column].iloc[calls].to_numpy()
        if column not in ("model", "provider"):
            table[column] = pd.to_numeric(table[column], errors="coerce").astype("float64")
    offset = starts[calls] - starts[steps]
    table.iloc[steps, table.columns.get_loc("ttft_s")] = (
        table["ttft_s"].iloc[steps].to_numpy(float) + offset
    )
    own = table["status"].iloc[steps].to_numpy(object)
    call = table["status"].iloc[calls].to_numpy(object)
    table.iloc[steps, table.columns.get_loc("status")] = np.where(own == "ok", call, own)
    return table


def check_models(table: pd.DataFrame, path: Path) -> None:
    """Refuse a step span (right under a root) that has no model, its own or a call's below."""
    roots = set(table.loc[table["parent_id"].isna(), "span_id"].astype(str))
    calls = table[table["parent_id"].isin(roots) & table["model"].isna()]
    if not calls.empty:
        hit = calls.iloc[0]
        raise _refuse(
            path,
            f"trace {hit.trace_id} span {hit.span_id} ({hit['name']}): no model "
            "(gen_ai.request.model, or the CSV's model column)",
        )


def step_spans(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(roots, steps): each trace's root span, and the spans right under a root (the workflow's
    calls, name = step); deeper spans are a call's inner views and take no part in structure."""
    roots = table[table["parent_id"].isna()]
    steps = table[table["parent_id"].isin(set(roots["span_id"]))]
    steps = steps[steps["trace_id"].isin(set(roots["trace_id"]))]
    return roots.reset_index(drop=True), steps.sort_values("start_s", kind="stable")


def spans_to_log(steps: pd.DataFrame) -> pd.DataFrame:
    """The step spans (a CSV's) as the normalized call log `fit` reads (request_id = trace)."""
    if steps.empty:
        return empty_call_log()
    log = pd.DataFrame(
        {
            "row": np.arange(1, len(steps) + 1, dtype="int64"),
            "start_s": steps["start_s"].to_numpy(float),
            "latency_s": (steps["end_s"] - steps["start_s"]).to_numpy(float),
            "ttft_s": steps["ttft_s"].to_numpy(float),
            "provider": steps["provider"].astype("string").fillna("default").to_numpy(),
            "model": steps["model"].astype("string").to_numpy(),
            "input_tokens": steps["input_tokens"].to_numpy(float),
            "output_tokens": steps["output_tokens"].to_numpy(float),
            "status": steps["status"].astype("string").to_numpy(),
            "http_status": pd.array([pd.NA] * len(steps), dtype="Int64"),
            "request_id": steps["trace_id"].astype("string").to_numpy(),
            "server_latency_s": np.full(len(steps), np.nan),
        }
    )
    return conform(log)
