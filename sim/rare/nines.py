"""Four and five nines: each policy's probability of missing its deadline, by importance sampling.

`estimate_nines(plan, policies, target_rel_error, budget_s)` fits one tilt per policy by the
cross-entropy method on pilot batches (multilevel: the elite is the top 10% by latency /
deadline until the miss itself is reached), then draws batches of requests from the defensive
mixture of the nominal law and those tilts (`sim.rare.tilt.TiltedDrawBank`), runs every
policy on each batch (common random numbers: the same inputs and weights for every policy),
and stops when every policy's 95% interval is within `target_rel_error` of its estimate, or
at the budget. The weights are watched (effective sample size, the largest weight's share): if
they degenerate, it warns and falls back to plain sampling. The result says what ended the run
(`stopped_by`) and which pilots the budget cut short: only a run the target ended, with no pilot
cut, has numbers that depend on the scenario and seed alone, not on the machine's speed.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from sim.model.errors import ScenarioError
from sim.plan import Plan
from sim.rare.batch import Setup, batch_seed, make_setup, run_batch, stall_seconds
from sim.rare.tilt import Tilt, identity_tilt, jump_components, slot_keys
from sim.rare.weighted import WeightedTally, jump_update
from sim.study.pilot import prepare
from sim.study.runner import chosen_policies

#: Methods: importance sampling (the cross-entropy tilt) or plain Monte Carlo.
METHODS = ("importance", "plain")
#: Share of the nominal law in the mixture: every weight is at most 1 / DEFENSIVE.
DEFENSIVE = 0.1
#: ... where requests share state (the event engine must run): most requests plain, so the
#: queue, quota and caps a request meets are nearly the plain world's (the tilted: probes).
DEFENSIVE_SHARED = 0.8
#: The least effective sample size of a policy's misses before its interval is trusted (a
#: 95% interval from fewer weighted misses covers less often: the weights are skewed).
MIN_ESS = 1000
#: Share of the budget the cross-entropy pilots may take (each level runs to its end).
PILOT_SHARE = 0.5
#: Elite share of a cross-entropy level, and the most levels fitted per policy.
ELITE = 0.1
MAX_LEVELS = 8
#: Misses in a pilot level enough to fit on the miss itself.
MIN_ELITE_MISSES = 50
#: Degenerate weights: one draw holds more than this share of a policy's estimate ...
MAX_SHARE = 0.5
#: ... once the policy has this many misses.
MIN_MISSES_FOR_CHECK = 20
#: What ended the batches (`NinesResult.stopped_by`): the precision target was met, the
#: wall-clock budget ran out, or the cap of runs per policy was reached.
STOPPED_BY_TARGET, STOPPED_BY_BUDGET, STOPPED_BY_RUNS = "target", "budget", "max_runs"


@dataclass
class PolicyEstimate:
    """One policy's estimate: miss and outright-failure tallies, what its misses are made of."""

    name: str
    miss: WeightedTally = field(default_factory=WeightedTally)
    fail: WeightedTally = field(default_factory=WeightedTally)
    engine: str = ""
    seconds: float = 0.0
    levels: int = 0  # cross-entropy levels fitted for its tilt
    pilot_runs: int = 0  # requests its cross-entropy pilot drew
    pilot_cut: bool = False  # its pilot ran out of its share of the budget short of the miss
    stalled: float = 0.0  # weighted misses with at least one long first-attempt stall
    stalled_twice: float = 0.0  # ... with two or more
    by_step: np.ndarray | None = None  # weighted misses with a long stall at each step


