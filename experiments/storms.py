"""Experiment: a burst tips plain retrying into a storm that outlives it; load-aware controls
recover (scenarios/retry-storm.yaml), and blind racing piles onto a shared quota
(scenarios/tpm-saturation.yaml).

Prints, per policy of retry-storm: retry amplification, calls per request, pre-burst goodput,
goodput one burst-length after the burst, and the seconds until goodput is back within 10%; and
per policy of tpm-saturation: hit rate with its standard error, 429s per request, peak TPM share.
Writes DIR/storm.png (the storm figure of retry-storm).

Run: `python experiments/storms.py [--out DIR]` (about 5 s; default DIR: results/experiments/;
a reference copy of the figure is in results/reference/storm.png).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import sim
from sim.analysis.timeseries import recovery
from sim.model.arrivals import bursts
from sim.output.storm_plots import save, storm_figure

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/experiments"))
    args = parser.parse_args()

    storm = sim.run(sim.load_scenario(REPO / "scenarios" / "retry-storm.yaml"))
    burst = bursts(storm.scenario.arrivals)[0]
    series = storm.timeseries
    print(f"retry-storm: burst {burst[0]:g}-{burst[1]:g} s; goodput in runs/s")
    print(f"{'policy':10} {'amplif.':>8} {'calls/req':>9} {'before':>7} {'after':>7} {'back s':>7}")
    for row in storm.summary.itertuples():
        level, after, back = recovery(series, str(row.policy), burst)
        print(
            f"{row.policy:10} {row.retry_amplification:8.2f} {row.calls_per_request:9.2f} "
            f"{level:7.2f} {after:7.2f} {'never' if math.isinf(back) else f'{back:g}':>7}"
        )
    path = save(storm_figure(series, "retry-storm: storm"), args.out / "storm.png")

    tpm = sim.run(sim.load_scenario(REPO / "scenarios" / "tpm-saturation.yaml"))
    print("\ntpm-saturation")
    print(f"{'policy':12} {'hit rate':>9} {'SE':>7} {'429s/req':>9} {'peak TPM':>9}")
    for row in tpm.summary.itertuples():
        se = math.sqrt(max(row.hit_rate * (1 - row.hit_rate), 1 / row.runs) / row.runs)
        print(
            f"{row.policy:12} {row.hit_rate:9.4f} {se:7.4f} {row.rate_limited_per_request:9.3f} "
            f"{row.peak_tpm_share:9.3f}"
        )
    print(f"\nfigure: {path}")


if __name__ == "__main__":
    main()
