"""`tailsim tune`: search per-step cutoffs, hedge delays and fallback models.

The tuned policy is an `adaptive` one (diagnose, then pick the direction). Its knobs are set
per step from the pilot's measured latencies: cutoffs and hedge delays as percentiles of the
step's own latency curve, plus the fall-down and fall-up models and the providers it may use.
A fall-down is only ever to a faster model than the step's (a shorter median call on its
fastest serving path: `median_call_s`) and a fall-up only to a stronger one (higher `quality`),
so each move is what its name says.
The search maximises `valid_hit_rate` under a cost cap and a quality floor, comparing every
candidate on common random numbers (the same arrivals and call draws):

1. successive halving over a scrambled Sobol sample of the shared knobs (scipy.stats.qmc):
   every candidate on a quarter of the requests, the best third on half, the best third of
   those on all of them;
2. a per-step pattern search from the winner: each step's cutoff percentile is moved up and
   down, and its fall-down model switched, keeping any move that scores better.

The search runs on a seed derived from the scenario's, so the comparison `tune` prints (on the
scenario's own seed) is on fresh draws. The winner is written as a policy named `tuned` with
every threshold in seconds, so `tailsim run FILE` runs exactly what was scored.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import qmc

from sim.analysis.slo import MET, judge, runs_to_resolve, target_text
from sim.engine.simulation import Simulation
from sim.model.arrivals import arrival_times
from sim.model.config import AdaptivePolicy
from sim.model.errors import ScenarioError
from sim.model.streams import CallDrawBank, Streams
from sim.model.words import plural
from sim.model.workflow import Workflow
from sim.plan import FIRST_TOKEN, Plan
from sim.plan.resolve import reserves
from sim.policy.build import build_resolved
from sim.study.pilot import measure
from sim.study.tune_moves import median_call_s, stronger

#: Name of the policy `tune` adds.
TUNED = "tuned"
#: Percentile bounds of a cutoff, a first-token cutoff and a hedge delay.
CUTOFF_PCT = (50.0, 99.5)
TTFT_PCT = (90.0, 99.9)
HEDGE_PCT = (80.0, 99.0)
#: Range of the factor on each step's reserve (the pilot's median path after it).
RESERVE_SCALE = (0.8, 1.6)
#: Candidates of the Sobol stage (a power of two) and the share kept at each rung.
SOBOL_POINTS = 32
KEEP = 1 / 3
#: Percentile steps of the per-step pattern search, one sweep each.
PATTERN_STEPS = (8.0, 3.0)

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Knobs:
    """One candidate: shared knobs, and per-step cutoff percentiles and fall-down models."""

    cutoff_pct: tuple[float, ...]
    fall_down: tuple[str | None, ...]
    ttft_pct: float | None
    hedge_pct: float | None
    fall_up: str | None
    all_providers: bool
    attempts: int
    reserve_scale: float = 1.0  # times the pilot's median path after each step


@dataclass(frozen=True)
class SloPart:
    """A candidate against an SLO target: whether the 95% Wilson interval of its success share
    lies wholly at or above the target, and that interval's lower end."""

    meets: bool
    lower: float
    #: some on-time answers were invalid (hit rate > valid hit rate); not part of the order
    junk: bool = field(default=False, compare=False)


@functools.total_ordering
@dataclass(frozen=True)
class Score:
    """How a candidate did on n requests; orders by (feasible, valid hit rate, -cost), or with
    an SLO by (feasible, meets the target, then -cost if it does, else the interval's lower end)
    : the cheapest candidate that meets the target, else the one closest to meeting it."""

    feasible: bool
    valid_hit_rate: float
    neg_cost: float
    quality: float = field(compare=False)
    n: int = field(compare=False)
    slo: SloPart | None = None

    @property
    def cost(self) -> float:
        return -self.neg_cost

    def key(self) -> tuple[float, ...]:
        """What the search maximises (see the class docstring)."""
        if self.slo is None:
            return (self.feasible, self.valid_hit_rate, self.neg_cost)
        if self.slo.meets:
            return (self.feasible, True, self.neg_cost, self.slo.lower, self.valid_hit_rate)
        return (self.feasible, False, self.slo.lower, self.neg_cost, self.valid_hit_rate)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Score):
            return NotImplemented
        return self.key() < other.key()


