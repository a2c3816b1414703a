"""Rare-event estimates (sim.rare): the tilted bank, the weighted tally, the cross-entropy step,
and the estimate held to an exact chain and to plain Monte Carlo. The command (`tailsim nines`:
its table, refusals, figure) is in tests/integration/test_nines.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.analysis.chain_exact import chain_miss_probability
from sim.model.latency import U_STALL, U_TTFT, LogNormal
from sim.model.scenario import load_scenario, with_overrides
from sim.model.streams import CallDrawBank, Streams
from sim.plan import compile_scenario
from sim.rare import nines as nines_module
from sim.rare.nines import STOPPED_BY_BUDGET, STOPPED_BY_TARGET, estimate_nines
from sim.rare.output import stop_lines
from sim.rare.tilt import SlotTilt, Tilt, TiltedDrawBank, identity_tilt, slot_keys
from sim.rare.weighted import WeightedTally, cross_entropy_update, plain_runs_needed
from tests.helpers import REPO_ROOT

CHAIN = REPO_ROOT / "tests" / "data" / "nines-chain.yaml"
#: No wall-clock budget: every run here ends at its target or its cap of runs, so its numbers
#: are the same on any machine (a budget that binds makes them depend on the machine's speed).
NO_BUDGET = math.inf


def chain_exact(deadline_s: float) -> float:
    """The chain's exact miss probability (its YAML's laws: five steps, 300 tokens each)."""
    return chain_miss_probability(
        5,
        LogNormal.from_median_p99(0.8, 4.0),
        LogNormal.from_median_p99(60, 110),
        300,
        0.05,
        LogNormal.from_median_p99(8, 30),
        deadline_s,
    )


def test_an_identity_tilt_draws_exactly_the_plain_bank() -> None:
    keys = slot_keys(["a", "b"], 2)
    plain = identity_tilt(keys, {"a": (0.05, 0.01), "b": (0.05, 0.0)})
    tilted = TiltedDrawBank(Streams(3, "main").child("calls"), 500, [plain], [1.0])
    bank = CallDrawBank(Streams(3, "main").child("calls"), 500)
    for step, attempt in keys:
        assert np.array_equal(tilted.uniforms(step, attempt, 0), bank.uniforms(step, attempt, 0))
    assert np.array_equal(tilted.uniforms("a", 5, 0), bank.uniforms("a", 5, 0))  # untilted slot
    assert np.all(tilted.weight == 1.0)


def test_a_tilt_moves_the_inputs_and_its_weights_average_one() -> None:
    # E_q[w] = 1 exactly; 200,000 draws: the mean's SE is about 0.004 here, tolerance 4 SE
    keys = slot_keys(["a"], 1)
    tilt = Tilt({("a", 0): SlotTilt((2.0, -1.0, 1.5), (0.05, 0.02), (0.4, 0.1))})
    plain = identity_tilt(keys, {"a": (0.05, 0.02)})
    bank = TiltedDrawBank(Streams(5).child("calls"), 200_000, [plain, tilt], [0.1, 0.9])
    u = bank.uniforms("a", 0, 0)
    w = bank.weight
    assert abs(w.mean() - 1) < 4 * w.std() / math.sqrt(len(w))
    assert 0.36 < (u[:, U_STALL] < 0.05).mean() < 0.38  # 0.1 * 0.05 + 0.9 * 0.4 = 0.365
    assert w.max() <= 1 / 0.1 + 1e-9  # the defensive share bounds every weight
    # the weighted first-token tail is the plain one: P(z > 2) = 0.02275
    est = float(np.mean(w * (u[:, U_TTFT] > 0.97725)))
    assert abs(est - 0.02275) < 0.0015


def test_the_weighted_tally_follows_its_formulas() -> None:
    t = WeightedTally()
    t.add(np.array([2.0, 0.5, 1.0, 4.0]), np.array([True, False, True, False]))
    assert t.n == 4
    assert t.hits == 2
    assert t.estimate == pytest.approx(0.75)
    x = np.array([2.0, 0.0, 1.0, 0.0])
    assert t.standard_error == pytest.approx(x.std(ddof=1) / 2)
    assert t.ess == pytest.approx(9 / 5)
    assert t.max_share == pytest.approx(2 / 3)
    empty = WeightedTally()
    empty.add(np.ones(100), np.zeros(100, dtype=bool))
    assert empty.interval(10.0) == (0.0, pytest.approx(0.3))
    assert empty.relative_error == math.inf
    assert plain_runs_needed(1e-4) == pytest.approx(1.959964**2 * (1 - 1e-4) / 1e-6, rel=1e-5)


def test_cross_entropy_fits_the_conditional_mean_and_share() -> None:
    # event: first-token z > 2 or a stall; CE's exact answer from the plain draws: theta =
    # E[z | event], stall share = P(stall | event); 100,000 draws, tolerance ~5 SE
    keys = slot_keys(["a"], 1)
    plain = identity_tilt(keys, {"a": (0.05, 0.0)})
    bank = TiltedDrawBank(Streams(9).child("calls"), 100_000, [plain], [1.0])
    sample = bank.samples[("a", 0)]
    event = (sample.z[:, 0] > 2) | (sample.uniforms[:, U_STALL] < 0.05)
    fitted = cross_entropy_update(plain, bank.samples, bank.weight * event, smoothing=1.0)
    s = fitted.slots[("a", 0)]
    assert s.theta[0] == pytest.approx(sample.z[event, 0].mean(), abs=1e-9)
    p_event = 0.02275 + 0.05 - 0.02275 * 0.05
    assert s.mass[0] == pytest.approx(0.05 / p_event, abs=0.02)


def test_the_chain_estimate_covers_the_exact_miss_in_18_of_20_seeds() -> None:
    """Must-show (a): deadline 110 s, exact miss 1.18e-5 (FFT); each seed's run stops at +-10%
    (all do well inside its budget); a 95% interval misses the truth 1 time in 20 on average,
    so 3 or more misses in 20 has probability 0.075 if the intervals are right (binomial)."""
    scenario = load_scenario(CHAIN)
    exact = chain_exact(scenario.deadline_s)
    assert 1.1e-5 < exact < 1.3e-5
    covered, rel_errors = 0, []
    for seed in range(20):
        row = estimate_nines(
            compile_scenario(scenario), None, 0.1, NO_BUDGET, seed=seed, attempts=1
        ).table.iloc[0]
        covered += row["ci_lo"] <= exact <= row["ci_hi"]
        rel_errors.append(row["rel_error"])
    assert covered >= 18, covered
    assert max(rel_errors) <= 0.1


def test_the_exact_chain_matches_plain_monte_carlo_where_it_is_cheap() -> None:
    # deadline 40 s: exact 0.1217; 20,000 plain runs: SE 0.0023, tolerance 4 SE
    scenario = with_overrides(load_scenario(CHAIN), {"deadline_s": 40.0})
    plain = estimate_nines(
        compile_scenario(scenario), None, 1e-9, NO_BUDGET, method="plain", max_runs=20_000
    )
    row = plain.table.iloc[0]
    exact = chain_exact(40.0)
    assert abs(row["miss_probability"] - exact) < 4 * math.sqrt(exact * (1 - exact) / row["runs"])
    assert chain_exact(40.0) == pytest.approx(
        chain_miss_probability(5, LogNormal.from_median_p99(0.8, 4.0),
                               LogNormal.from_median_p99(60, 110), 300, 0.05,
                               LogNormal.from_median_p99(8, 30), 40.0, dx=0.0025),
        rel=1e-3,
    )  # fmt: skip


@pytest.mark.slow
def test_importance_sampling_agrees_with_plain_runs_near_1e_3() -> None:
    """Must-show (b), small: the default scenario at deadline 120 s, hedge (miss ~2.6e-3):
    the rare-event estimate against 150,000 plain runs, within 3 joint standard errors."""
    scenario = with_overrides(load_scenario(REPO_ROOT / "scenarios" / "default.yaml"),
                              {"deadline_s": 120.0})  # fmt: skip
    rare = estimate_nines(compile_scenario(scenario), ["hedge"], 0.1, NO_BUDGET, seed=1).table.iloc[
        0
    ]
    plan = compile_scenario(scenario)
    plain = estimate_nines(plan, ["hedge"], 1e-9, NO_BUDGET, seed=2, method="plain",
                           max_runs=150_000).table.iloc[0]  # fmt: skip
    se = math.hypot(rare["ci_hi"] - rare["ci_lo"], plain["ci_hi"] - plain["ci_lo"]) / (2 * 1.96)
    assert abs(rare["miss_probability"] - plain["miss_probability"]) < 3 * se
    assert rare["runs"] + rare["pilot_runs"] < plain["runs"]
    assert rare["rel_error"] <= 0.1


def _wild_tilt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the cross-entropy fit by a wild tilt without the defensive share: a few draws
    carry every estimate, so the run falls back to plain sampling after its first batch."""

    def wild(setup, name, start, n, seed, estimates, until):  # type: ignore[no-untyped-def]
        slots = {k: SlotTilt((-3.0, 3.0, -3.0), s.cut, (0.9, s.mass[1])) for k, s in
                 start.slots.items()}  # fmt: skip
        return Tilt(slots), Tilt(slots)

    monkeypatch.setattr(nines_module, "_fit", wild)
    monkeypatch.setattr(nines_module, "DEFENSIVE", 1e-12)  # the vectorized engine's share


