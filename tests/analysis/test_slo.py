"""SLO nines (`slo: {target: ...}`): printing that never rounds across the target, the
met / missed / undecided / not resolved verdicts, the Wilson interval at zero misses, the key's
validation, tune against a target and the finalists' check by `nines` (docs/metrics.md#slo-nines).
The commands showing it (run / sweep / explain / report / tune / nines) are in
tests/integration/test_slo.py."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sim
from sim.analysis.aggregate import aggregate_replications, hit_rate_interval
from sim.analysis.slo import (
    MET,
    MISSED,
    UNDECIDED,
    UNRESOLVED,
    Z95,
    decimals_for,
    judge,
    miss_reading,
    percent,
    run_readings,
    runs_to_resolve,
    sweep_readings,
    target_text,
)
from sim.model.scenario import scenario_from_dict
from sim.output.slo_view import nines_note, nines_view
from sim.output.store import fingerprint
from sim.plan import compile_scenario
from sim.rare import finalists as finalists_module
from sim.study.tune import Evaluator, Score, SloPart, tune
from tests.helpers import REPO_ROOT

FLOOR = REPO_ROOT / "scenarios" / "quality-floor.yaml"

# ---------------------------------------------------------------- printing


def test_decimals_show_the_targets_nines_and_one_digit_more() -> None:
    assert decimals_for(0.9999) == 3  # 99.987%
    assert decimals_for(0.999) == 2
    assert decimals_for(0.99999) == 4
    assert decimals_for(0.99) == 1
    assert decimals_for(0.95) == 1
    assert decimals_for(0.5) == 1
    assert target_text(0.9999) == "99.99%"
    assert target_text(0.95) == "95%"


def test_a_miss_is_never_rounded_up_to_the_target() -> None:
    # at 3 decimals 99.9949% would print 99.995%, which is the target: more digits instead
    assert percent(0.999949, 0.99995, 3) == "99.9949"
    assert percent(0.99989996, 0.9999, 3) == "99.989996"
    assert percent(0.999951, 0.99995, 3) == "99.995"  # on the target's side: plain rounding
    assert percent(0.99987, 0.9999, 3) == "99.987"
    # a value below 1 never prints as 100, a value at 1 prints as exactly 100
    assert percent(0.9999996, 0.9999, 3) == "99.99996"
    assert percent(1.0, 0.9999, 3) == "100"


def test_printed_figures_stay_on_the_targets_side_for_many_values() -> None:
    # values within a few rounding steps of each target, both sides: the printed percentage
    # must compare with the target exactly as the value does (exact decimal comparison)
    rng = np.random.default_rng(20)
    for target in (0.95, 0.999, 0.9999, 0.99995, 0.99999):
        d = decimals_for(target)
        for value in target + rng.uniform(-3, 3, 2000) * 10.0 ** -(d + 2):
            shown = Decimal(percent(float(value), target, d))
            exact = Decimal(float(value)) * 100
            assert (shown < Decimal(str(target)) * 100) == (exact < Decimal(str(target)) * 100)
            assert shown < 100 or value >= 1.0


def test_a_reading_prints_as_the_issue_shows_it() -> None:
    reading = judge(999_870, 1_000_000, 0.9999)
    assert reading.estimate.startswith("99.987% [99.98")
    assert reading.status == MISSED  # Wilson upper end 99.9892% < 99.99%
    assert reading.text.endswith("missed")


# ---------------------------------------------------------------- verdicts and the interval


def test_met_missed_and_undecided_follow_the_interval() -> None:
    target = 0.9999
    assert judge(999_990, 1_000_000, target).status == MET  # [99.9982, 99.9995]
    assert judge(97_000, 100_000, target).status == MISSED
    straddles = judge(99_990, 100_000, target)  # 99.990% [99.982, 99.995]
    assert straddles.status == UNDECIDED
    assert "undecided: CI straddles 99.99%" in straddles.text
    # an interval given (a sweep's widened one) decides, not the plain Wilson one
    assert judge(999_990, 1_000_000, target, interval=(0.99985, 0.99999)).status == UNDECIDED
    assert judge(999_990, 1_000_000, target, interval=(0.9999, 0.99999)).status == MET


def test_wilson_at_zero_misses_and_the_runs_needed_to_resolve() -> None:
    # with no miss the Wilson interval is [n / (n + z^2), 1]: the target is shown met from
    # n >= target z^2 / (1 - target) runs (38,411 for four nines, about 3.84 / (1 - target))
    n = 2000
    reading = judge(n, n, 0.9999)
    assert reading.lo == pytest.approx(n / (n + Z95**2), rel=1e-12)
    assert reading.hi == 1.0
    need = runs_to_resolve(0.9999)
    assert need == 38_411
    assert judge(need, need, 0.9999).status == MET
    assert judge(need - 1, need - 1, 0.9999).status == UNRESOLVED
    assert runs_to_resolve(0.99) == 381


def test_zero_misses_in_too_few_runs_is_not_a_misleading_100_percent() -> None:
    reading = judge(2000, 2000, 0.9999)
    assert reading.status == UNRESOLVED
    assert "100.000" not in reading.text
    assert not reading.estimate.startswith("100")
    assert reading.estimate == "no miss in 2,000 runs [99.808, 100]"
    assert "not resolved: run `tailsim nines`" in reading.verdict
    # a few misses in too few runs: the estimate stands, the verdict still says not resolved
    few = judge(1999, 2000, 0.9999)
    assert few.status == UNRESOLVED
    assert few.estimate.startswith("99.950% [")
    # too few runs to show it met, but enough to show it missed: missed is a verdict
    assert judge(1900, 2000, 0.9999).status == MISSED


def test_run_readings_use_the_metric_and_the_runs_of_each_row() -> None:
    summary = pd.DataFrame(
        {
            "policy": ["a", "b"],
            "runs": [400, 400],
            "hit_rate": [1.0, 0.9],
            "valid_hit_rate": [0.95, math.nan],
        }
    )
    hit = run_readings(summary, 0.99, "hit_rate")
    assert [r.status for r in hit] == [MET, MISSED]  # 400 >= 381 runs without a miss
    valid = run_readings(summary, 0.99, "valid_hit_rate")
    assert valid[0].status == MISSED
    assert valid[0].misses == 20
    assert valid[1].estimate == "n/a"  # no figure rather than a made-up one


def test_sweep_readings_reuse_the_sweeps_widened_interval() -> None:
    # replications that differ far more than binomial noise: the pooled Wilson is widened by
    # sqrt(phi) (sim.analysis.aggregate) and the runs behind the verdict shrink by phi
    reps = pd.DataFrame(
        {
            "x": [1, 1, 2, 2],
            "policy": ["p"] * 4,
            "replication": [0, 1, 0, 1],
            "runs": [1000] * 4,
            "requests": [1000] * 4,
            "hit_rate": [0.999, 0.96, 0.999, 0.998],
            "valid_hit_rate": [0.999, 0.96, 0.999, 0.998],
            "cost_per_request_usd": [0.1] * 4,
            "cost_per_success_usd": [0.1] * 4,
        }
    )
    pooled = aggregate_replications(reps, ["x"])
    readings = sweep_readings(pooled, reps, ["x"], 0.99, "hit_rate")
    for reading, row in zip(readings, pooled.to_dict("records"), strict=True):
        assert (reading.lo, reading.hi) == (row["hit_rate_lo"], row["hit_rate_hi"])
        assert reading.runs == 2000
    _lo, _hi, phi = hit_rate_interval(np.array([0.999, 0.96]), np.array([1000, 1000]))
    assert phi > 1
    assert readings[0].effective_runs == pytest.approx(2000 / phi)
    # pooled alone, 1,959 of 2,000 would be missed; replications 4 points apart leave ~53
    # effective runs, too few to tell 99%: the wider interval is honest about it
    assert judge(1959, 2000, 0.99).status == MISSED
    assert readings[0].status == UNRESOLVED
    assert readings[1].status == MET  # 99.85% [99.57, 99.95], replications agree
    valid = sweep_readings(pooled, reps, ["x"], 0.99, "valid_hit_rate")
    assert [(r.lo, r.hi) for r in valid] == [(r.lo, r.hi) for r in readings]


def test_an_estimated_miss_probability_reads_against_the_target() -> None:
    # tailsim nines gives P(miss) with its interval: the success share is its complement
    reading = miss_reading(1.3e-4, 1.1e-4, 1.5e-4, 50_000, 0.9999)
    assert (reading.rate, reading.lo, reading.hi) == pytest.approx((0.99987, 0.99985, 0.99989))
    assert reading.estimate == "99.987% [99.985, 99.989]"  # the issue's example
    assert reading.status == MISSED
    assert miss_reading(5e-6, 2e-6, 9e-6, 50_000, 0.9999).status == MET
    assert miss_reading(1e-4, 6e-5, 1.4e-4, 50_000, 0.9999).status == UNDECIDED
    assert miss_reading(math.nan, math.nan, math.nan, 0, 0.9999).estimate == "n/a"


def test_a_bare_number_is_the_target_and_the_default_metric_is_valid_hits(
    contract_data: dict[str, Any],
) -> None:
    spec = scenario_from_dict({**contract_data, "slo": 0.999})
    assert spec.slo is not None
    assert (spec.slo.target, spec.slo.metric) == (0.999, "valid_hit_rate")
    assert scenario_from_dict(contract_data).slo is None  # off unless asked for


def test_the_slo_is_not_part_of_a_sweeps_identity(contract_data: dict[str, Any]) -> None:
    # it changes no number: adding one to a finished sweep re-reads it instead of re-running
    plain = scenario_from_dict(contract_data)
    with_slo = scenario_from_dict({**contract_data, "slo": {"target": 0.999}})
    assert fingerprint(compile_scenario(plain), None, None) == fingerprint(
        compile_scenario(with_slo), None, None
    )


# ---------------------------------------------------------------- tune against a target


def test_the_search_prefers_the_cheapest_candidate_that_meets_the_target() -> None:
    def score(cost: float, hit: float, meets: bool | None, lower: float = 0.0) -> Score:
        slo = None if meets is None else SloPart(meets, lower)
        return Score(True, hit, -cost, 1.0, 100, slo)

    cheap_miss = score(0.05, 0.97, False, 0.95)
    dear_meets = score(0.09, 0.999, True, 0.991)
    mid_meets = score(0.07, 0.995, True, 0.990)
    assert max(cheap_miss, dear_meets, mid_meets) == mid_meets  # cheapest that meets
    assert max(cheap_miss, score(0.2, 0.98, False, 0.96)) != cheap_miss  # closer to meeting
    # without an SLO the order is unchanged: the highest valid hit rate, then the lowest cost
    assert max(score(0.05, 0.97, None), score(0.09, 0.999, None)).cost == 0.09
    infeasible = Score(False, 1.0, -0.01, 1.0, 100, SloPart(True, 0.999))
    assert max(infeasible, cheap_miss) == cheap_miss  # the cost cap and quality floor first
    # junk on time is reported, not ranked: the order and equality agree (no move "improves")
    same = Score(True, 0.97, -0.05, 1.0, 100, SloPart(False, 0.95, junk=True))
    assert same == cheap_miss
    assert not same > cheap_miss


def test_tune_honours_the_target_where_the_cheapest_candidate_misses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every score of the search is recorded: on the full requests, the winner must meet 90%
    # valid hits, be the cheapest of those that do, and a cheaper candidate must miss it
    scenario = sim.load_scenario(FLOOR)
    scored: list[Score] = []
    original = Evaluator.score

    def record(self: Evaluator, knobs: Any, n: int) -> Score:
        result = original(self, knobs, n)
        scored.append(result)
        return result

    monkeypatch.setattr(Evaluator, "score", record)
    n = 160
    result = tune(compile_scenario(scenario), requests=n, slo=(0.9, "valid_hit_rate"))
    full = [s for s in scored if s.n == n]
    meeting = [s for s in full if s.slo is not None and s.slo.meets]
    assert result.score.slo is not None
    assert result.score.slo.meets
    assert result.score.cost == min(s.cost for s in meeting)
    assert any(s.cost < result.score.cost and not s.slo.meets for s in full if s.slo)
    plain = tune(
        compile_scenario(scenario), requests=n
    )  # no target: the highest valid hit rate, dearer here
    assert plain.score.cost > result.score.cost


# ---------------------------------------------------------------- finalists by `tailsim nines`


class _Estimate:
    """What `estimate_nines` returns, as far as the finalists' check reads it."""

    def __init__(self, rows: list[tuple[str, float, float, float, float]]) -> None:
        self.table = pd.DataFrame(
            [
                {
                    "policy": p,
                    "miss_probability": m,
                    "ci_lo": lo,
                    "ci_hi": hi,
                    "runs": 10_000,
                    "rel_error": rel,
                }
                for p, m, lo, hi, rel in rows
            ]
        )
        self.method = "importance"
        self.warnings: list[str] = []


