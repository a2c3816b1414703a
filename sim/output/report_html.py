"""`tailsim report DIR`: one self-contained report.html for a run or sweep folder.

Everything is inside the file: figures as base64 PNGs, CSS inline, no script and no link to
the network, so it opens from disk anywhere and can be mailed to a colleague. Drawn from the
folder's result files only.
"""

from __future__ import annotations

import base64
import html
import json
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from sim.analysis.reading import read_policies, read_sweep, shown_user_ttft, shows_valid_hits
from sim.model.words import percent, percent_interval, plural
from sim.output.plots import folder_figures, png_bytes
from sim.output.slo_view import folder_view, slo_html
from sim.output.store import write_atomic

CAPTIONS = {
    "policies": "Latency distributions against the deadline, and hit rate against cost per "
    "success (filled) and per request (hollow).",
    "ecdf": "End-to-end latency per policy, log scale; runs that failed count at the deadline.",
    "pareto": "Cost per success against hit rate (95% CI bars); the circled points are the "
    "Pareto frontier, the ones no other point beats on both (joined by a dotted line when there "
    "are several). Each point is labelled with its policy, or in a sweep with its swept values "
    "(a policy's points joined, faintly, in sweep order).",
    "dumbbells": "p50 to p99 of successful calls within each output-size bucket.",
    "strip": "One step, run by run, under each policy; red dots are the slow tail.",
    "storm": "Offered load, goodput and 429s over time.",
    "sweep": "Hit rate (95% CI band), cost per success and cost per request across the sweep.",
}

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1250px;color:#222;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;
margin-top:2rem}.meta{color:#666;font-size:.9rem}
table{border-collapse:collapse;font-size:.88rem;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.25rem .55rem;text-align:right;white-space:nowrap}
th{background:#f4f4f4}td.l,th.l{text-align:left}
figure{margin:1rem 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:.9rem}
pre{background:#f7f7f7;padding:.8rem;overflow:auto;font-size:.8rem;max-height:40rem}
ul.reading li{margin:.25rem 0}
"""

#: Columns of the comparison table: (column, header, format).
RUN_COLUMNS = (
    ("p50_s", "p50 s", "{:.1f}"),
    ("p95_s", "p95 s", "{:.1f}"),
    ("p99_s", "p99 s", "{:.1f}"),
    ("cost_per_request_usd", "$/request", "{:.4f}"),
    ("cost_per_success_usd", "$/success", "{:.4f}"),
    ("calls_per_request", "calls/req", "{:.2f}"),
    ("rate_limited_per_request", "429s/req", "{:.2f}"),
    ("customer_success_rate", "customer success", "%"),  # by `percent`
    ("quality_mean", "quality", "{:.3f}"),
)


def write_report(folder: Path, out: Path | None = None) -> Path:
    """Write the report of `folder` (default: folder/report.html) atomically; returns it."""
    path = out or folder / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render(folder))
    return path


def render(folder: Path) -> str:
    """The whole report as one HTML string."""
    sweep = (folder / "manifest.json").is_file()
    summary = pd.read_csv(folder / "summary.csv")
    if sweep:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        keys = list(manifest["swept_keys"])
        name = manifest["scenario"]
        meta = (
            f"sweep of {', '.join(keys)}: {plural(len(manifest['points']), 'point')}, seed "
            f"{manifest['seed']}, {plural(manifest['requests'], 'request')} per point"
        )
        reading = read_sweep(summary, keys)
    else:
        keys = []
        run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        name = run.get("scenario", folder.name)
        meta = f"run: {plural(run.get('requests'), 'request')}, seed {run.get('seed')}"
        reading = read_policies(summary)
    slo = folder_view(folder)
    if slo is not None:
        reading += slo.lines()
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tailsim report: {html.escape(str(name))}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>tailsim report: {html.escape(str(name))}</h1>",
        f'<p class="meta">{html.escape(meta)}; folder {html.escape(str(folder))}; written '
        f"{datetime.now(UTC).isoformat(timespec='seconds')}</p>",
        '<section id="reading"><h2>Reading</h2><ul class="reading">',
        *[f"<li>{html.escape(line)}</li>" for line in reading],
        "</ul></section>",
        '<section id="comparison"><h2>Comparison</h2>',
        '<div style="overflow-x:auto">' + comparison_table(summary, keys) + "</div>",
        '<p class="meta">Hit rate: runs answered within the deadline, 95% interval in '
        "brackets. $/success: every billed call over delivered answers. Definitions: "
        "docs/metrics.md.</p></section>",
        *([slo_html(slo)] if slo is not None else []),
        '<section id="figures"><h2>Figures</h2>',
        *[_figure(stem, png_bytes(fig)) for stem, fig in folder_figures(folder)],
        "</section>",
    ]
    breakdown = folder / "breakdown.csv"
    if breakdown.is_file():
        parts += [
            '<section id="breakdown"><h2>Breakdown</h2>',
            frame_table(pd.read_csv(breakdown)),
            "</section>",
        ]
    resolved = (folder / "scenario.resolved.yaml").read_text(encoding="utf-8")
    parts += [
        '<section id="scenario"><h2>Resolved scenario</h2>',
        f"<pre>{html.escape(resolved)}</pre></section>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _figure(stem: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    caption = html.escape(CAPTIONS.get(stem, stem))
    return (
        f'<figure id="fig-{stem}"><img alt="{html.escape(stem)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{caption}</figcaption></figure>'
    )


def comparison_table(summary: pd.DataFrame, keys: list[str]) -> str:
    """The policies side by side (per swept point for a sweep), as people read them."""
    valid = shows_valid_hits(summary)  # as the terminal table: where answers can be wrong
    head = [*keys, "policy", "hit rate [95% CI]", *(["valid hits"] if valid else [])]
    head += [h for c, h, _ in RUN_COLUMNS if c in summary]
    user = shown_user_ttft(summary)  # the named step's first token, where one is named
    head += [h for _c, h, _share in user]
    if "replications" in summary:
        head.append("reps")
    rows = []
    for row in summary.to_dict("records"):
        cells = [f'<td class="l">{html.escape(str(row[k]))}</td>' for k in [*keys, "policy"]]
        cells.append(
            f"<td>{percent_interval(row['hit_rate'], row['hit_rate_lo'], row['hit_rate_hi'])}</td>"
        )
        if valid:
            cells.append(f"<td>{percent(row['valid_hit_rate'])}</td>")
        for column, _h, fmt in RUN_COLUMNS:
            if column in summary:
                value = row[column]
                text = percent(value) if fmt == "%" else fmt.format(value)
                cells.append(f"<td>{'n/a' if pd.isna(value) else text}</td>")
        for column, _h, share in user:
            value = row[column]
            text = percent(value) if share else f"{value:.2f}"
            cells.append(f"<td>{'n/a' if pd.isna(value) else text}</td>")
        if "replications" in summary:
            cells.append(f"<td>{int(row['replications'])}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    header = "".join(
        f'<th class="{"l" if h in (*keys, "policy") else ""}">{html.escape(h)}</th>' for h in head
    )
    return f'<table class="comparison"><tr>{header}</tr>' + "".join(rows) + "</table>"


def frame_table(frame: pd.DataFrame) -> str:
    """Any small table as HTML (numbers rounded for reading)."""
    return frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0, escape=True)
