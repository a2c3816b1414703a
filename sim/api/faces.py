"""What a face over the API (the command line, a notebook printing as it does) needs from the
layers below, re-exported in one place: the words that print numbers, the rich tables and the
lines the output layer and the wings draw, and the constants their options choose from. So
`sim.cli` imports `sim.api` alone (the import-linter contract in pyproject.toml)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.analysis.reading import price_note, shown_user_ttft, shows_valid_hits
from sim.calibration.report import MODES
from sim.model.errors import ScenarioError
from sim.model.scenario import default_scenario_path
from sim.model.words import percent, percent_interval, plural
from sim.output.explain import breakdown_table
from sim.output.results import FIGURE
from sim.output.slo_view import (
    folder_view,
    nines_note,
    nines_view,
    run_view,
    scenario_slo,
    slo_table,
    sweep_view,
)
from sim.rare.nines import NinesResult
from sim.study.progress_lines import ProgressLines

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FIGURE",
    "MODES",
    "NinesResult",
    "ProgressLines",
    "ScenarioError",
    "as_nines",
    "breakdown_table",
    "default_scenario_path",
    "folder_view",
    "margin_text",
    "nines_lines",
    "nines_note",
    "nines_view",
    "percent",
    "percent_interval",
    "plural",
    "price_note",
    "run_view",
    "scenario_slo",
    "shown_user_ttft",
    "shows_valid_hits",
    "slo_table",
    "stress_words",
    "sweep_view",
]


def nines_lines(result: NinesResult) -> tuple[list[str], list[str], str]:
    """`tailsim nines`' words: (comparison and composition lines, stop lines, the notes file's
    name); matplotlib is imported only here, when nines ran."""
    from sim.rare.output import (  # noqa: PLC0415 - matplotlib only when asked for
        NOTES,
        comparison_lines,
        composition_lines,
        stop_lines,
    )

    return comparison_lines(result) + composition_lines(result), stop_lines(result), NOTES


def as_nines(p: float, lo: float, hi: float) -> str:
    """A miss probability as the hit rate in nines with its CI (`sim.rare.output.as_nines`)."""
    from sim.rare.output import as_nines as words  # noqa: PLC0415

    return words(p, lo, hi)


def stress_words(best: pd.DataFrame) -> tuple[set[str], list[str]]:
    """(the policies whose margin is only a lower bound, the lines saying so) of a stress
    search's margins."""
    from sim.study.stress import bound_lines, lower_bounds  # noqa: PLC0415

    return lower_bounds(best), bound_lines(best)


def margin_text(margin: float, bounded: bool) -> str:
    """A storm margin as printed (`>= N` when no burst tried beat it)."""
    from sim.study.stress import margin_text as words  # noqa: PLC0415

    return words(margin, bounded)
