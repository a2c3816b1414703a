"""The normalized call log `tailsim fit` works on: one row per LLM call, fixed columns and dtypes.

Readers (`sim.calibration.log_readers`, `sim.calibration.otlp`) turn CSV, Parquet and OTLP JSON into
it; the fits (`sim.calibration.marginals`, `sim.calibration.extras`) read only these columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: column -> pandas dtype, in order (see FIT_SCHEMA / docs/fitting.md).
CALL_LOG_COLUMNS: dict[str, str] = {
    "row": "int64",  # 1-based data row of the source file (for garbage reports)
    "start_s": "float64",  # call start, s (any origin; only differences matter)
    "latency_s": "float64",  # total latency the caller saw, s (timeout: elapsed to the cut)
    "ttft_s": "float64",  # time to first token, s (NaN if absent)
    "provider": "string",
    "model": "string",
    "input_tokens": "float64",
    "output_tokens": "float64",
    "status": "string",  # one of STATUSES
    "http_status": "Int64",
    "request_id": "string",  # the workflow run the call belongs to
    "server_latency_s": "float64",  # the provider's own view of the call, s
}

#: Allowed values of `status`. `timeout`: the client cut the call (its timeout, a deadline, a
#: race's loser cancelled): latency_s is the elapsed time to the cut (a right-censored latency).
#: `broken`: the answer broke after its first token (a mid-stream error after HTTP 200; the
#: fit's `mid_stream_error_rate`, sim.calibration.streams).
STATUSES: tuple[str, ...] = ("ok", "error", "rate_limited", "invalid", "timeout", "broken")

#: Example row numbers kept per kind of garbage.
EXAMPLES = 5

#: Columns a log must provide (the others are optional and filled with NaN / <NA>).
REQUIRED_COLUMNS: tuple[str, ...] = ("latency_s",)


def empty_call_log(rows: int = 0) -> pd.DataFrame:
    """A call log of `rows` rows with every column present and missing (NaN / <NA>); `row` is
    1..rows."""
    columns: dict[str, pd.Series] = {}
    for column, dtype in CALL_LOG_COLUMNS.items():
        if column == "row":
            columns[column] = pd.Series(range(1, rows + 1), dtype="int64")
        elif dtype in ("string", "Int64"):
            columns[column] = pd.Series([pd.NA] * rows, dtype=dtype)
        else:
            columns[column] = pd.Series([float("nan")] * rows, dtype=dtype)
    return pd.DataFrame(columns)


def conform(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with exactly the schema's columns, in order and with its dtypes (missing: NaN)."""
    frame = frame.reset_index(drop=True)
    out = empty_call_log(len(frame))
    for column, dtype in CALL_LOG_COLUMNS.items():
        if column in frame.columns:
            out[column] = frame[column].astype(dtype)
    return out


@dataclass
class Garbage:
    """Rows skipped, by kind: how many and the first few row numbers (1-based data rows)."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[int]] = field(default_factory=dict)
    rows_read: int = 0

    def add(self, kind: str, rows: np.ndarray) -> None:
        """Count `rows` (row numbers) as garbage of `kind`."""
        if len(rows) == 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + len(rows)
        kept = self.examples.setdefault(kind, [])
        kept.extend(int(r) for r in rows[: max(0, EXAMPLES - len(kept))])

    @property
    def total(self) -> int:
        """Rows skipped (a row is counted once, under its first problem)."""
        return sum(self.counts.values())

    def lines(self) -> list[str]:
        """One line per kind: `kind: N rows (e.g. rows 3, 17)`."""
        return [
            f"{kind}: {n:,} row{'s' if n > 1 else ''} (e.g. row "
            f"{', '.join(str(r) for r in self.examples[kind])})"
            for kind, n in sorted(self.counts.items(), key=lambda kv: -kv[1])
        ]