@dataclass
class TuneResult:
    """The winner as a policy spec (a mapping for the scenario file) and its search score."""

    policy: dict[str, Any]
    score: Score
    evaluations: int
    step_specs: dict[str, dict[str, Any]]  # what was scored, per step
    check: Any = None  # what `check` (the finalists by `tailsim nines`) found, if it ran


#: How many finalists a `FinalistCheck` judges, and what it is: (plan, per finalist its
#: step specs and search score, slo) -> (index of the one to keep, a report of the check).
FINALISTS = 4
FinalistCheck = Callable[
    [Plan, list[tuple[dict[str, dict[str, Any]], Score]], tuple[float, str]], tuple[int, Any]
]


def search_seed(seed: int) -> int:
    """The seed the search runs on: derived from the scenario's by name, never equal to it."""
    return int(np.random.SeedSequence([seed, zlib.crc32(b"tune")]).generate_state(1)[0]) >> 1


class Evaluator:
    """Scores candidates on common random numbers: one pilot, one set of arrivals and draws."""

    def __init__(
        self,
        plan: Plan,
        seed: int,
        requests: int,
        max_cost: float | None,
        min_quality: float,
        slo: tuple[float, str] | None = None,
    ) -> None:
        self.plan = plan
        self.slo = slo  # (target, metric): search against it (see Score)
        self.workflow = plan.workflow
        self.steps = self.workflow.steps
        self.pilot = measure(plan, seed)
        for step in self.steps:
            if len(self.pilot[step.id]) == 0:
                raise ScenarioError(
                    plan.source,
                    [("workflow.steps", f"step '{step.id}' never succeeded in the pilot run")],
                )
        self.reserve = reserves(plan, self.pilot)
        streams = Streams(seed, "main")
        self.streams = streams
        self.arrivals = arrival_times(plan.arrivals, requests, streams.generator("arrivals"))
        self.bank = CallDrawBank(streams.child("calls"), requests)
        self.quality = plan.model_quality
        self.requests = requests
        self.max_cost = max_cost
        self.min_quality = min_quality
        self.evaluations = 0

    def seconds(self, step: str, pct: float, first_token: bool = False) -> float:
        """The `pct` percentile of a step's pilot latency (first-token latency), in 0.01 s."""
        sample = self.pilot[(step, FIRST_TOKEN) if first_token else step]
        return max(0.01, round(float(np.percentile(sample, pct)), 2))

    def step_specs(self, knobs: Knobs) -> dict[str, dict[str, Any]]:
        """The adaptive spec of every LLM step, as plain mappings with thresholds in seconds
        (a tool step is run by the engine, not a policy: nothing to tune, no percentile)."""
        specs = {}
        for i, step in enumerate(self.steps):
            if step.tool is not None:
                continue
            spec: dict[str, Any] = {
                "kind": "adaptive",
                "cutoff": self.seconds(step.id, knobs.cutoff_pct[i]),
                "attempts": knobs.attempts,
                "reserve_s": round(float(self.reserve[step.id]) * knobs.reserve_scale, 2),
            }
            if knobs.ttft_pct is not None:
                spec["ttft_cutoff"] = self.seconds(step.id, knobs.ttft_pct, first_token=True)
            if knobs.hedge_pct is not None:
                spec["hedge_after"] = self.seconds(step.id, knobs.hedge_pct)
            if knobs.fall_down[i] is not None:
                spec["fall_down"] = knobs.fall_down[i]
            if knobs.fall_up is not None and stronger(self.quality, knobs.fall_up, step.model):
                spec["fall_up"] = knobs.fall_up
            if knobs.all_providers:
                spec["providers"] = list(self.plan.providers)
            specs[step.id] = spec
        return specs

    def score(self, knobs: Knobs, n: int) -> Score:
        """Simulate the candidate on the first `n` requests and score it."""
        self.evaluations += 1
        specs = {s: AdaptivePolicy.model_validate(d) for s, d in self.step_specs(knobs).items()}
        policy = build_resolved(TUNED, specs, self.plan.routes, self.steps)  # type: ignore[arg-type]
        sim = Simulation(self.plan, policy, self.bank, self.streams)
        runs = sim.run(self.arrivals[:n]).runs
        valid_hit = sum(r.valid_hit for r in runs) / len(runs)
        cost = sum(r.cost for r in runs) / n
        delivered = [r.quality for r in runs if r.ok]
        quality = float(np.mean(delivered)) if delivered else math.nan
        feasible = (self.max_cost is None or cost <= self.max_cost) and (
            self.min_quality <= 0 or (not math.isnan(quality) and quality >= self.min_quality)
        )
        slo = None
        if self.slo is not None:
            target, metric = self.slo
            hits = sum(r.valid_hit if metric == "valid_hit_rate" else r.ok for r in runs)
            reading = judge(hits, len(runs), target)
            junk = any(r.ok and not r.valid_hit for r in runs)
            slo = SloPart(reading.status == MET, reading.lo, junk)
        return Score(feasible, valid_hit, -cost, quality, n, slo)


