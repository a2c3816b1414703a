"""Experiment: when wrong answers belong to the request, re-drawing the same model cannot fix
them; falling up to a stronger model does (scenarios/hardness.yaml, a tenth of requests hard).

Prints, per policy: hit rate with its binomial standard error beside its closed form
h S(hard) + (1 - h) S(easy) (S: per step, 1 - the product of the tries' failure probabilities),
p50 and cost per success; then the paired margins (same requests, same draws) of fallup over
redraw and over race with their standard errors, and the hit rate redraw would have if junk and
length were drawn afresh per try (the model before hardness).

Run: `python experiments/hardness.py [--requests N] [--seed S]` (default 20,000 requests, the
scenario's seed; about 30 s on the event engine, which `max_tokens` needs).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np

import sim
from sim.model.config import Scenario, StepSpec

REPO = Path(__file__).resolve().parents[1]
#: The models each policy's tries of a step use (read off the scenario's policies).
TRIES = {"redraw": ("small",) * 3, "race": ("small",) * 3, "fallup": ("small", "big", "big")}


def try_fails(scenario: Scenario, model: str, step: StepSpec, hard: bool) -> float:
    """P(one try gives no valid answer): error or junk, or an answer rounding past max_tokens."""
    serving = scenario.providers["api"].serves[model]
    when = scenario.models[model].when_hard
    junk, factor = serving.invalid_rate, 1.0
    if hard and when is not None:
        junk = junk if when.invalid_rate is None else when.invalid_rate
        factor = when.length
    bad = serving.error_rate + junk
    cut = 0.0
    if step.max_tokens is not None:
        cap, length = step.max_tokens + 0.5, step.output_tokens
        if isinstance(length, int):
            cut = float(factor * length > cap)
        else:
            sigma = math.log(length.p99 / length.median) / NormalDist().inv_cdf(0.99)
            cut = 1 - NormalDist().cdf(math.log(cap / factor / length.median) / sigma)
    return bad + (1 - bad) * cut


def closed_form(scenario: Scenario, tries: tuple[str, ...], fresh: bool = False) -> float:
    """Hit rate h S(hard) + (1 - h) S(easy); `fresh`: junk and length drawn afresh per try."""
    assert scenario.hardness is not None
    h = scenario.hardness.share

    def fails(model: str, step: StepSpec, hard: bool) -> float:
        if not fresh:
            return try_fails(scenario, model, step, hard)
        return h * try_fails(scenario, model, step, True) + (1 - h) * try_fails(
            scenario, model, step, False
        )

    def success(hard: bool) -> float:
        steps = scenario.workflow.steps
        return math.prod(1 - math.prod(fails(m, s, hard) for m in tries) for s in steps)

    return h * success(True) + (1 - h) * success(False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    scenario = sim.load_scenario(REPO / "scenarios" / "hardness.yaml")
    result = sim.run(scenario, requests=args.requests, seed=args.seed)
    req = result.requests
    ok = {p: req[req["policy"] == p].sort_values("request_id")["ok"].to_numpy(float) for p in TRIES}
    summary = result.summary.set_index("policy")
    print(f"hardness.yaml, {args.requests:,} requests, seed {result.seed}")
    header = f"{'policy':8} {'hit rate':>9} {'SE':>7} {'closed form':>12}"
    print(f"{header} {'p50 s':>6} {'$/success':>10}")
    for policy, hits in ok.items():
        se = math.sqrt(hits.mean() * (1 - hits.mean()) / len(hits))
        row = summary.loc[policy]
        print(
            f"{policy:8} {hits.mean():9.4f} {se:7.4f} {closed_form(scenario, TRIES[policy]):12.4f} "
            f"{row['p50_s']:6.2f} {row['cost_per_success_usd']:10.5f}"
        )
    for other in ("redraw", "race"):
        d = ok["fallup"] - ok[other]
        se = float(np.std(d, ddof=1)) / math.sqrt(len(d))
        print(f"fallup - {other}: {d.mean():+.4f} (paired SE {se:.4f}, {d.mean() / se:.0f} SE)")
    fresh = closed_form(scenario, TRIES["redraw"], fresh=True)
    print(f"redraw if junk and length were drawn afresh per try: {fresh:.4f}")


if __name__ == "__main__":
    main()
