"""Experiment: the article's Figure 5 from a fitted call log, not from hand-set constants.

The round trip: `synth` a call log of the Figure 5 setting (experiments/figure5.py's correlated
model: one provider, first token {median 0.8, p99 4} s, 700 output tokens, the fitted speed,
stall and bad spells), fit it, and run the race (waited vs two attempts raced on the provider)
on the fitted scenario. Nothing is tuned to the article here: the fit sees only the log.

The fit:
- bad spells: `sim.analysis.fit_extras` (the two-state hidden Markov model on log-latency
  residuals, reported only if its tests support it), giving every_s, last_s and slowdown;
- the serving path (first token, speed, stall) by `sim.analysis.fit_marginals.fit_group` (what
  `tailsim fit` runs per provider and model) on the calls outside spells (posterior spell
  probability below 0.5). On every call instead (`--compare`), the stall absorbs the spells
  (about 2.8% stalls of ~28 s instead of 1.3% of ~47 s) and the race escapes them: that row
  shows what a fit without spells predicts.

The log's rate: the scenario's 0.1 requests/s puts about one call in a 10 s spell, and a spell
holding one call cannot be told from an independent slow call (which a race escapes). A
production log is denser: the log here is 1 call/s (nothing is limited, so the rate changes
nothing else), 100,000 calls (about 150 spells).

Run: `python experiments/figure5_from_fit.py` (about two minutes on 2 shared cores); prints the
fitted blocks and the article beside the race on the fitted scenario; writes
results/experiments/figure5_from_fit/ (stats.csv, fitted.json; the log itself is not kept).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import pandas as pd
from _common import beside, chain, out_dir
from figure5 import ARTICLE, FITTED, OUTPUT_TOKENS, SPELL_S, STATS, serving, summarise, within

import sim
from sim.analysis.fit_extras import fit_extras
from sim.analysis.fit_marginals import fit_group
from sim.study.synth import synth_calls

LOG_RATE_PER_S = 1.0
LOG_CALLS = 100_000
RACE_REQUESTS = 40_000


def setting(p: dict[str, float], rate_per_s: float, policies: dict[str, Any]) -> Any:
    """The Figure 5 scenario with parameters p (figure5.FITTED's keys), as figure5.py builds it."""
    provider: dict[str, Any] = {
        "serves": {"m": serving(p)},
        "episodes": {
            "every_s": SPELL_S / p["spell_share"],
            "last_s": SPELL_S,
            "slowdown": p["spell_slowdown"],
        },
    }
    return chain(
        "figure5",
        1,
        serving(p),
        policies,
        output_tokens=OUTPUT_TOKENS,
        rate_per_s=rate_per_s,
        providers={"p": provider},
        extra={"engine": "des"},
    )


def synth_log(calls: int = LOG_CALLS, seed: int = 5) -> pd.DataFrame:
    """The call log of the Figure 5 setting (the waited policy: one call per request)."""
    scenario = setting(FITTED, LOG_RATE_PER_S, {"waited": {"kind": "wait"}})
    return synth_calls(scenario, requests=calls, seed=seed)


def fit_log(log: pd.DataFrame) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the fitted provider block, the extras' evidence) from a call log of one step: spells by
    `fit_extras`, the serving path by `fit_group` on the calls outside spells."""
    extras = {f.name: f for f in fit_extras(log)}
    spells = extras["episodes"]
    quiet = log
    if spells.supported and spells.detail is not None:
        quiet = log.loc[spells.detail.index[spells.detail.to_numpy() < 0.5]]
    provider: dict[str, Any] = {"serves": {"m": fit_group(quiet, "p", "m").serving_block()}}
    if spells.supported:
        provider["episodes"] = {k: float(v) for k, v in spells.block.items()}
    evidence = {
        name: {"supported": f.supported, "evidence": f.evidence} for name, f in extras.items()
    }
    return provider, evidence


def marginals_only(log: pd.DataFrame) -> dict[str, Any]:
    """The provider block of the marginal fit on every call, spells not looked for."""
    return {"serves": {"m": fit_group(log, "p", "m").serving_block()}}


def race(provider: dict[str, Any], requests: int = RACE_REQUESTS) -> pd.DataFrame:
    """p50, p99 and std of the step waited and raced (two attempts on the provider)."""
    scenario = chain(
        "figure5-from-fit",
        1,
        provider["serves"]["m"],
        {"waited": {"kind": "wait"}, "raced": {"kind": "race", "attempts": 2}},
        output_tokens=OUTPUT_TOKENS,
        rate_per_s=0.1,
        providers={"p": provider},
        extra={"engine": "des"},
    )
    runs = sim.run(scenario, requests=requests).requests
    rows = {}
    for policy, part in runs.groupby("policy", sort=False):
        values = part.loc[part["ok"], "latency_s"].to_numpy()
        rows[policy] = dict(zip(STATS, summarise(values), strict=True))
    return pd.DataFrame(rows).T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=LOG_CALLS, help="calls in the log")
    parser.add_argument(
        "--compare", action="store_true", help="also race on the marginal fit without spells"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    folder = out_dir("figure5_from_fit")
    log = synth_log(args.calls)
    provider, evidence = fit_log(log)
    table = race(provider)
    table.to_csv(folder / "stats.csv", float_format="%.3f")
    (folder / "fitted.json").write_text(
        json.dumps({"provider": provider, "tests": evidence}, indent=2)
    )
    print(f"log: {len(log)} calls at {LOG_RATE_PER_S:g}/s; fitted provider block:")
    print(json.dumps(provider, indent=2))
    for name, test in evidence.items():
        print(
            f"  {name}: {'supported' if test['supported'] else 'not supported'}: {test['evidence']}"
        )
    truth = {
        "every_s": SPELL_S / FITTED["spell_share"],
        "last_s": SPELL_S,
        "slowdown": FITTED["spell_slowdown"],
    }
    print("  spells set in the log:", {k: round(v, 3) for k, v in truth.items()})
    rows = []
    for policy in ("waited", "raced"):
        for stat in STATS:
            article, ours = ARTICLE[policy][stat], float(table.loc[policy, stat])
            rows.append(
                (f"{policy} {stat}", f"~{article:g} s", f"{ours:5.1f} s {within(ours, article):>4}")
            )
    print(beside(rows, "Figure 5 from a fitted log: the article beside the race on the fit"))
    if args.compare:
        plain = race(marginals_only(log))
        plain.to_csv(folder / "stats_without_spells.csv", float_format="%.3f")
        print("without spells (marginals on every call):")
        print(plain.round(1).to_string())
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
