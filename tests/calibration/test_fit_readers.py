"""Reading call logs for the fit (sim.calibration.log_readers, calllog, otlp): CSV / Parquet /
OTLP JSON, column maps, garbage by kind with row numbers, chunked reading, and `include:`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.calibration import log_readers
from sim.calibration.calllog import CALL_LOG_COLUMNS
from sim.calibration.log_readers import parse_columns, read_call_logs
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario

GOOD = "2024-04-15T08:00:00,p,m,100,20,0.3,1.2,ok"
CSV_HEAD = "timestamp,provider,model,input_tokens,output_tokens,ttft_s,latency_s,status"


def garbage_csv(path: Path) -> Path:
    rows = [
        GOOD,  # 1
        "2024-04-15T08:00:01,p,m,100,20,0.3,-1.0,ok",  # 2 negative latency
        "2024-04-15T08:00:02,p,m,100,20,0.3,,ok",  # 3 missing latency
        "2024-04-15T08:00:03,p,m,100,twenty,0.3,1.1,ok",  # 4 text in numeric column
        "2024-04-15T08:00:04,p,m,100,20,0.3,1.1,exploded",  # 5 unknown status
        GOOD,  # 6
        "2024-04-15T08:00:06,p,m,100,20,0.3,fast,ok",  # 7 text in numeric column
        "2024-04-15T08:00:07,p,m,100,20,2.5,1.1,ok",  # 8 first token after the end
        "2024-04-15T08:00:08,p,m,100,20,0.3,1.3,429",  # 9 rate limited (fine)
    ]
    path.write_text(CSV_HEAD + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_garbage_is_counted_by_kind_with_row_numbers(tmp_path: Path) -> None:
    path = garbage_csv(tmp_path / "log.csv")
    calls, report = read_call_logs([path])
    garbage = report[str(path)]
    assert garbage.rows_read == 9
    assert garbage.counts == {
        "negative latency": 1,
        "missing latency": 1,
        "text in numeric column 'output_tokens'": 1,
        "text in numeric column 'latency_s'": 1,
        "unknown status": 1,
        "first token after the end": 1,
    }
    assert garbage.examples["negative latency"] == [2]
    assert garbage.examples["missing latency"] == [3]
    assert garbage.examples["text in numeric column 'output_tokens'"] == [4]
    assert garbage.examples["unknown status"] == [5]
    assert garbage.examples["text in numeric column 'latency_s'"] == [7]
    assert list(calls["row"]) == [1, 6, 9]
    assert list(calls["status"]) == ["ok", "ok", "rate_limited"]
    assert list(calls.columns) == list(CALL_LOG_COLUMNS)
    assert calls["start_s"].iloc[2] - calls["start_s"].iloc[0] == pytest.approx(8.0)
    assert any("row 2" in line for line in garbage.lines())


def test_end_before_start_is_clock_skew(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    path.write_text("start,end,model\n10.0,12.5,m\n20.0,19.0,m\n30,31,m\n", encoding="utf-8")
    calls, report = read_call_logs([path])
    assert report[str(path)].counts == {"end before start (clock skew)": 1}
    assert report[str(path)].examples["end before start (clock skew)"] == [2]
    assert list(calls["latency_s"]) == [2.5, 1.0]


def test_columns_maps_any_names(tmp_path: Path) -> None:
    path = tmp_path / "odd.csv"
    path.write_text("when,dur_ms_s,who,llm,toks_out\n0,1.5,a,x,10\n1,2.5,a,x,20\n")
    mapping = parse_columns(
        ("latency_s=dur_ms_s", "provider=who", "model=llm", "output_tokens=toks_out")
    )
    calls, _ = read_call_logs([path], mapping)
    assert list(calls["latency_s"]) == [1.5, 2.5]
    assert list(calls["provider"]) == ["a", "a"]
    assert list(calls["output_tokens"]) == [10.0, 20.0]
    with pytest.raises(ScenarioError, match="no column 'nope'"):
        read_call_logs([path], {"latency_s": "nope"})
    with pytest.raises(ScenarioError, match="unknown name"):
        parse_columns(("latency=x",))
    with pytest.raises(ScenarioError, match="NAME=COLUMN"):
        parse_columns(("latency_s",))


def test_a_log_without_latency_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nolat.csv"
    path.write_text("model,tokens\nm,3\n")
    with pytest.raises(ScenarioError, match="no latency column"):
        read_call_logs([path])


def test_parquet_reads_as_csv(tmp_path: Path) -> None:
    csv = garbage_csv(tmp_path / "log.csv")
    frame = pd.read_csv(csv, dtype=str)
    parquet = tmp_path / "log.parquet"
    frame.to_parquet(parquet)
    from_csv, g1 = read_call_logs([csv])
    from_parquet, g2 = read_call_logs([parquet])
    pd.testing.assert_frame_equal(from_csv, from_parquet)
    assert g1[str(csv)].counts == g2[str(parquet)].counts


def test_chunks_keep_row_numbers_and_report_progress(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(log_readers, "CHUNK_ROWS", 3)
    path = tmp_path / "many.csv"
    latency = ["1.0"] * 10
    latency[7] = "-2"  # row 8
    path.write_text("latency_s\n" + "\n".join(latency) + "\n")
    seen: list[tuple[int, int]] = []
    calls, report = read_call_logs(
        [path], progress=lambda s, done, total: seen.append((done, total))
    )
    assert report[str(path)].examples == {"negative latency": [8]}
    assert list(calls["row"]) == [1, 2, 3, 4, 5, 6, 7, 9, 10]
    assert len(seen) == 4
    assert seen[-1][0] == seen[-1][1]


def _attr(key: str, value) -> dict:
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def _span(span_id: str, start: int, end: int, parent: str = "", code: int = 1, **attrs) -> dict:
    return {
        "traceId": "t" + span_id,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": "chat",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "status": {"code": code},
        "attributes": [_attr(k.replace("__", "."), v) for k, v in attrs.items()],
    }


def test_otlp_genai_spans(tmp_path: Path) -> None:
    base = 1_700_000_000_000_000_000
    genai = {
        "gen_ai__system": "openai",
        "gen_ai__request__model": "gpt-4o",
        "gen_ai__usage__input_tokens": 120,
        "gen_ai__usage__output_tokens": 40,
    }
    spans = [
        _span("a", base, base + 1_500_000_000, **genai),
        _span("b", base + 10**9, base + 1_200_000_000, code=2, **genai),
        _span("c", base, base + 100_000_000, **genai, http__response__status_code=429),
        _span("d", base + 10_000_000, base + 1_400_000_000, parent="a", **genai),  # inner view
        _span("e", base, base + 5, name="db"),  # not a GenAI span
        _span("f", base + 9, base + 3, **genai),  # clock skew
    ]
    spans[4]["attributes"] = [_attr("db.system", "postgres")]
    document = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    calls, report = read_call_logs([path])
    assert report[str(path)].examples == {"end before start (clock skew)": [6]}
    assert list(calls["status"]) == ["ok", "error", "rate_limited"]
    assert calls["latency_s"].tolist() == pytest.approx([1.5, 0.2, 0.1])
    assert calls["server_latency_s"].iloc[0] == pytest.approx(1.39)
    assert calls["provider"].iloc[0] == "openai"
    assert calls["model"].iloc[0] == "gpt-4o"
    assert calls["output_tokens"].iloc[0] == 40
    assert calls["input_tokens"].iloc[0] == 120
    assert calls["http_status"].iloc[2] == 429
    lines = tmp_path / "trace.jsonl"
    lines.write_text(json.dumps(document) + "\n" + json.dumps(document) + "\n")
    assert len(read_call_logs([lines])[0]) == 6


def test_include_errors_name_the_key(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ninclude: missing.yaml\n")
    with pytest.raises(ScenarioError, match="include: file not found"):
        load_scenario(scenario)
    scenario.write_text("name: s\ninclude: [1]\n")
    with pytest.raises(ScenarioError, match="expected a file path"):
        load_scenario(scenario)


def test_typed_parquet_columns(tmp_path: Path) -> None:
    """Parquet with real types: datetimes to epoch seconds, integers and floats as numbers."""
    frame = pd.DataFrame(
        {
            "timestamp": [pd.Timestamp("2026-01-01"), pd.Timestamp("2026-01-01 00:00:02.500")],
            "latency_s": [1.25, 2.0],
            "output_tokens": np.array([10, 20], dtype="int64"),
            "http_status": np.array([200, 429], dtype="int32"),
            "provider": ["p", "p"],
        }
    )
    path = tmp_path / "typed.parquet"
    frame.to_parquet(path)
    calls, report = read_call_logs([path])
    assert report[str(path)].total == 0
    assert calls["start_s"].diff().iloc[1] == pytest.approx(2.5)
    assert calls["start_s"].iloc[0] == pytest.approx(pd.Timestamp("2026-01-01").timestamp())
    assert list(calls["status"]) == ["ok", "rate_limited"]
    assert list(calls["output_tokens"]) == [10.0, 20.0]
