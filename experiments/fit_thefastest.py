"""Experiment: `tailsim fit` on real calls (the bundled thefastest.ai log, MIT), and how well the
fitted blocks reproduce each provider and model's p50 / p95 / p99 when they drive a scenario.

Fits every (provider, model) with at least 60 calls (29 groups of 60-95 calls), runs the fitted
block as a scenario of one parallel step per group (no quota, no queue, `wait`, 10,000
requests), and prints the log's percentiles beside the simulated ones, with the log percentile's
own 95% order-statistic interval. The table in docs/fitting.md is this script's output.

Run: `python experiments/fit_thefastest.py` (about a minute); writes
results/experiments/fit_thefastest/ (fitted.yaml, replay.csv, figure.png).
"""

from __future__ import annotations

from _common import DATA, out_dir, save

from sim.calibration.check import replay
from sim.calibration.log_readers import read_call_logs
from sim.calibration.plots import fit_figure
from sim.calibration.report import bucket_table, fit_calls, fitted_yaml

LOG = DATA / "thefastest-ai" / "thefastest_ai_requests.csv"


def main() -> None:
    folder = out_dir("fit_thefastest")
    calls, _ = read_call_logs([LOG])
    fits, _ = fit_calls(calls, min_calls=60, seed=0)
    (folder / "fitted.yaml").write_text(fitted_yaml(fits, [str(LOG)]), encoding="utf-8")
    table = replay(fits, requests=10_000, seed=1)
    table.to_csv(folder / "replay.csv", index=False)
    table["matches"] = table["within_tolerance"] | table["within_interval"]
    print("| provider / model | n | fitted from | p50 log / sim | p95 log / sim | p99 log / sim |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for (provider, model), part in table.groupby(["provider", "model"], sort=False):
        cells = []
        for row in part.itertuples():
            mark = "" if row.within_tolerance else (" ~" if row.within_interval else " **x**")
            cells.append(f"{row.observed_s:.2f} / {row.simulated_s:.2f}{mark}")
        first = part.iloc[0]
        print(
            f"| {provider} / {model} | {first['n']} | {first['fitted_from']} | "
            + " | ".join(cells)
            + " |"
        )
    print()
    for q in ("p50", "p95", "p99"):
        part = table[table["quantile"] == q]
        print(
            f"{q}: within 5% {int(part['within_tolerance'].sum())} of {len(part)}, within 5% "
            f"or the log's 95% interval {int(part['matches'].sum())}"
        )
    groups = table.groupby(["provider", "model"])["matches"].all()
    print(f"groups matching at all three: {int(groups.sum())} of {len(groups)}")
    save(fit_figure(fits[:8], bucket_table(fits[:8])), folder / "figure.png")


if __name__ == "__main__":
    main()