def tune(
    plan: Plan,
    *,
    requests: int = 1000,
    seed: int | None = None,
    max_cost: float | None = None,
    min_quality: float = 0.0,
    progress: Progress | None = None,
    slo: tuple[float, str] | None = None,
    check: FinalistCheck | None = None,
) -> TuneResult:
    """Search the tuned policy of `plan` (see the module docstring); with `slo` (target,
    metric), the cheapest that meets the target (see `Score`). Where `requests` are too few for
    plain runs to show the target met, `check` (`sim.rare.finalists`) judges the best few
    finalists otherwise (by importance sampling) and picks among them."""
    root = plan.seed if seed is None else seed
    ev = Evaluator(plan, search_seed(root), requests, max_cost, min_quality, slo)
    tell = progress or (lambda _stage, _done, _total: None)
    space = _Space(plan, ev.steps)
    candidates = space.sobol(SOBOL_POINTS, root) + space.anchors()
    best_knobs, best, last_rung = _successive_halving(ev, candidates, requests, tell)
    best_knobs, best = _pattern_search(ev, space, best_knobs, best, tell)
    found = None
    if slo is not None and check is not None and requests < runs_to_resolve(slo[0]):
        distinct: dict[Knobs, Score] = {}
        for knobs, score in [(best_knobs, best), *last_rung]:
            distinct.setdefault(knobs, score)
        finalists = list(distinct.items())[:FINALISTS]
        tell(f"tailsim nines on {plural(len(finalists), 'finalist')}", 0, 1)
        pick, found = check(plan, [(ev.step_specs(k), score) for k, score in finalists], slo)
        best_knobs, best = finalists[pick]
    specs = ev.step_specs(best_knobs)
    return TuneResult(policy_mapping(specs), best, ev.evaluations, specs, found)


