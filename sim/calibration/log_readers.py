"""Reading call logs (CSV, Parquet; OTLP JSON via `sim.calibration.otlp`) into the normalized log.

Files are read in chunks (a 1 GB file never sits in memory as text), columns are found by their
usual names or mapped with `--columns NAME=COLUMN`, and rows that cannot be a call (negative or
missing latency, text in a numeric column, an unknown status, an end before its start) are
counted by kind with example row numbers and skipped, or rejected under `strict`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from sim.calibration.calllog import STATUSES, Garbage, conform, empty_call_log
from sim.calibration.otlp import read_otlp_log
from sim.model.errors import ScenarioError

#: Rows per chunk read from a CSV or Parquet file.
CHUNK_ROWS = 200_000

#: Schema column (or `end_s`) -> the column names it is found under when not mapped.
ALIASES: dict[str, tuple[str, ...]] = {
    "start_s": ("start_s", "timestamp", "start", "start_time", "time", "created_at"),
    "end_s": ("end_s", "end", "end_time", "finished_at"),
    "latency_s": ("latency_s", "latency", "duration_s", "total_s", "elapsed_s"),
    "ttft_s": ("ttft_s", "ttft", "first_token_s", "time_to_first_token_s"),
    "provider": ("provider", "server_address", "gen_ai_system", "vendor"),
    "model": ("model", "model_name", "request_model"),
    "input_tokens": ("input_tokens", "prompt_tokens"),
    "output_tokens": ("output_tokens", "completion_tokens"),
    "status": ("status", "outcome"),
    "http_status": ("http_status", "status_code", "http_code"),
    "request_id": ("request_id", "run_id", "trace_id", "workflow_id"),
    "server_latency_s": ("server_latency_s", "server_s", "processing_s"),
}
MAPPABLE = tuple(ALIASES)
NUMERIC = (
    "start_s",
    "end_s",
    "latency_s",
    "ttft_s",
    "input_tokens",
    "output_tokens",
    "http_status",
    "server_latency_s",
)
#: Status words seen in logs -> the schema's status.
STATUS_WORDS: dict[str, str] = {
    **{s: s for s in STATUSES},
    "success": "ok",
    "succeeded": "ok",
    "completed": "ok",
    "200": "ok",
    "fail": "error",
    "failed": "error",
    "failure": "error",
    "rate_limit": "rate_limited",
    "ratelimited": "rate_limited",
    "throttled": "rate_limited",
    "429": "rate_limited",
    "junk": "invalid",
    "timed_out": "timeout",
    "cancelled": "timeout",
    "stream_error": "broken",
    "stream_broken": "broken",
    "mid_stream_error": "broken",
    "midstream_error": "broken",
    "incomplete": "broken",
}


def parse_columns(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`NAME=COLUMN` pairs -> {NAME: COLUMN}; NAME must be a schema column (or end_s)."""
    mapping: dict[str, str] = {}
    for pair in pairs:
        name, sep, column = pair.partition("=")
        name, column = name.strip(), column.strip()
        if not sep or not name or not column:
            raise ScenarioError("--columns", [(pair, "expected NAME=COLUMN, e.g. latency_s=dur")])
        if name not in ALIASES:
            raise ScenarioError(
                "--columns", [(name, f"unknown name (allowed: {', '.join(MAPPABLE)})")]
            )
        mapping[name] = column
    return mapping


def resolve_columns(
    available: list[str], mapping: Mapping[str, str], source: str
) -> dict[str, str]:
    """Schema column -> source column: the `mapping` first, else the first alias present."""
    lower = {c.lower(): c for c in available}
    found: dict[str, str] = {}
    for name, aliases in ALIASES.items():
        if name in mapping:
            if mapping[name] not in available:
                raise ScenarioError(
                    source,
                    [
                        (
                            f"--columns {name}",
                            f"no column '{mapping[name]}' in the file "
                            f"(it has: {', '.join(available)})",
                        )
                    ],
                )
            found[name] = mapping[name]
            continue
        for alias in aliases:
            if alias in lower:
                found[name] = lower[alias]
                break
    if "latency_s" not in found and not {"start_s", "end_s"} <= set(found):
        raise ScenarioError(
            source,
            [
                (
                    "latency_s",
                    "no latency column: name one with --columns latency_s=COLUMN (or "
                    f"give start_s and end_s); the file has: {', '.join(available)}",
                )
            ],
        )
    return found