def test_degenerate_weights_fall_back_to_plain_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    # a wild tilt without the defensive share: a few draws carry the estimate; the run must
    # say so and finish with plain sampling (wait misses 16% at 90 s: plain is cheap there)
    scenario = load_scenario(REPO_ROOT / "scenarios" / "default.yaml")
    _wild_tilt(monkeypatch)
    result = estimate_nines(compile_scenario(scenario), ["wait"], 0.1, NO_BUDGET, seed=4)
    row = result.table.iloc[0]
    assert result.fallback
    assert row["method"] == "plain"
    assert bool(row["fallback"])
    assert any("degenerate" in w for w in result.warnings)
    assert abs(row["miss_probability"] - 0.168) < 0.02  # tailsim run's 83.2% hit rate


def test_the_event_engine_estimate_holds_where_nothing_is_shared() -> None:
    """The chain on the event engine (10,000 slots: nothing binds, so the weights are exact):
    deadline 72.5 s, exact miss 1.0e-3; the 95% CI of the seeded run covers it, and the run
    stopped at the target."""
    scenario = with_overrides(load_scenario(CHAIN), {"deadline_s": 72.5})
    exact = chain_exact(72.5)
    row = estimate_nines(
        compile_scenario(scenario), None, 0.1, NO_BUDGET, seed=3, engine="des", attempts=1
    ).table.iloc[0]
    assert row["engine"] == "des"
    assert row["ci_lo"] <= exact <= row["ci_hi"]
    assert row["rel_error"] <= 0.1