def _finalists(costs: list[float], junk: list[bool]) -> list[tuple[dict[str, Any], Score]]:
    step = {"s1": {"kind": "adaptive", "cutoff": 3.0}}
    return [
        (step, Score(True, 0.99, -c, 1.0, 100, SloPart(False, 0.95, j)))
        for c, j in zip(costs, junk, strict=True)
    ]


@pytest.mark.parametrize(
    ("misses", "junk", "kept", "statuses"),
    [
        # the cheapest misses 99.99%, the next meets it (CI [99.998, 99.9995]): kept
        ([(1e-3, 8e-4, 1.2e-3, .1), (1e-5, 5e-6, 2e-5, .1), (2e-6, 1e-6, 4e-6, .1)], [False] * 3,
         1, [MISSED, MET, MET]),
        # ... unless it delivered junk on time and the SLO counts valid hits: then the next
        ([(1e-3, 8e-4, 1.2e-3, .1), (1e-5, 5e-6, 2e-5, .1), (2e-6, 1e-6, 4e-6, .1)],
         [False, True, False], 2, [MISSED, UNDECIDED, MET]),
        # ... or its estimate has not converged (relative error 0.64 > 0.5): then the next
        ([(1e-3, 8e-4, 1.2e-3, .1), (1e-5, 4e-6, 1.6e-5, .64), (2e-6, 1e-6, 4e-6, .1)],
         [False] * 3, 2, [MISSED, UNDECIDED, MET]),
        # none meets it: the one with the highest lower end, whatever it costs
        ([(1e-3, 8e-4, 1.2e-3, .1), (2e-4, 1.5e-4, 3e-4, .1), (1e-4, 5e-5, 1.5e-4, .1)],
         [False] * 3, 2, [MISSED, MISSED, UNDECIDED]),
    ],
)  # fmt: skip
def test_the_finalists_check_keeps_the_cheapest_that_nines_shows_meeting_the_target(
    monkeypatch: pytest.MonkeyPatch,
    misses: list[tuple[float, float, float, float]],
    junk: list[bool],
    kept: int,
    statuses: list[str],
) -> None:
    scenario = sim.load_scenario(FLOOR)
    seen: dict[str, Any] = {}

    def fake(candidates: Any, names: list[str], *args: Any, **kwargs: Any) -> _Estimate:
        seen["policies"] = list(candidates.policies)
        return _Estimate([(n, *m) for n, m in zip(names, misses, strict=True)])

    monkeypatch.setattr(finalists_module, "estimate_nines", fake)
    finalists = _finalists([0.05, 0.07, 0.09], junk)
    index, check = finalists_module.check_finalists(
        compile_scenario(scenario), finalists, (0.9999, "valid_hit_rate")
    )
    assert seen["policies"] == ["tuned_1", "tuned_2", "tuned_3"]  # estimated together
    assert index == kept
    assert [r.status for r in check.readings] == statuses
    assert "<- kept as `tuned`" in finalists_module.check_lines(check)[kept + 1]
    if statuses[1] == UNDECIDED:  # said why, not "CI straddles"
        assert "straddles" not in check.readings[1].verdict
        assert check.readings[1].verdict.startswith("undecided: ")