@dataclass
class NinesResult:
    """Per policy, the miss probability with its 95% interval, and how it was reached."""

    plan: Plan
    seed: int
    method: str
    target_rel_error: float
    budget_s: float
    estimates: dict[str, PolicyEstimate]
    tilts: dict[str, tuple[Tilt, Tilt]]  # per policy, its (background, jump) tilts
    steps: list[str]
    long_stall_s: float  # the stall length the composition counts ("longer than")
    fallback: bool = False
    defensive: float = DEFENSIVE  # the plain law's share of the proposal
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    pilot_seconds: float = 0.0
    #: Per pair of policies (a, b): sums of w (1{a misses} - 1{b misses}) and of its square.
    paired: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    #: What ended the batches: STOPPED_BY_TARGET, STOPPED_BY_BUDGET or STOPPED_BY_RUNS.
    stopped_by: str = ""

    @property
    def machine_dependent(self) -> bool:
        """True if the wall-clock budget shaped the numbers: it ended the batches, or cut a
        policy's cross-entropy pilot short (its tilt, and so every batch, would differ on a
        faster or slower machine)."""
        return self.stopped_by == STOPPED_BY_BUDGET or any(
            e.pilot_cut for e in self.estimates.values()
        )

    @property
    def table(self) -> pd.DataFrame:
        """One row per policy: the columns of nines.csv (probabilities as fractions)."""
        rows = []
        for name, e in self.estimates.items():
            bound = 1 / self.defensive if self.method == "importance" else 1.0
            lo, hi = e.miss.interval(bound)
            flo, fhi = e.fail.interval(bound)
            misses = e.miss.total or math.nan
            rows.append({
                "policy": name, "miss_probability": e.miss.estimate, "ci_lo": lo, "ci_hi": hi,
                "rel_error": e.miss.relative_error, "runs": e.miss.n, "seconds": e.seconds,
                "hit_rate": 1 - e.miss.estimate, "fail_probability": e.fail.estimate,
                "fail_ci_lo": flo, "fail_ci_hi": fhi, "misses_seen": e.miss.hits,
                "ess": e.miss.ess, "max_weight_share": e.miss.max_share,
                "fallback": self.fallback, "method": self.method, "engine": e.engine,
                "ce_levels": e.levels, "pilot_runs": e.pilot_runs,
                "misses_with_long_stall": e.stalled / misses,
                "misses_with_2_long_stalls": e.stalled_twice / misses,
                "top_stall_step": self._top_step(e),
                "tilt": self.describe_tilt(name),
            })  # fmt: skip
        return pd.DataFrame(rows)

    def describe_tilt(self, name: str) -> str:
        """Policy `name`'s tilts in words (see `Tilt.describe`)."""
        if name not in self.tilts:
            return "none (plain sampling)"
        background, jump = self.tilts[name]
        return f"background: {background.describe()} | jump: {jump.describe()}"

    def _top_step(self, e: PolicyEstimate) -> str:
        if e.by_step is None or not e.miss.total or not e.by_step.any():
            return ""
        return self.steps[int(np.argmax(e.by_step))]

    def comparisons(self) -> list[tuple[str, str, float, float, float, bool]]:
        """Per pair (a, b): the paired difference P(a misses) - P(b misses), its 95% interval,
        and whether the two policies' own intervals overlap."""
        out = []
        table = self.table.set_index("policy")
        for (a, b), (n, total, squares) in self.paired.items():
            diff = total / n
            var = max(squares / n - diff * diff, 0.0) * n / max(n - 1, 1)
            half = 1.959963984540054 * math.sqrt(var / n)
            overlap = not (
                table.at[a, "ci_hi"] < table.at[b, "ci_lo"]
                or table.at[b, "ci_hi"] < table.at[a, "ci_lo"]
            )
            out.append((a, b, diff, diff - half, diff + half, overlap))
        return out