def _numbers(values: pd.Series, name: str) -> tuple[pd.Series, pd.Series]:
    """(numbers, text mask): a column as float64 (timestamps to epoch seconds) and the rows
    holding text that is not a number."""
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return values.astype("float64"), pd.Series(False, index=values.index)
    if pd.api.types.is_datetime64_any_dtype(values):
        if values.dt.tz is not None:
            values = values.dt.tz_convert(None)
        seconds = (values - pd.Timestamp(0)).dt.total_seconds()  # any unit (s, ms, us, ns)
        return seconds.astype("float64"), pd.Series(False, index=values.index)
    text = values.astype("string").str.strip()
    numbers = pd.to_numeric(text, errors="coerce")
    if name in ("start_s", "end_s"):
        dates = pd.to_datetime(text.where(numbers.isna()), errors="coerce", format="mixed")
        if dates.dt.tz is not None:
            dates = dates.dt.tz_convert(None)
        as_seconds = (dates - pd.Timestamp(0)).dt.total_seconds()
        numbers = numbers.where(numbers.notna(), as_seconds)
    bad = numbers.isna() & text.notna() & (text != "")
    return numbers.astype("float64"), bad.fillna(False).astype(bool)


def normalize_chunk(
    chunk: pd.DataFrame, columns: Mapping[str, str], first_row: int, garbage: Garbage
) -> pd.DataFrame:
    """One chunk of source rows -> normalized calls, garbage counted and dropped."""
    n = len(chunk)
    rows = np.arange(first_row, first_row + n, dtype=np.int64)
    out = empty_call_log(n)
    out["row"] = rows
    keep = np.ones(n, dtype=bool)

    def drop(kind: str, mask: np.ndarray) -> None:
        nonlocal keep
        hit = mask & keep
        garbage.add(kind, rows[hit])
        keep &= ~hit

    numbers: dict[str, pd.Series] = {}
    for name in NUMERIC:
        if name in columns:
            values, text = _numbers(chunk[columns[name]].reset_index(drop=True), name)
            drop(f"text in numeric column '{columns[name]}'", text.to_numpy())
            numbers[name] = values
    latency = numbers.get("latency_s")
    if "start_s" in numbers and "end_s" in numbers:
        span = numbers["end_s"] - numbers["start_s"]
        drop("end before start (clock skew)", (span < 0).to_numpy())
        latency = span if latency is None else latency.where(latency.notna(), span)
    assert latency is not None  # resolve_columns guarantees a latency or a start and an end
    drop("missing latency", latency.isna().to_numpy())
    drop("negative latency", (latency < 0).to_numpy())
    out["latency_s"] = latency.to_numpy()
    for name in ("start_s", "ttft_s", "input_tokens", "output_tokens", "server_latency_s"):
        if name in numbers:
            out[name] = numbers[name].to_numpy()
    if "ttft_s" in numbers:
        ttft = numbers["ttft_s"]
        drop("negative first-token time", (ttft < 0).to_numpy())
        drop("first token after the end", (ttft > latency * (1 + 1e-9) + 1e-9).to_numpy())
    for name in ("input_tokens", "output_tokens"):
        if name in numbers:
            drop(f"negative {name}", (numbers[name] < 0).to_numpy())
    http = numbers.get("http_status")
    if http is not None:
        drop("http status not a whole number", (http.notna() & (http % 1 != 0)).to_numpy())
        out["http_status"] = http.round().astype("Int64").to_numpy()
    for name in ("provider", "model", "request_id"):
        if name in columns:
            text = chunk[columns[name]].reset_index(drop=True).astype("string").str.strip()
            out[name] = text.where(text != "").to_numpy()
    status = _statuses(chunk, columns, out["http_status"])
    drop("unknown status", status.isna().to_numpy())
    out["status"] = status.to_numpy()
    return out[keep].reset_index(drop=True)


