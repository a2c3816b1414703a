"""The report's comparison table shows the valid hit rate where the terminal table does (where a
validator or a quality floor makes valid hits differ from hits), and not elsewhere (issue 25,
item 14)."""

from __future__ import annotations

import pandas as pd

from sim.cli.common import summary_table
from sim.output.report_html import comparison_table


def _summary(valid: list[float]) -> pd.DataFrame:
    rows = []
    for policy, v in zip(("wait", "downshift"), valid, strict=True):
        rows.append({
            "policy": policy, "hit_rate": 0.94, "hit_rate_lo": 0.92, "hit_rate_hi": 0.95,
            "valid_hit_rate": v, "customer_success_rate": 0.94, "p50_s": 1.0, "p95_s": 2.0,
            "p99_s": 3.0, "cost_per_request_usd": 0.1, "cost_per_success_usd": 0.11,
            "calls_per_request": 1.0, "rate_limited_per_request": 0.0,
            "retry_amplification": 1.0, "quality_mean": 0.9,
        })  # fmt: skip
    return pd.DataFrame(rows)


def test_the_report_shows_valid_hits_where_the_terminal_does() -> None:
    summary = _summary([0.94, 0.76])
    html = comparison_table(summary, [])
    assert "<th>valid hits</th>" in html.replace(' class=""', "")
    assert "<td>76.0%</td>" in html
    terminal = [str(c.header) for c in summary_table(summary, 30.0, 1).columns]
    assert "valid hits" in terminal


def test_no_valid_hits_column_where_every_hit_is_valid() -> None:
    summary = _summary([0.94, 0.94])
    assert "valid hits" not in comparison_table(summary, [])
    assert "valid hits" not in [str(c.header) for c in summary_table(summary, 30.0, 1).columns]
