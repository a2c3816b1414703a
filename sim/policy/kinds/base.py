"""What every policy kind declares, and the helpers several kinds share.

A kind (`Kind`) is one module of `sim.policy.kinds`: its spec in the format, the spec -> runtime
policy with its per-step plans (`build`), and its capabilities: how many calls a step starts at
once (capacity, the order policies go to workers), whether the vectorized engine runs it (its
spec's fields as the compiler names them, `sim.plan.features`) and what the pilot fills in. The
registry (`sim.policy.kinds.KINDS`) maps each kind's name to it; nothing outside a kind's module
asks which kind a spec is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import simpy

from sim.model.backoff import retry_wait
from sim.model.config import BackoffSpec
from sim.model.rows import OUTCOME_OK, OUTCOME_RATE_LIMITED, Call
from sim.model.workflow import Step
from sim.policy.plans import Policy, StepRun
from sim.policy.routes import Routes

#: A kind's construction: (policy name, spec, routes, its LLM steps, seconds[step] of its main
#: threshold) -> the runtime policy with its attempts planned per step.
Build = Callable[[str, Any, Routes, tuple[Step, ...], dict[str, float]], Policy]
#: A field of a spec that changes nothing an engine does by itself (its value is walked).
NEUTRAL = ""
#: The cuts that watch a call's stream (`sim.model.config.StreamCuts`), each a feature of its own
#: (the vectorized engine does not run them yet).
STREAM_CUT_FIELDS = {"first_token_timeout_s": "stream.first_token_timeout",
                     "idle_timeout_s": "stream.idle_timeout",
                     "resume": "stream.resume"}  # fmt: skip


def _one(spec: Any) -> int:
    return 1


def _never(spec: Any) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Kind:
    """One policy kind: its name and format class, how it is built, and its capabilities."""

    name: str
    spec: type
    build: Build
    #: Calls a step under the spec starts at once (the order policies go to workers).
    calls_at_once: Callable[[Any], int] = _one
    #: Calls per step the memory estimate counts (`sim.analysis.capacity`).
    calls_per_step: Callable[[Any], int] = _one
    #: The spec's own fields as the vectorized twin reads them (NEUTRAL or the feature a value
    #: away from the default names); None: no vectorized twin, the kind is a feature itself.
    vector_fields: Mapping[str, str] | None = None
    #: Why the vectorized engine does not run the kind ("" : the compiler's plain reason).
    no_twin_reason: str = ""
    #: True if the pilot must measure the spec's `reserve_s` (`sim.plan.resolve`).
    reserve_from_pilot: Callable[[Any], bool] = _never


def retry_pause(
    run: StepRun, backoff: BackoffSpec | None, retry: int, failed: list[Call | None]
) -> float | None:
    """Seconds to wait before retry number `retry` after the `failed` calls, or None when the
    deadline would come first (the retry is not made).

    Without `backoff`: a 429's Retry-After, else no wait. With it: `sim.model.backoff.retry_wait`
    (the longest Retry-After among the failed calls, if within its cap, else the jittered
    backoff)."""
    limited = [c.retry_after for c in failed if c is not None and c.outcome == OUTCOME_RATE_LIMITED]
    retry_after = max(limited) if limited else float("nan")
    if backoff is None:
        wait = retry_after if limited else 0.0
    else:
        wait = retry_wait(backoff, retry, run.jitter(retry), retry_after)
    if wait > 0 and wait >= run.time_left:
        return None
    if not run.admits(wait):  # the time left cannot fund the wait and an attempt
        return None
    return wait


def settle(run: StepRun, pending: list[simpy.Process]) -> tuple[bool, list[simpy.Process]]:
    """After a wake-up: (True, []) if an attempt answered validly (losers cancelled), else the
    attempts still in flight."""
    still, won = [], False
    for process in pending:  # (a loop, not a list and an `any` over a generator: hot path)
        if not process.triggered:
            still.append(process)
        elif not won:
            call = process.value
            won = call is not None and call.outcome == OUTCOME_OK
    if won:
        for process in still:
            run.cancel(process)
        return True, []
    return False, still


#: Relative slack under which a timer counts as due (float rounding of simulated times).
DUE = 1e-9


def route(routes: Routes, model: str, providers: list[str] | None, default: str) -> list[str]:
    """Providers an attempt on `model` may use, in turn (those of `providers` serving it)."""
    if not providers:
        return [default]
    serving = [p for p in providers if routes.serves_model(p, model)]
    return serving or [default]


def other_route(
    routes: Routes, model: str, providers: list[str] | None, step: Step
) -> tuple[str, ...]:
    """Providers for attempts on `model` at `step`: `providers` serving it, else the step's
    provider if it serves it, else the first that does."""
    default = (
        step.provider if routes.serves_model(step.provider, model) else routes.serving(model)[0]
    )
    return tuple(route(routes, model, providers, default))


def seconds(value: float | str | None, fallback: float | None) -> float | None:
    """A threshold already in seconds, or `fallback` (the resolved main threshold)."""
    if value is None or isinstance(value, float | int):
        return None if value is None else float(value)
    if fallback is None:
        raise ValueError(f"threshold {value!r} not resolved to seconds (see sim.study.pilot)")
    return fallback


def stream_cuts(spec: Any) -> tuple[float | None, float | None, bool]:
    """A spec's cuts that watch the stream (`first_token_timeout_s`, `idle_timeout_s`) and
    whether a retry resumes a cut or broken stream (`resume`), as the `Attempt` fields after
    `give_up_after`; (None, None, False) for a kind without them."""
    return (
        getattr(spec, "first_token_timeout_s", None),
        getattr(spec, "idle_timeout_s", None),
        getattr(spec, "resume", False),
    )


def shared_backoff(by_step: dict[str, Policy]) -> tuple[bool, BackoffSpec | None]:
    """Whether the steps' runtime policies (of one class) share one backoff, so that they may
    run as one policy (`Policy.merge`), and that backoff."""
    members: list[Any] = list(dict.fromkeys(by_step.values()))
    backoff = members[0].backoff
    return all(m.backoff == backoff for m in members), backoff
