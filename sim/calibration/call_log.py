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


def write_call_log(log: pd.DataFrame, path: Path) -> Path:
    """Write `log` to `path` as CSV (seconds with microsecond precision); returns `path`."""
    check_log_target(path)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.absolute().parent)
    os.close(handle)
    try:
        log.to_csv(name, index=False, float_format="%.6f")
        os.replace(name, path)
    finally:
        if os.path.exists(name):
            os.remove(name)
    return path
