"""One batch of a rare-event estimate: every chosen policy on one tilted draw bank.

Apart from `sim.rare.nines` (the loop: pilot, cross-entropy fit, batches until the target
error) so each module keeps one job. A batch is a run of the scenario as `tailsim run` makes
it (same engines, same choice between them), on fresh arrivals and a `TiltedDrawBank`: every
policy reads the same tilted inputs and is judged with the same per-request weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from sim.analysis.capacity import ALL
from sim.model.latency import U_STALL, U_STALL_EXTRA, CallLatency
from sim.plan import Plan
from sim.rare.tilt import Tilt, TiltedDrawBank
from sim.study.policy_run import RunJob, run_policy


@dataclass
class Setup:
    """What every batch of one estimate shares: the resolved plan (its thresholds from the
    pilot of the scenario's own seed, its engine the estimate's) and the per-step cuts and
    primary serving paths of the tilt."""

    plan: Plan
    names: list[str]
    steps: list[str]  # LLM steps, in workflow order
    cuts: dict[str, tuple[float, float]]  # per step: (stall probability, failure probability)
    primary: dict[str, CallLatency]  # per step: the first serving path's latency law
    groups: dict[str, tuple[str, int, int]]  # alike steps (model, tokens in and out): one tilt


@dataclass
class BatchOutcome:
    """One policy in one batch: per first send, whether it missed (not a hit), failed outright
    (before its deadline), its score (latency / deadline, 1 for a miss) and the seconds spent."""

    miss: np.ndarray
    fail: np.ndarray
    score: np.ndarray
    engine: str
    seconds: float


def make_setup(plan: Plan, names: list[str]) -> Setup:
    """The shared part of every batch; each LLM step's cuts are the largest stall and failure
    (error + invalid) probabilities of the paths serving its model (any cut keeps the estimate
    unbiased; one at the step's own probability makes the raise a plain Bernoulli tilt)."""
    laws = plan.latencies
    steps, cuts, primary, groups = [], {}, {}, {}
    for step in plan.workflow.steps:
        if step.tool is not None:
            continue
        paths = [law for (_, model), law in laws.items() if model == step.model]
        if not paths:
            continue
        steps.append(step.id)
        stall = max(law.stall_probability if law.stall_extra else 0.0 for law in paths)
        fail = max(law.error_rate + law.invalid_rate for law in paths)
        cuts[step.id] = (float(stall), float(fail))
        primary[step.id] = paths[0]
        length = step.length if step.length is not None else step.output_tokens
        groups[step.id] = (step.model, step.input_tokens, length)
    return Setup(plan, names, steps, cuts, primary, groups)


def batch_seed(seed: int, *parts: int) -> int:
    """An independent 32-bit seed for batch `parts` of an estimate seeded `seed`."""
    return int(np.random.SeedSequence([seed, *parts]).generate_state(1)[0])


def run_batch(
    setup: Setup, names: list[str], n: int, seed: int, tilts: list[Tilt], shares: list[float]
) -> tuple[TiltedDrawBank, dict[str, BatchOutcome]]:
    """Policies `names` on `n` fresh requests seeded `seed`, drawn from the mixture of `tilts`."""
    job = RunJob(replace(setup.plan, seed=seed, requests=n), names, ALL)
    context = job.context()
    bank = TiltedDrawBank(context.streams.child("calls"), n, tilts, shares)
    context.bank = bank
    deadline = setup.plan.deadline_s
    out = {}
    for name in names:
        began = time.perf_counter()
        outcome = run_policy(context, name)
        runs = outcome.requests
        first = runs[runs["resend"] == 0].sort_values("request_id")
        ok = first["ok"].to_numpy(dtype=bool)
        late = first["fail_reason"].to_numpy() == "deadline"
        score = np.where(ok, first["latency_s"].to_numpy(dtype=float) / deadline, 1.0)
        out[name] = BatchOutcome(
            ~ok, ~ok & ~late, np.minimum(score, 1.0), outcome.engine,
            time.perf_counter() - began,
        )  # fmt: skip
    return bank, out


def stall_seconds(setup: Setup, bank: TiltedDrawBank) -> np.ndarray:
    """(n, steps): the stall each step's first attempt drew on its primary path, in seconds
    (0: no stall), for telling what the misses are made of."""
    out = np.zeros((bank.n_requests, len(setup.steps)))
    for j, step in enumerate(setup.steps):
        law = setup.primary[step]
        sample = bank.samples.get((step, 0))
        if sample is None or law.stall_extra is None:
            continue
        u = sample.uniforms
        stalled = u[:, U_STALL] < law.stall_probability
        out[:, j] = np.where(stalled, law.stall_extra.from_uniform(u[:, U_STALL_EXTRA]), 0.0)
    return out