def _successive_halving(
    ev: Evaluator, candidates: list[Knobs], requests: int, tell: Progress
) -> tuple[Knobs, Score, list[tuple[Knobs, Score]]]:
    """The best candidate, its score, and the last rung's candidates, best first."""
    rungs = [max(20, requests // 4), max(20, requests // 2), requests]
    alive = list(dict.fromkeys(candidates))
    total = sum(
        max(1, math.ceil(len(alive) * KEEP**k)) if k else len(alive) for k in range(len(rungs))
    )
    done = 0
    scored: list[tuple[Score, int, Knobs]] = []
    for k, n in enumerate(rungs):
        scored = []
        for i, knobs in enumerate(alive):
            scored.append((ev.score(knobs, min(n, requests)), -i, knobs))
            done += 1
            rung = f"halving: {plural(len(alive), 'candidate')} on {plural(n, 'request')}"
            tell(rung, done, total)
        scored.sort(reverse=True)
        if k + 1 < len(rungs):
            alive = [c for _, _, c in scored[: max(1, math.ceil(len(scored) * KEEP))]]
    return scored[0][2], scored[0][0], [(knobs, score) for score, _, knobs in scored]


def _pattern_search(
    ev: Evaluator, space: _Space, knobs: Knobs, best: Score, tell: Progress
) -> tuple[Knobs, Score]:
    order = space.steps_by_load()
    moves_per_step = 2 + len(space.fall_down_options)
    total = len(PATTERN_STEPS) * len(order) * moves_per_step
    done = 0
    for delta in PATTERN_STEPS:
        for i in order:
            for trial in space.moves(knobs, i, delta):
                done += 1
                tell(f"per-step search: step {ev.steps[i].id} (+-{delta:g} pct)", done, total)
                score = ev.score(trial, ev.requests)
                if score > best:
                    knobs, best = trial, score
            done = min(total, done)
    tell("done", total, total)
    return knobs, best


class _Space:
    """The knobs' ranges: which models a step may fall down to (faster ones) or up to (stronger
    ones), which providers."""

    def __init__(self, plan: Plan, steps: tuple[Any, ...]) -> None:
        self.steps = steps
        self.models = list(plan.models)
        self.fall_down_options: list[str | None] = [None, *self.models]
        quality = plan.model_quality
        self.fall_down_for: list[list[str | None]] = []  # per step: None or a faster model
        self.fall_up_for: list[list[str | None]] = []  # per step: None or a stronger model
        for step in steps:
            if step.tool is not None or step.model is None:
                self.fall_down_for.append([None])
                self.fall_up_for.append([None])
                continue
            own = median_call_s(plan, step.model, step)
            faster = [m for m in self.models if median_call_s(plan, m, step) < own]
            self.fall_down_for.append([None, *faster])
            self.fall_up_for.append(
                [None, *(m for m in self.models if stronger(quality, m, step.model))]
            )
        ups = {m for options in self.fall_up_for for m in options if m is not None}
        self.fall_up_options: list[str | None] = [None, *(m for m in self.models if m in ups)]
        self.multi_provider = len(plan.providers) > 1

    def steps_by_load(self) -> list[int]:
        """LLM steps, most depended-on and required first (the article's "how much is
        waiting"); tool steps have nothing to search."""
        workflow = Workflow(self.steps)
        return sorted(
            (i for i, s in enumerate(self.steps) if s.tool is None),
            key=lambda i: (-len(workflow.downstream(i)), not self.steps[i].required, i),
        )

    def _pick(self, options: list[Any], u: float) -> Any:
        return options[min(len(options) - 1, int(u * len(options)))]

    def sobol(self, points: int, seed: int) -> list[Knobs]:
        """`points` candidates from a scrambled Sobol sequence over the shared knobs."""
        sampler = qmc.Sobol(d=8, scramble=True, seed=np.random.default_rng([seed, 11]))
        out = []
        for u in sampler.random(points).tolist():  # plain floats, so they write as YAML
            cut = round(CUTOFF_PCT[0] + u[0] * (CUTOFF_PCT[1] - CUTOFF_PCT[0]), 1)
            down = self._pick(self.fall_down_options, u[1])
            ttft = u[2] >= 0.5
            hedge = u[3] >= 0.5
            out.append(
                Knobs(
                    cutoff_pct=(cut,) * len(self.steps),
                    fall_down=tuple(
                        down if down in self.fall_down_for[i] else None
                        for i in range(len(self.steps))
                    ),
                    ttft_pct=round(TTFT_PCT[0] + (u[2] - 0.5) * 2 * (TTFT_PCT[1] - TTFT_PCT[0]), 1)
                    if ttft
                    else None,
                    hedge_pct=round(
                        HEDGE_PCT[0] + (u[3] - 0.5) * 2 * (HEDGE_PCT[1] - HEDGE_PCT[0]), 1
                    )
                    if hedge
                    else None,
                    fall_up=self._pick(self.fall_up_options, u[4]),
                    all_providers=self.multi_provider and u[5] >= 0.5,
                    attempts=2 + min(2, int(u[6] * 3)),
                    reserve_scale=round(
                        RESERVE_SCALE[0] + u[7] * (RESERVE_SCALE[1] - RESERVE_SCALE[0]), 2
                    ),
                )
            )
        return out

    def anchors(self) -> list[Knobs]:
        """The article's starting point: cut at the measured p95, re-draw, or fall down."""
        n = len(self.steps)
        return [
            Knobs(
                cutoff_pct=(95.0,) * n,
                fall_down=tuple(
                    m if m in self.fall_down_for[i] else None for i in range(len(self.steps))
                ),
                ttft_pct=None,
                hedge_pct=None,
                fall_up=None,
                all_providers=False,
                attempts=attempts,
            )
            for m in self.fall_down_options
            for attempts in (3, 4)
        ]

    def moves(self, knobs: Knobs, i: int, delta: float) -> list[Knobs]:
        """Neighbours of `knobs` changing step i only: cutoff up and down, other fall-downs
        (to the step's faster models, or none)."""
        out = []
        for sign in (-1, 1):
            pct = min(CUTOFF_PCT[1], max(CUTOFF_PCT[0], knobs.cutoff_pct[i] + sign * delta))
            if pct != knobs.cutoff_pct[i]:
                cut = list(knobs.cutoff_pct)
                cut[i] = round(pct, 1)
                out.append(_replace(knobs, cutoff_pct=tuple(cut)))
        if delta == PATTERN_STEPS[0]:
            for model in self.fall_down_for[i]:
                if model != knobs.fall_down[i]:
                    down = list(knobs.fall_down)
                    down[i] = model
                    out.append(_replace(knobs, fall_down=tuple(down)))
        return out


def _replace(knobs: Knobs, **changes: Any) -> Knobs:
    return Knobs(**{**knobs.__dict__, **changes})


def policy_mapping(step_specs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One policy mapping for per-step specs: the keys most steps share, and `steps:` entries
    overriding what differs (a key a step lacks but the base has is set to null)."""
    specs = list(step_specs.values())
    keys = list(dict.fromkeys(k for spec in specs for k in spec))
    base: dict[str, Any] = {}
    for key in keys:
        values = [repr(spec.get(key)) for spec in specs]
        common = max(set(values), key=lambda v: (values.count(v), -values.index(v)))
        value = next(spec.get(key) for spec in specs if repr(spec.get(key)) == common)
        if value is not None:
            base[key] = value
    steps = {}
    for step, spec in step_specs.items():
        diff = {k: spec.get(k) for k in keys if spec.get(k) != base.get(k)}
        if diff:
            steps[step] = diff
    return {**base, "steps": steps} if steps else base


def tuned_scenario_data(
    data: dict[str, Any], policy: dict[str, Any], source_dir: str, out_dir: str
) -> dict[str, Any]:
    """The scenario mapping `data` (read from `source_dir`) with `policy` added as `tuned`,
    its relative file names rewritten so they still resolve from `out_dir`."""
    import os  # noqa: PLC0415 - only this helper deals in paths

    def rebase(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: rebase(v) for k, v in node.items()}
            name = out.get("file")
            if isinstance(name, str) and not os.path.isabs(name):
                out["file"] = os.path.relpath(os.path.join(source_dir, name), out_dir)
            return out
        if isinstance(node, list):
            return [rebase(v) for v in node]
        return node

    fresh = rebase(data)
    fresh["policies"] = {
        **{k: v for k, v in fresh["policies"].items() if k != TUNED},
        TUNED: policy,
    }
    return fresh


@dataclass
class TuneOutcome:
    """What `tailsim tune` reports: the search result and the comparison on fresh draws."""

    result: TuneResult
    comparison: Any  # the summary DataFrame of every policy, `tuned` included
    note: str
    slo: tuple[float, str] | None = None  # (target, metric) searched against


def search_slo(plan: Plan, target: float | None) -> tuple[float, str] | None:
    """(target, metric) the search runs against: `target` (--slo-target) or the scenario's
    `slo` target, with the scenario's metric (valid_hit_rate without one); None for neither."""
    metric = plan.slo.metric if plan.slo is not None else "valid_hit_rate"
    if target is None:
        return None if plan.slo is None else (plan.slo.target, metric)
    return target, metric


def slo_note(slo: tuple[float, str], score: Score, n: int, checked: Any = None) -> str:
    """What the search made of the SLO: met by the winner on the search's draws, or not, and
    whether plain runs of this size could have shown it met at all; or what the finalists'
    check found (its `summary`)."""
    target, metric = slo
    what = f"SLO {target_text(target)} ({metric.replace('_', ' ')})"
    if checked is not None:
        return f"{what}: {checked.summary}"
    if score.slo is not None and score.slo.meets:
        return f"{what}: the winner meets it on the search's draws (the cheapest found that does)"
    need = runs_to_resolve(target)
    if n < need:
        return (
            f"{what}: {plural(n, 'request')} cannot show it met (plain runs need >= {need:,} "
            "without a miss); the winner has the highest lower 95% bound, then the lowest cost: "
            "check it with `tailsim nines`"
        )
    return f"{what}: no candidate meets it; the winner has the highest lower 95% bound"
