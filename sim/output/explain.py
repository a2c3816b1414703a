"""The breakdown as a person reads it: one rich table under the comparison, and `tailsim explain`.

For each policy, where its failed runs failed (reason at step, share of all runs) and, per
provider, the load it put there: calls, 429s, timeouts, busy slots and peak one-minute tokens
against the provider's limits. Rendering only; the numbers come from `sim.analysis.breakdown`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import yaml
from rich.table import Table

from sim.analysis.breakdown import breakdown, provider_limits
from sim.model.errors import ScenarioError
from sim.model.words import percent

#: Failure pairs printed per policy (breakdown.csv keeps more).
PRINTED_FAILURES = 3


#: What the stream cuts ended, as the breakdown counts them: (column, word).
STREAM_ENDINGS = (("first_token_cuts", "first-token"), ("idle_cuts", "idle"), ("broken", "broken"))


def breakdown_table(table: pd.DataFrame) -> Table:
    """Why each policy did as it did, one row per (policy, provider); a column of stream cuts
    where any call was ended by one (or broke mid-stream)."""
    streams = _has_stream_endings(table)
    view = Table(
        title="why: where failed runs failed (reason at step, share of runs), and the load each "
        "provider saw",
        title_justify="left",
    )
    for header, justify in (
        ("policy", "left"),
        ("failed runs: top reasons", "left"),
        ("provider", "left"),
        ("calls", "right"),
        ("429s", "right"),
        ("timeouts", "right"),
        ("errors", "right"),
        ("busy slots", "right"),
        ("peak tokens/min", "right"),
        *([("stream cuts", "left")] if streams else []),
    ):
        view.add_column(header, justify=justify)  # type: ignore[arg-type]
    for policy in pd.unique(table["policy"]):
        rows = table[table["policy"] == policy]
        failures = _failure_text(rows[rows["section"] == "failure"])
        providers = rows[rows["section"] == "provider"]
        for k, row in enumerate(providers.to_dict("records")):
            view.add_row(
                str(policy) if k == 0 else "",
                failures if k == 0 else "",
                str(row["provider"]),
                f"{int(row['calls']):,}",
                f"{int(row['rate_limited']):,}",
                f"{int(row['timeouts']):,}",
                f"{int(row['errors']):,}",
                _share(row["busy_slots_mean"], row["busy_share"], f"{int(row['concurrency']):,}"),
                _share(row["peak_minute_tokens"], row["peak_tpm_share"], "TPM"),
                *([_stream_text(row)] if streams else []),
            )
        if providers.empty:
            view.add_row(str(policy), failures, *[""] * (8 if streams else 7))
        view.add_section()
    return view


def _has_stream_endings(table: pd.DataFrame) -> bool:
    """Whether any call was ended by a stream cut or broke (a breakdown.csv written before these
    columns existed has none)."""
    columns = [c for c, _ in STREAM_ENDINGS if c in table]
    return bool(columns) and bool(table[columns].fillna(0).to_numpy().sum() > 0)


def _stream_text(row: dict) -> str:
    """'12 first-token, 3 idle' (the calls each stream cut ended), or 'none'."""
    parts = [
        f"{int(row[column]):,} {word}"
        for column, word in STREAM_ENDINGS
        if not pd.isna(row.get(column)) and row.get(column)
    ]
    return ", ".join(parts) or "none"


def _failure_text(rows: pd.DataFrame) -> str:
    """'deadline at s7 6.1%; error at s3 0.4%' (top few), or 'none'."""
    if rows.empty:
        return "none"
    parts = []
    for row in rows.head(PRINTED_FAILURES).to_dict("records"):
        where = f" at {row['fail_step']}" if isinstance(row["fail_step"], str) else ""
        parts.append(f"{row['fail_reason']}{where} {percent(row['share_of_runs'])}")
    total = rows["share_of_runs"].sum()
    return f"{percent(total)} of runs: " + "; ".join(parts)


def _share(value: float, share: float, of: str) -> str:
    """'12.3 (2% of 512)', or the value alone where there is no limit."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    number = f"{value:,.0f}" if value >= 100 else f"{value:.1f}"
    if share is None or (isinstance(share, float) and math.isnan(share)):
        return f"{number} (no limit)"
    return f"{number} ({share:.0%} of {of})"


def read_breakdown(folder: Path) -> pd.DataFrame:
    """A results folder's breakdown.csv, or (for a folder written before it existed) the same
    table recomputed from its requests, calls and resolved scenario."""
    saved = folder / "breakdown.csv"
    if saved.is_file():
        return pd.read_csv(saved, keep_default_na=True)
    needed = ("requests.parquet", "calls.parquet", "scenario.resolved.yaml")
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        raise ScenarioError(
            str(folder),
            [("", f"not a tailsim run folder (missing breakdown.csv and {', '.join(missing)})")],
        )
    resolved = yaml.safe_load((folder / "scenario.resolved.yaml").read_text(encoding="utf-8"))
    return breakdown(
        pd.read_parquet(folder / "requests.parquet"),
        pd.read_parquet(folder / "calls.parquet"),
        provider_limits(resolved.get("providers", {})),
    )
