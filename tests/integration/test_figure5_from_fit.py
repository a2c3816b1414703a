"""Figure 5 from a fit (experiments/figure5_from_fit.py, leaner): `tailsim synth` a log of the
Figure 5 setting, `tailsim fit` it (marginal laws and extras: the bad spells placed, the serving
path refitted outside them), race on a scenario that `include:`s the fitted file: waited and
raced p50, p99 and std within 20% of the article.

Seeded. 50,000 calls in the log (about 80 spells: the spell share's SE is ~11%) and 20,000
raced requests (the p99's SE ~2%); the full script uses 100,000 and 40,000. `--mode
first_token` (the mode `auto` picks on the full run) spares the test the second family."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

EXPERIMENTS = REPO_ROOT / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import figure5_from_fit as experiment  # noqa: E402
from figure5 import ARTICLE, STATS  # noqa: E402


@pytest.mark.slow
def test_figure5_from_a_fitted_log(tmp_path: Path) -> None:
    table, fitted = experiment.round_trip(
        tmp_path, calls=50_000, requests=20_000, mode="first_token"
    )
    assert "episodes:" in fitted, fitted
    for policy in ("waited", "raced"):
        for stat in STATS:
            ours, article = float(table.loc[policy, stat]), ARTICLE[policy][stat]
            assert abs(ours / article - 1) <= 0.2, (policy, stat, ours, article, fitted)
