"""The hit-rate interval of a sweep point (sim.analysis.aggregate): Wilson over the pooled runs,
widened only by the spread between replications that exceeds binomial noise (docs/metrics.md).
A real sweep's band is in tests/integration/test_sweep_interval.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.analysis.aggregate import aggregate_replications, hit_rate_interval, wilson_score
from sim.analysis.analytic import wilson_interval


def _width(lo: float, hi: float) -> float:
    return hi - lo


def test_agreeing_replications_get_exactly_the_pooled_wilson_interval() -> None:
    lo, hi, phi = hit_rate_interval(np.array([0.978, 0.978]), np.array([1000, 1000]))
    assert phi == 0.0
    assert (lo, hi) == pytest.approx(wilson_interval(1956, 2000), abs=1e-12)
    assert lo < 0.978 < hi  # never zero-width
    one = hit_rate_interval(np.array([0.978]), np.array([1000]))
    assert one[:2] == pytest.approx(wilson_interval(978, 1000), abs=1e-12)
    assert math.isnan(one[2])


def test_fractional_wilson_matches_the_whole_count_formula() -> None:
    for s, n in ((0, 10), (3, 10), (10, 10), (978, 1000)):
        assert wilson_score(s / n, n) == pytest.approx(wilson_interval(s, n), abs=1e-12)


def test_two_identical_law_replications_give_about_the_pooled_binomial_width() -> None:
    # 400 points of 2 replications x 1000 independent runs at p = 0.8. Under the rule the width
    # is the pooled Wilson width times ~sqrt(max(1, phi)), phi ~ chi2(1): the median ratio is 1
    # (P(phi <= 1) = 0.683, so the 400-point median sits at 1 with overwhelming probability),
    # the mean E[sqrt(max(1, chi2_1))] = 0.683 + 2 pdf(1) = 1.167 (SE of a 400-point mean ~0.018:
    # we allow 0.08, ~4.5 SE); the old t rule gave a mean ratio near 5. Coverage of p is at
    # least 95% in theory; a 400-point estimate has SE 0.011, so we allow down to 0.92.
    rng = np.random.default_rng(16)
    n, p = 1000, 0.8
    ratios, covered = [], 0
    for a, b in rng.binomial(n, p, size=(400, 2)):
        lo, hi, _ = hit_rate_interval(np.array([a, b]) / n, np.array([n, n]))
        ratios.append(_width(lo, hi) / _width(*wilson_interval(int(a + b), 2 * n)))
        covered += lo <= p <= hi
    assert np.median(ratios) == pytest.approx(1.0)
    assert np.mean(ratios) == pytest.approx(1.167, abs=0.08)
    assert covered / 400 >= 0.92


def test_replications_that_truly_differ_widen_the_band() -> None:
    # 70% and 90% over 1000 runs each: 20 points apart where binomial noise is ~1.3 points
    lo, hi, phi = hit_rate_interval(np.array([0.7, 0.9]), np.array([1000, 1000]))
    pooled = wilson_interval(1600, 2000)
    assert phi > 50
    assert _width(lo, hi) > 5 * _width(*pooled)
    assert lo < 0.8 < hi
    assert lo > 0.0
    assert hi < 1.0


def test_the_printed_sweep_table_marks_widened_bands() -> None:
    from rich.console import Console  # noqa: PLC0415

    from sim.cli.sweep import sweep_table  # noqa: PLC0415

    stacked = pd.DataFrame(
        {
            "k": [1, 1, 2, 2],
            "policy": ["p"] * 4,
            "replication": [0, 1, 0, 1],
            "requests": [1000] * 4,
            "runs": [1000] * 4,
            "hit_rate": [0.7, 0.9, 0.8, 0.8],
            "cost_per_request_usd": [1.0] * 4,
            "cost_per_success_usd": [1.0] * 4,
            "p95_s": [1.0] * 4,
        }
    )
    console = Console(width=200, record=True)
    console.print(sweep_table(aggregate_replications(stacked, ["k"]), ["k"]))
    lines = [line for line in console.export_text().splitlines() if " p " in line]
    assert len(lines) == 2
    assert "]*" in lines[0]
    assert "]*" not in lines[1]
