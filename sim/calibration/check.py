"""Does a fitted `providers:` block reproduce its log? Run it and compare percentiles.

One scenario with one step per fitted (provider, model), all in parallel, no quota, no queue
(a million slots), a deadline that never binds and the plain `wait` policy: each step's
successful-call latency is the uncontended latency the fit implies. Its p50 / p95 / p99 are set
beside the log's, with the log percentile's own 95% interval (order statistics), since a p99 of
95 calls is itself uncertain.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.calibration.report import (
    GroupFit,
    fitted_document,
    order_interval,
    sample_files,
    yaml_name,
)
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario
from sim.study.runner import run as run_policies

QUANTILES = (50, 95, 99)


def replay_scenario(fits: list[GroupFit], seed: int = 1) -> dict[str, Any]:
    """The scenario data: the fitted models and providers, one parallel step per group."""
    document = fitted_document(fits)
    steps = [
        {
            "id": f"s{i}",
            "model": yaml_name(g.fit.model),
            "provider": yaml_name(g.fit.provider),
            "input_tokens": 0,
            "output_tokens": g.fit.output_block(),
        }
        for i, g in enumerate(fits)
    ]
    return {
        "name": "fit-replay",
        "seed": seed,
        "deadline_s": 1e7,
        "arrivals": {"kind": "poisson", "rate_per_s": 1.0},
        **document,
        "workflow": {"steps": steps},
        "policies": {"wait": {"kind": "wait"}},
        "pilot": {"requests": 20},
    }


def replay(
    fits: list[GroupFit], requests: int = 10_000, seed: int = 1, tolerance: float = 0.05
) -> pd.DataFrame:
    """Per group and percentile: the log's value and interval, the simulated value, whether
    they agree within `tolerance` (relative) and whether the simulated value is inside the
    interval; plus the fitted law's own value (what the simulator should reproduce)."""
    with tempfile.TemporaryDirectory() as folder:  # empirical groups' samples, read at load
        for name, text in sample_files(fits).items():
            (Path(folder) / name).write_text(text, encoding="utf-8")
        data = replay_scenario(fits, seed)
        scenario = scenario_from_dict(data, source="fit-replay", base_dir=Path(folder))
    calls = run_policies(compile_scenario(scenario), requests=requests, seed=seed).calls
    calls = calls[calls["outcome"] == "ok"]
    rows = []
    for i, g in enumerate(fits):
        mine = calls[calls["step"] == f"s{i}"]
        simulated = (mine["end_s"] - mine["start_s"]).to_numpy(float)
        for q in QUANTILES:
            observed = float(np.percentile(g.observed, q))
            value = float(np.percentile(simulated, q))
            low, high = order_interval(g.observed, q / 100)
            rows.append(
                {
                    "provider": g.fit.provider,
                    "model": g.fit.model,
                    "fitted_from": g.fit.mode,
                    "n": len(g.observed),
                    "quantile": f"p{q}",
                    "observed_s": observed,
                    "interval_lo_s": low,
                    "interval_hi_s": high,
                    "simulated_s": value,
                    "fitted_s": float(np.percentile(g.modelled, q)),
                    "error": value / observed - 1,
                    "within_tolerance": abs(value / observed - 1) < tolerance,
                    "within_interval": low <= value <= high,
                }
            )
    return pd.DataFrame(rows)
