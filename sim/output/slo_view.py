"""A scenario's SLO as people read it: a small table under a run's or a sweep's comparison (and
in `explain`, `report`, `tune`, `nines`), one row per policy (per swept point), the success
share as nines with its 95% interval and met / missed / undecided / not resolved. Rendering
only; the readings come from `sim.analysis.slo`, the target from the scenario (or a folder's
resolved copy of it)."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from rich.markup import escape
from rich.table import Table

from sim.analysis.slo import (
    MET,
    MISSED,
    UNDECIDED,
    SloReading,
    miss_reading,
    run_readings,
    slo_header,
    slo_lines,
    sweep_readings,
)
from sim.plan import Plan

#: How each verdict is coloured in the terminal, and in the report.
STYLES = {MET: "green", MISSED: "red", UNDECIDED: "yellow"}
COLOURS = {MET: "#1a7f37", MISSED: "#b42318", UNDECIDED: "#9a6700"}


@dataclass(frozen=True)
class SloView:
    """Readings of a table's rows against one target, with what labels each row."""

    target: float
    metric: str
    keys: list[str]  # swept keys (none for a run)
    labels: list[list[str]]  # per row: the swept values, then the policy
    readings: list[SloReading]

    def lines(self) -> list[str]:
        """The plain-language summary (see `sim.analysis.slo.slo_lines`)."""
        names = [
            f"{label[-1]} ({', '.join(label[:-1])})" if label[:-1] else label[-1]
            for label in self.labels
        ]
        return slo_lines(names, self.readings, self.metric)


def scenario_slo(plan: Plan) -> tuple[float, str] | None:
    """(target, metric) of a plan's `slo`, or None without one."""
    return None if plan.slo is None else (plan.slo.target, plan.slo.metric)


def slo_of(resolved: dict[str, Any] | None) -> tuple[float, str] | None:
    """(target, metric) of a scenario mapping's `slo` (a resolved copy), or None without one."""
    slo = (resolved or {}).get("slo")
    if not isinstance(slo, dict) or "target" not in slo:
        return None
    return float(slo["target"]), str(slo.get("metric", "valid_hit_rate"))


def run_view(summary: pd.DataFrame, slo: tuple[float, str] | None) -> SloView | None:
    """The SLO view of a run's summary (None without an SLO)."""
    if slo is None:
        return None
    target, metric = slo
    labels = [[str(p)] for p in summary["policy"]]
    return SloView(target, metric, [], labels, run_readings(summary, target, metric))


def sweep_view(
    aggregate: pd.DataFrame,
    replications: pd.DataFrame,
    keys: list[str],
    slo: tuple[float, str] | None,
) -> SloView | None:
    """The SLO view of a sweep's pooled summary (None without an SLO)."""
    if slo is None:
        return None
    target, metric = slo
    labels = [[str(row[k]) for k in [*keys, "policy"]] for row in aggregate.to_dict("records")]
    readings = sweep_readings(aggregate, replications, keys, target, metric)
    return SloView(target, metric, list(keys), labels, readings)


def nines_view(table: pd.DataFrame, slo: tuple[float, str] | None) -> SloView | None:
    """The SLO view of a `tailsim nines` table (None without an SLO): the success share is
    1 - P(miss), a miss being a late or failed run, so it is read as the hit rate whatever
    the scenario's metric (`nines_note` says so where that differs)."""
    if slo is None:
        return None
    target, _metric = slo
    readings = [
        miss_reading(
            float(row["miss_probability"]),
            float(row["ci_lo"]),
            float(row["ci_hi"]),
            int(row["runs"]),
            target,
            float(row.get("rel_error", math.nan)),
        )
        for row in table.to_dict("records")
    ]
    labels = [[str(p)] for p in table["policy"]]
    return SloView(target, "hit_rate", [], labels, readings)


def nines_note(plan: Plan) -> str | None:
    """What a `tailsim nines` SLO table does not count, for a valid-hit SLO on a plan where
    an answer delivered on time may be invalid; else None."""
    slo = plan.slo
    if slo is None or slo.metric == "hit_rate":
        return None
    steps = plan.workflow.steps
    junk_on_time = (  # a validator letting junk pass, a cut or drawn answer length, a floor
        plan.quality_floor > 0
        or plan.hardness_spec is not None
        or any(s.validator is not None or s.max_tokens is not None for s in steps)
        or any(s.length is not None for s in steps)
    )
    if not junk_on_time:
        return None
    return (
        "note: the scenario's SLO counts valid hits; `tailsim nines` estimates deadline misses "
        "(late or failed runs), not invalid answers delivered on time: the valid-hit share is "
        "at most the hit rate above (see `tailsim run`)"
    )


def folder_view(folder: Path) -> SloView | None:
    """The SLO view of a finished run or sweep folder, from its scenario.resolved.yaml (None
    when the scenario has no `slo`)."""
    resolved = folder / "scenario.resolved.yaml"
    if not resolved.is_file():
        return None
    slo = slo_of(yaml.safe_load(resolved.read_text(encoding="utf-8")))
    if slo is None:
        return None
    summary = pd.read_csv(folder / "summary.csv")
    manifest = folder / "manifest.json"
    if manifest.is_file():
        keys = list(json.loads(manifest.read_text(encoding="utf-8"))["swept_keys"])
        replications = pd.read_csv(folder / "replications.csv")
        return sweep_view(summary, replications, keys, slo)
    return run_view(summary, slo)


def slo_table(view: SloView) -> Table:
    """The readings as a terminal table: a row per policy (per swept point)."""
    table = Table(
        title=view.lines()[0] if view.readings else "SLO",
        title_justify="left",
    )
    for header in (*view.keys, "policy"):
        table.add_column(header, justify="left")
    table.add_column(slo_header(view.target, view.metric), justify="right")
    table.add_column("verdict", justify="left")
    for label, reading in zip(view.labels, view.readings, strict=True):
        verdict = escape(reading.verdict)
        style = STYLES.get(reading.status)
        shown = f"[{style}]{verdict}[/]" if style else verdict
        table.add_row(*label, escape(reading.estimate), shown)
    return table


def slo_html(view: SloView) -> str:
    """The readings as an HTML section for report.html (their summary line goes to the
    report's Reading)."""
    head = [*view.keys, "policy", slo_header(view.target, view.metric), "verdict"]
    left = (*view.keys, "policy", "verdict")
    header = "".join(f'<th class="{"l" if h in left else ""}">{html.escape(h)}</th>' for h in head)
    rows = []
    for label, reading in zip(view.labels, view.readings, strict=True):
        colour = COLOURS.get(reading.status)
        style = f' style="color:{colour}"' if colour else ""
        cells = [f'<td class="l">{html.escape(v)}</td>' for v in label]
        cells.append(f"<td>{html.escape(reading.estimate)}</td>")
        cells.append(f'<td class="l"{style}>{html.escape(reading.verdict)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<section id="slo"><h2>SLO</h2><table class="slo"><tr>{header}</tr>'
        + "".join(rows)
        + "</table>"
        '<p class="meta">Success share as nines with its 95% interval (Wilson; in a sweep, '
        "widened where replications differ more than chance). Met: the interval lies wholly at "
        "or above the target; missed: wholly below; undecided: it straddles the target; not "
        "resolved: too few runs for even a record without a miss to show the target met, run "
        "`tailsim nines`. Figures are never rounded across the target. Definitions: "
        "docs/metrics.md.</p></section>"
    )