def test_the_jump_update_gives_the_big_jump_to_one_step() -> None:
    """Elite: some step drew a stall with length score z > 2 (five alike steps, pooled). The
    EM step must put the long stall in the jump tilt (likely stall, shifted length) and leave
    the background near the plain law: the elite draw's other steps are ordinary."""
    from sim.rare.weighted import jump_update  # noqa: PLC0415

    steps = [f"s{i}" for i in range(5)]
    keys = slot_keys(steps, 1)
    plain = identity_tilt(keys, dict.fromkeys(steps, (0.05, 0.0)))
    bank = TiltedDrawBank(Streams(13).child("calls"), 100_000, [plain], [1.0])
    jumped = np.zeros(100_000, dtype=bool)
    for key in keys:
        sample = bank.samples[key]
        jumped |= (sample.uniforms[:, U_STALL] < 0.05) & (sample.z[:, 2] > 2)
    groups = dict.fromkeys(steps, "alike")
    background, jump = jump_update(plain, plain, bank.samples, bank.weight * jumped, groups)
    b, j = background.slots[("s0", 0)], jump.slots[("s0", 0)]
    assert j.mass[0] > 0.5  # P(stall) raised from 0.05 in the jump (the guess's 0.5 or more)
    assert j.theta[2] > 1.5  # the jump's stalls long: E[z | z > 2] = 2.37, smoothed
    assert b.mass[0] < 0.15  # the background's steps stall about as often as plain ones
    assert abs(b.theta[2]) < 1.0


