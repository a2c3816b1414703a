"""A call log written as CSV, whole or not at all: a temporary file beside the target, renamed
into place once complete (no half-written log after an error or Ctrl-C)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from sim.model.errors import ScenarioError


def check_log_target(path: Path) -> None:
    """Refuse, before any work, a target that is a folder or whose folder does not exist."""
    if path.is_dir():
        raise ScenarioError(str(path), [("", "is a folder; --out takes a CSV file name")])
    if not path.absolute().parent.is_dir():
        raise ScenarioError(
            str(path), [("", f"its folder {path.absolute().parent} does not exist")]
        )


#: Columns that count things: written as integers where every value is whole (800, not 800.000000).
COUNT_COLUMNS = ("input_tokens", "output_tokens")


def whole_counts(log: pd.DataFrame) -> pd.DataFrame:
    """`log` with each count column as integers (missing stays empty) where every value is
    whole; a column holding a fraction (a cancelled call billed in part) keeps its decimals."""
    out = log.copy()
    for column in COUNT_COLUMNS:
        if column not in out:
            continue
        values = out[column].astype("float64")
        finite = values.dropna()
        if finite.eq(finite.round()).all() and finite.abs().lt(2.0**53).all():
            out[column] = values.round().astype("Int64")
    return out


def write_call_log(log: pd.DataFrame, path: Path) -> Path:
    """Write `log` to `path` as CSV (seconds with microsecond precision, token counts as
    integers where whole); returns `path`."""
    check_log_target(path)
    log = whole_counts(log)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.absolute().parent)
    os.close(handle)
    try:
        log.to_csv(name, index=False, float_format="%.6f")
        os.replace(name, path)
    finally:
        if os.path.exists(name):
            os.remove(name)
    return path
