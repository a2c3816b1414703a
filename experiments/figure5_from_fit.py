"""Experiment: the article's Figure 5 from a fitted call log, not from hand-set constants.

The round trip, through the commands a user runs: `tailsim synth` writes a call log of the
Figure 5 setting (experiments/figure5.py's correlated model: one provider, first token
{median 0.8, p99 4} s, 700 output tokens, the fitted speed, stall and bad spells), `tailsim fit`
fits it (marginal laws per provider and model, the extras: bad spells by the two-state hidden
Markov model, placed only if its tests support them, the serving path refitted on the calls
outside spells), and the race (waited vs two attempts raced on the provider) runs on a scenario
that `include:`s the fitted file. Nothing is tuned to the article: the fit sees only the log.

`--compare` also races the marginal fit of every call with spells not looked for
(`tailsim fit --no-extras`): the stall absorbs the spells (about 2.8% stalls of ~28 s instead
of 1.3% of ~47 s), independent per attempt, so the race escapes them.

The log's rate: the scenario's 0.1 requests/s puts about one call in a 10 s spell, and a spell
holding one call cannot be told from an independent slow call (which a race escapes). A
production log is denser: the log here is 1 call/s (nothing is limited, so the rate changes
nothing else), 100,000 calls (about 150 spells).

Run: `python experiments/figure5_from_fit.py` (about two minutes on 2 shared cores); prints the
fitted file and the article beside the race on it; writes results/experiments/figure5_from_fit/
(setting.yaml, trace.csv, fitted.yaml and `tailsim fit`'s report beside it, race.yaml, stats.csv).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from _common import beside, out_dir
from click.testing import CliRunner
from figure5 import ARTICLE, FITTED, SPELL_S, STATS, serving, summarise, within

import sim
from sim.cli import main as tailsim_command
from sim.model.scenario import load_scenario

LOG_RATE_PER_S = 1.0
LOG_CALLS = 100_000
RACE_REQUESTS = 40_000


def setting_data(p: dict[str, float], rate_per_s: float, policies: dict[str, Any]) -> dict:
    """The Figure 5 scenario with parameters p (figure5.FITTED's keys), as figure5.py builds
    it, as a YAML-ready mapping."""
    provider: dict[str, Any] = {
        "serves": {"m": serving(p)},
        "episodes": {
            "every_s": SPELL_S / p["spell_share"],
            "last_s": SPELL_S,
            "slowdown": p["spell_slowdown"],
        },
    }
    return {
        "name": "figure5",
        "seed": 11,
        "deadline_s": 1e6,
        "arrivals": {"kind": "poisson", "rate_per_s": rate_per_s},
        "models": {"m": {"price_per_mtok": {"input": 2.5, "output": 10.0}}},
        "providers": {"p": provider},
        "workflow": {
            "steps": [{"id": "s1", "model": "m", "input_tokens": 2000, "output_tokens": 700}]
        },
        "policies": policies,
        "engine": "des",
    }


def tailsim(*args: str) -> str:
    """Run a `tailsim` command in this process; its output (stops on a failure)."""
    quiet = ["--quiet"] if args[0] == "fit" else []
    result = CliRunner().invoke(tailsim_command, [*args, *quiet])
    if result.exit_code != 0:
        raise RuntimeError(f"tailsim {' '.join(args)}: exit {result.exit_code}\n{result.output}")
    return result.output


def round_trip(
    folder: Path,
    calls: int = LOG_CALLS,
    requests: int = RACE_REQUESTS,
    extras: bool = True,
    mode: str = "auto",
) -> tuple[pd.DataFrame, str]:
    """synth -> fit (`--mode`) -> race in `folder`: (p50, p99, std of the step waited and
    raced, the fitted file's text)."""
    setting = folder / "setting.yaml"
    data = setting_data(FITTED, LOG_RATE_PER_S, {"waited": {"kind": "wait"}})
    setting.write_text(yaml.safe_dump(data, sort_keys=False))
    trace, fitted = folder / "trace.csv", folder / ("fitted.yaml" if extras else "plain.yaml")
    if not trace.exists():
        tailsim("synth", str(setting), "--out", str(trace), "--requests", str(calls), "-s", "5")
    flags = ["--mode", mode, *([] if extras else ["--no-extras"])]
    tailsim("fit", str(trace), "--out", str(fitted), *flags)
    race_data = {
        "name": "figure5-from-fit",
        "seed": 11,
        "deadline_s": 1e6,
        "include": fitted.name,
        "arrivals": {"kind": "poisson", "rate_per_s": 0.1},
        "workflow": data["workflow"],
        "policies": {"waited": {"kind": "wait"}, "raced": {"kind": "race", "attempts": 2}},
        "engine": "des",
    }
    race_file = folder / ("race.yaml" if extras else "race_plain.yaml")
    race_file.write_text(yaml.safe_dump(race_data, sort_keys=False))
    runs = sim.run(load_scenario(race_file), requests=requests).requests
    rows = {}
    for policy, part in runs.groupby("policy", sort=False):
        values = part.loc[part["ok"], "latency_s"].to_numpy()
        rows[policy] = dict(zip(STATS, summarise(values), strict=True))
    return pd.DataFrame(rows).T, fitted.read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=LOG_CALLS, help="calls in the log")
    parser.add_argument(
        "--compare", action="store_true", help="also race on the marginal fit without spells"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    folder = out_dir("figure5_from_fit")
    (folder / "trace.csv").unlink(missing_ok=True)
    table, fitted = round_trip(folder, args.calls)
    table.to_csv(folder / "stats.csv", float_format="%.3f")
    print(f"log: {args.calls} calls at {LOG_RATE_PER_S:g}/s; tailsim fit wrote:\n{fitted}")
    truth = {
        "every_s": SPELL_S / FITTED["spell_share"],
        "last_s": SPELL_S,
        "slowdown": FITTED["spell_slowdown"],
    }
    print("spells set in the log:", {k: round(v, 3) for k, v in truth.items()})
    rows = []
    for policy in ("waited", "raced"):
        for stat in STATS:
            article, ours = ARTICLE[policy][stat], float(table.loc[policy, stat])
            rows.append(
                (f"{policy} {stat}", f"~{article:g} s", f"{ours:5.1f} s {within(ours, article):>4}")
            )
    print(beside(rows, "Figure 5 from a fitted log: the article beside the race on the fit"))
    if args.compare:
        plain, _ = round_trip(folder, args.calls, extras=False)
        plain.to_csv(folder / "stats_without_spells.csv", float_format="%.3f")
        print("without spells (tailsim fit --no-extras):")
        print(plain.round(1).to_string())
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