def estimate_nines(
    plan: Plan,
    policies: list[str] | None = None,
    target_rel_error: float = 0.1,
    budget_s: float = 60.0,
    *,
    seed: int | None = None,
    method: str = "importance",
    batch: int | None = None,
    pilot: int | None = None,
    attempts: int = 3,
    engine: str | None = None,
    max_runs: int | None = None,
) -> NinesResult:
    """Each policy's probability of missing the deadline (not a hit: late or failed) and of
    failing outright, with 95% intervals, to `target_rel_error` (half-width / estimate) or
    until `budget_s` seconds (or `max_runs` requests per policy) have gone.

    `method` "importance" tilts attempts 0 .. `attempts`-1 of every LLM step (first sends);
    "plain" is Monte Carlo on the same machinery. `batch` requests per batch (default 20,000 on
    the vectorized engine's scenarios, 4,000 where the event engine runs), `pilot` per
    cross-entropy level (default 10,000 / 4,000)."""
    if method not in METHODS:
        raise ScenarioError("method", [("", f"got {method!r}, allowed: {', '.join(METHODS)}")])
    if not target_rel_error > 0:
        raise ScenarioError("target_rel_error", [("", f"must be > 0, got {target_rel_error}")])
    if not budget_s > 0:
        raise ScenarioError("budget_s", [("", f"must be > 0, got {budget_s}")])
    began = time.perf_counter()
    seed = plan.seed if seed is None else seed
    names = chosen_policies(plan, policies, "--policy")
    # thresholds from the pilot of the scenario's own seed, as `tailsim run` measures them:
    # every seed estimates the same policies
    prepared, _ = prepare(plan)
    setup = make_setup(replace(prepared, engine=engine or plan.engine), names)
    keys = slot_keys(setup.steps, attempts)
    plain = identity_tilt(keys, setup.cuts)
    estimates = {name: PolicyEstimate(name) for name in names}
    shared = _shares_state(setup, names, seed)
    event_engine = shared or setup.plan.engine == "des"
    batch = batch or (4_000 if event_engine else 20_000)
    pilot = pilot or (4_000 if event_engine else 10_000)
    tilts: dict[str, tuple[Tilt, Tilt]] = {}
    if method == "importance":
        for i, name in enumerate(names):
            until = began + budget_s * PILOT_SHARE * (i + 1) / len(names)
            tilts[name] = _fit(setup, name, plain, pilot, batch_seed(seed, 1, i), estimates, until)
    result = NinesResult(prepared, seed, method, target_rel_error, budget_s, estimates, tilts,
                         setup.steps, _long_stall(setup))  # fmt: skip
    result.pilot_seconds = time.perf_counter() - began
    result.defensive = DEFENSIVE_SHARED if shared else DEFENSIVE
    components, shares = _mixture(plain, tilts, names, result.defensive)
    for b in itertools.count():
        bank, outcomes = run_batch(setup, names, batch, batch_seed(seed, 2, b), components, shares)
        weight = bank.weight
        stalls = stall_seconds(setup, bank) > result.long_stall_s
        for name, o in outcomes.items():
            e = estimates[name]
            e.miss.add(weight, o.miss)
            e.fail.add(weight, o.fail)
            e.engine, e.seconds = o.engine, e.seconds + o.seconds
            wm = np.where(o.miss, weight, 0.0)
            count = stalls.sum(axis=1)
            e.stalled += float(wm[count >= 1].sum())
            e.stalled_twice += float(wm[count >= 2].sum())
            by_step = (wm[:, None] * stalls).sum(axis=0)
            e.by_step = by_step if e.by_step is None else e.by_step + by_step
        _pair(result, outcomes, weight)
        if method == "importance" and not result.fallback and _degenerate(result):
            components, shares = [plain], [1.0]
            result.fallback, result.method = True, "plain"
            for name in names:
                old = estimates[name]  # the pilot's cut still shaped the tilt tried first
                estimates[name] = PolicyEstimate(name, engine=old.engine, seconds=old.seconds,
                                                 pilot_cut=old.pilot_cut)  # fmt: skip
            result.paired.clear()
            continue
        done = all(
            e.miss.relative_error <= target_rel_error
            and (result.method == "plain" or e.miss.ess >= MIN_ESS)
            for e in estimates.values()
        )
        spent = time.perf_counter() - began
        runs = min(e.miss.n for e in estimates.values())
        if done:
            result.stopped_by = STOPPED_BY_TARGET
        elif spent >= budget_s:
            result.stopped_by = STOPPED_BY_BUDGET
        elif max_runs is not None and runs >= max_runs:
            result.stopped_by = STOPPED_BY_RUNS
        if result.stopped_by:
            break
    result.seconds = time.perf_counter() - began
    for name, e in estimates.items():
        if e.miss.relative_error > target_rel_error:
            result.warnings.append(
                f"policy '{name}': relative error {e.miss.relative_error:.2g} > target "
                f"{target_rel_error:g} when the run stopped ({e.miss.n:,} runs, {spent:.0f} s)"
            )
    return result