def test_tune_asks_the_check_only_where_plain_runs_cannot_resolve_the_target() -> None:
    scenario = sim.load_scenario(FLOOR)
    calls: list[list[float]] = []

    def check(_s: Any, finalists: list[tuple[dict[str, Any], Score]], _slo: Any) -> Any:
        calls.append([score.cost for _, score in finalists])
        return len(finalists) - 1, None  # keep the last finalist

    # 40 requests cannot show 99% met (381 runs needed): the finalists go to the check
    result = tune(
        compile_scenario(scenario), requests=40, slo=(0.99, "valid_hit_rate"), check=check
    )
    assert len(calls) == 1
    assert 2 <= len(calls[0]) <= 4
    assert result.score.cost == calls[0][-1]  # the kept finalist is the one written
    # 40 requests can show 90% met (35 needed): plain runs decide, no check
    tune(compile_scenario(scenario), requests=40, slo=(0.9, "valid_hit_rate"), check=check)
    assert len(calls) == 1


# ---------------------------------------------------------------- `tailsim nines` with an SLO


def test_a_nines_table_reads_against_the_scenarios_target() -> None:
    table = pd.DataFrame(
        {
            "policy": ["race", "hedge", "fresh"],
            "miss_probability": [5e-6, 2.8e-4, 1e-5],
            "ci_lo": [4e-6, 2.5e-4, 4e-6],
            "ci_hi": [6e-6, 3.1e-4, 1.6e-5],
            "runs": [12_000] * 3,
            "rel_error": [0.1, 0.1, 0.64],
        }
    )
    view = nines_view(table, (0.9999, "valid_hit_rate"))
    assert view is not None
    assert [r.status for r in view.readings] == [MET, MISSED, UNDECIDED]
    # 1 - 5e-6 is 99.9995% (read as its shortest decimal, no longer as the binary 99.99949...):
    # at 3 decimals it would round up to 100.000, so a fourth decimal shows; 100.000 never shown
    assert view.readings[0].estimate == "99.9995% [99.999, 99.9996]"
    assert "not converged (relative error 0.64)" in view.readings[2].verdict
    assert nines_view(table, None) is None


def test_the_nines_note_appears_only_where_valid_hits_can_fall_below_hits(
    contract_data: dict[str, Any],
) -> None:
    plain = scenario_from_dict({**contract_data, "slo": {"target": 0.999}})
    assert (
        nines_note(compile_scenario(plain)) is None
    )  # nothing can deliver junk on time: hits are valid hits
    floor = scenario_from_dict({**contract_data, "slo": {"target": 0.999}, "quality_floor": 0.5})
    assert "not invalid answers" in (nines_note(compile_scenario(floor)) or "")
    counted = {**contract_data, "slo": {"target": 0.999, "metric": "hit_rate"}}
    assert (
        nines_note(compile_scenario(scenario_from_dict({**counted, "quality_floor": 0.5}))) is None
    )