# ----------------------------------------------------------------------------- what ends a run


def test_the_run_stops_on_the_misses_effective_sample_size_not_their_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bug: the stop rule counting raw misses (`e.miss.hits >= MIN_ESS`) instead of their
    effective sample size. On the chain (batches of 2,000, a loose 50% target the interval
    meets at once) the first batch holds 525 tilted misses worth an ESS of 64: with the least
    ESS lowered to 300 the run must go on until the ESS reaches it (measured: 4 batches, ESS
    381 from 2,308 misses); with the bug it stops after the first batch."""
    monkeypatch.setattr(nines_module, "MIN_ESS", 300)
    scenario = load_scenario(CHAIN)
    result = estimate_nines(
        compile_scenario(scenario), None, 0.5, NO_BUDGET, seed=3, batch=2_000, pilot=5_000
    )
    wait = result.estimates["wait"]
    assert result.stopped_by == STOPPED_BY_TARGET
    assert wait.miss.relative_error <= 0.5
    assert wait.miss.ess >= 300, (wait.miss.ess, wait.miss.hits, wait.miss.n)


def test_a_fallback_to_plain_sampling_drops_the_tilted_paired_differences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bug: the fallback keeping the paired differences summed on the degenerate tilted batch
    (no `result.paired.clear()`). After the fallback every policy's tally restarts on plain
    draws (weight 1), so the pair's sums must cover exactly the runs of its policies' tallies,
    and its mean difference is the difference of their estimates (the same draws, the same
    weights). With the bug the pair also counts the tilted batch's runs and weights."""
    _wild_tilt(monkeypatch)
    scenario = load_scenario(REPO_ROOT / "scenarios" / "default.yaml")
    result = estimate_nines(compile_scenario(scenario), ["wait", "cut"], 0.1, NO_BUDGET, seed=4)
    assert result.fallback
    wait, cut = result.estimates["wait"].miss, result.estimates["cut"].miss
    ((pair, (n, total, _)),) = result.paired.items()
    assert pair == ("wait", "cut")
    assert n == wait.n == cut.n
    assert total / n == pytest.approx(wait.estimate - cut.estimate, rel=1e-9, abs=1e-15)


class _Clock:
    """A wall clock that moves `step` seconds each time it is read: the budget binds the same
    way on any machine."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_a_run_the_budget_ends_says_its_numbers_depend_on_the_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The budget (on a clock that moves 10 s a read: 25 s are gone after a few batches, and
    the cross-entropy pilot's half of it before the miss is reached) ends the run, not the
    target: the result says so, and the lines printed and kept in notes.txt say the numbers
    depend on this machine's speed (the pilot's cut too)."""
    monkeypatch.setattr(nines_module, "time", _Clock(10.0))
    result = estimate_nines(compile_scenario(load_scenario(CHAIN)), None, 0.01, 25.0, seed=3)
    assert result.stopped_by == STOPPED_BY_BUDGET
    assert result.estimates["wait"].pilot_cut
    assert result.machine_dependent
    first, pilot = stop_lines(result)
    assert first.startswith("stopped: by the time budget (--budget-s 25), not the target")
    assert "depends on this machine's speed" in first
    assert pilot.startswith("stopped: the cross-entropy pilot of 'wait' ran out of its share")


def test_a_run_the_target_ends_does_not_depend_on_the_machine() -> None:
    """The same chain with no budget: the target ends it, no pilot is cut, and the line says
    so without a word about the machine."""
    result = estimate_nines(compile_scenario(load_scenario(CHAIN)), None, 0.5, NO_BUDGET, seed=3)
    assert result.stopped_by == STOPPED_BY_TARGET
    assert not result.machine_dependent
    (line,) = stop_lines(result)
    assert line.startswith("stopped: at the target (every policy's 95% CI within 50% of its")
    assert "machine" not in line