def _shares_state(setup: Setup, names: list[str], seed: int) -> bool:
    """True if some policy needs the event engine under `engine: auto` (a small plain batch
    tells): its requests share state (a quota that binds, slots, caps), so a tilted request
    changes what the others meet."""
    auto = replace(setup, plan=replace(setup.plan, engine="auto"))
    _, outcomes = run_batch(auto, names, 200, batch_seed(seed, 0), [identity_tilt([], {})], [1.0])
    return any(o.engine != "vectorized" for o in outcomes.values())


def _fit(
    setup: Setup,
    name: str,
    start: Tilt,
    n: int,
    seed: int,
    estimates: dict[str, PolicyEstimate],
    until: float = math.inf,
) -> tuple[Tilt, Tilt]:
    """Policy `name`'s (background, jump) tilts by the multilevel cross-entropy method on the
    one-big-jump mixture (`jump_components`): each level draws `n` requests from the current
    mixture, raises the level to the (1 - ELITE) quantile of the score (latency / deadline, 1
    for a miss) capped at the miss, and refits on the elite (`jump_update`)."""
    background = jump = start
    for level in range(MAX_LEVELS):  # stops early past `until` (the pilot's share of the budget)
        parts = jump_components(background, jump)
        bank, outcomes = run_batch(
            setup, [name], n, batch_seed(seed, level), parts, [1.0] * len(parts)
        )
        o = outcomes[name]
        estimates[name].seconds += o.seconds
        estimates[name].levels = level + 1
        estimates[name].pilot_runs += n
        gamma = min(1.0, float(np.quantile(o.score, 1 - ELITE)))
        if np.count_nonzero(o.score >= 1.0) >= max(MIN_ELITE_MISSES, ELITE * n / 10):
            gamma = 1.0  # enough misses drawn: fit on the miss itself
        elite = o.score >= gamma
        background, jump = jump_update(
            background, jump, bank.samples, bank.weight * elite, setup.groups
        )
        if gamma >= 1.0:
            break
        if time.perf_counter() > until:  # out of its share of the budget short of the miss
            estimates[name].pilot_cut = level + 1 < MAX_LEVELS
            break
    return background, jump


def _mixture(
    plain: Tilt, tilts: dict[str, tuple[Tilt, Tilt]], names: list[str], defensive: float
) -> tuple[list[Tilt], list[float]]:
    """The defensive mixture: the nominal law (share `defensive`) and each policy's
    one-big-jump components (equal shares); plain sampling without tilts."""
    if not tilts:
        return [plain], [1.0]
    parts = [part for name in names for part in jump_components(*tilts[name])]
    return [plain, *parts], [defensive] + [(1 - defensive) / len(parts)] * len(parts)


def _pair(result: NinesResult, outcomes: dict, weight: np.ndarray) -> None:
    """Accumulate the paired differences of every pair of policies (same draws, same weights)."""
    for a, b in itertools.combinations(outcomes, 2):
        d = weight * (outcomes[a].miss.astype(float) - outcomes[b].miss.astype(float))
        sums = result.paired.setdefault((a, b), [0, 0.0, 0.0])
        sums[0] += len(d)
        sums[1] += float(d.sum())
        sums[2] += float((d * d).sum())


def _degenerate(result: NinesResult) -> bool:
    """True (and a warning) if one draw holds more than MAX_SHARE of a policy's estimate once
    it has MIN_MISSES_FOR_CHECK misses: the weights cannot be trusted; fall back."""
    for name, e in result.estimates.items():
        if e.miss.hits >= MIN_MISSES_FOR_CHECK and e.miss.max_share > MAX_SHARE:
            result.warnings.append(
                f"policy '{name}': one draw holds {e.miss.max_share:.0%} of the estimate "
                f"(ESS {e.miss.ess:.1f} of {e.miss.hits} misses): the weights degenerate; "
                "falling back to plain sampling"
            )
            return True
    return False


def _long_stall(setup: Setup) -> float:
    """The stall length counted as long: the median stall of the first step's primary path
    (0 without stalls)."""
    for step in setup.steps:
        law = setup.primary[step]
        if law.stall_extra is not None:
            return float(law.stall_extra.median)
    return 0.0
