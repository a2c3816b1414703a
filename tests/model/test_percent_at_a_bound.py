"""A share equal to a bound prints level with it, by the one rule every table uses
(`sim.model.words.percent_digits`): `tailsim tune --slo-target 0.99` printed the tuned policy's
792 / 800 as "98.999999999999%" under a table row that said 99.00% (issue 25, item 1)."""

from __future__ import annotations

from sim.analysis.slo import judge
from sim.model.words import percent, percent_digits


def test_a_share_at_the_target_prints_as_the_target() -> None:
    reading = judge(792, 800, 0.99)  # 0.99 exactly, as a float: 0.98999999999999999112...
    assert reading.estimate.startswith("99.0% [")
    assert percent_digits(792 / 800, 1, below=(0.99, 1.0)) == "99.0"
    assert percent(792 / 800, 2) == "99.00%"


def test_a_share_just_below_the_target_still_shows_it_is_below() -> None:
    assert percent_digits(0.98995, 1, below=(0.99,)) == "98.995"
    assert judge(7919, 8000, 0.99).estimate.startswith("98.99% [")  # 0.989875 -> 98.99 < 99
    assert percent(0.99993) == "99.99%"  # a rare miss is still never rounded away
    assert percent_digits(0.9899999999999999, 1, below=(0.99,)).startswith("98.99999999")


def test_tunes_table_never_rounds_across_the_slo_target() -> None:
    """tune's table and its SLO table read the same share the same way."""
    import pandas as pd  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415

    from sim.cli.search import tune_table  # noqa: PLC0415

    row = {"policy": "tuned", "valid_hit_rate": 0.98995, "hit_rate": 0.99,
           "cost_per_request_usd": 0.1, "quality_mean": 1.0}  # fmt: skip
    console = Console(width=200, record=True)
    console.print(tune_table(pd.DataFrame([row]), "note", (0.99, "valid_hit_rate")))
    text = console.export_text()
    assert "98.995%" in text  # not "99.00%": the SLO table says it misses 99%
    assert "99.00%" in text  # the hit rate, at the target exactly