def _statuses(chunk: pd.DataFrame, columns: Mapping[str, str], http: pd.Series) -> pd.Series:
    """The schema status per row: the status column's word, else from the HTTP code, else ok
    (<NA> where the word is unknown)."""
    from_http = pd.Series("ok", index=http.index, dtype="string")
    code = http.astype("float64")
    from_http = from_http.mask(code >= 400, "error").mask(code == 429, "rate_limited")
    from_http = from_http.mask(code.isin([408, 504]), "timeout")
    if "status" not in columns:
        return from_http
    words = chunk[columns["status"]].reset_index(drop=True).astype("string").str.strip()
    words = words.str.lower()
    status = words.map(lambda w: STATUS_WORDS.get(w) if isinstance(w, str) else None)
    status = pd.Series(status, index=http.index, dtype="string")
    blank = words.isna() | (words == "")
    return status.mask(blank, from_http)


def _csv_chunks(path: Path, progress: Callable[[int, int], None] | None) -> Iterator[pd.DataFrame]:
    size = path.stat().st_size
    with path.open("rb") as handle:
        reader = pd.read_csv(
            handle, dtype=str, keep_default_na=False, na_values=[""], chunksize=CHUNK_ROWS
        )
        for chunk in reader:
            if progress is not None:
                progress(handle.tell(), size)
            yield chunk


def _parquet_chunks(
    path: Path, progress: Callable[[int, int], None] | None
) -> Iterator[pd.DataFrame]:
    file = pq.ParquetFile(path)
    total = max(1, file.metadata.num_rows)
    done = 0
    for batch in file.iter_batches(batch_size=CHUNK_ROWS):
        done += batch.num_rows
        if progress is not None:
            progress(done, total)
        yield batch.to_pandas()


def read_table_log(
    path: Path,
    mapping: Mapping[str, str],
    garbage: Garbage,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """A CSV or Parquet call log, read in chunks, as the normalized log (garbage skipped)."""
    source = str(path)
    parquet = path.suffix.lower() in (".parquet", ".pq")
    try:
        chunks = _parquet_chunks(path, progress) if parquet else _csv_chunks(path, progress)
        parts: list[pd.DataFrame] = []
        columns: dict[str, str] | None = None
        first_row = 1
        for chunk in chunks:
            if columns is None:
                columns = resolve_columns([str(c) for c in chunk.columns], mapping, source)
            parts.append(normalize_chunk(chunk, columns, first_row, garbage))
            first_row += len(chunk)
            garbage.rows_read += len(chunk)
    except ScenarioError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        kind = "Parquet" if parquet else "CSV"
        raise ScenarioError(source, [("", f"cannot be read as {kind}: {exc}")]) from None
    if columns is None:
        raise ScenarioError(source, [("", "holds no data rows")])
    return conform(pd.concat(parts, ignore_index=True)) if parts else empty_call_log()


def read_call_logs(
    paths: list[Path],
    mapping: Mapping[str, str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[pd.DataFrame, dict[str, Garbage]]:
    """Every file as one normalized log (CSV, Parquet or OTLP JSON by extension), and the
    garbage skipped per file."""
    mapping = dict(mapping or {})
    parts: list[pd.DataFrame] = []
    report: dict[str, Garbage] = {}
    for path in paths:
        source = str(path)
        if not path.exists():
            raise ScenarioError(source, [("", "file not found")])
        if path.is_dir():
            raise ScenarioError(source, [("", "is a folder, expected a call log file")])
        garbage = report.setdefault(source, Garbage())
        tick = (lambda done, total, s=source: progress(s, done, total)) if progress else None
        if path.suffix.lower() in (".json", ".jsonl"):
            parts.append(read_otlp_log(path, garbage, tick))
        elif path.suffix.lower() in (".csv", ".parquet", ".pq"):
            parts.append(read_table_log(path, mapping, garbage, tick))
        else:
            raise ScenarioError(
                source,
                [("", "unknown log format (allowed: .csv, .parquet, .json / .jsonl OTLP)")],
            )
    calls = pd.concat(parts, ignore_index=True) if parts else empty_call_log()
    return conform(calls), report
