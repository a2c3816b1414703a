"""Figure 5 from a fit (experiments/figure5_from_fit.py, leaner): synth a log of the Figure 5
setting, fit it (spells by fit_extras, then fit_group, the marginal fit of `tailsim fit`, on the
calls outside spells), race on
the fitted scenario: waited and raced p50, p99 and std within 20% of the article.

Seeded. 50,000 calls in the log (about 80 spells: the spell share's SE is ~11%) and 20,000
raced requests (the p99's SE ~2%); the full script uses 100,000 and 40,000."""

from __future__ import annotations

import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import figure5_from_fit as experiment  # noqa: E402
from figure5 import ARTICLE, STATS  # noqa: E402


def test_figure5_from_a_fitted_log() -> None:
    provider, evidence = experiment.fit_log(experiment.synth_log(50_000))
    assert evidence["episodes"]["supported"], evidence["episodes"]
    table = experiment.race(provider, requests=20_000)
    for policy in ("waited", "raced"):
        for stat in STATS:
            ours, article = float(table.loc[policy, stat]), ARTICLE[policy][stat]
            assert abs(ours / article - 1) <= 0.2, (policy, stat, ours, article, provider)
