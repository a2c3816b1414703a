"""The event engine's run of a step with workflow keys: when, repeat, loop, map.

`flow_step` stands in for the one policy run `StepRunner.walk` gives a plain step. `when`
skips the step (no failure: its dependants go on, as after a success with no answer) on a
per-request uniform of stream `when` or on an ancestor's validity. `repeat` re-runs the step
through its policy while its answer is invalid; `loop` runs it N times one after another; `map`
runs N copies side by side, joined when all (or the first K) succeed, the others cancelled;
a group's first step runs the whole group, N iterations of its steps in order.
Each run of the step is a `StepHandle` of its own with its `iteration` (ask, iteration, copy):
iteration 0 draws exactly what the step draws without the keys, iteration k from keys with k
in them (`sim.model.flow.draw_id`). Counts come from per-request streams `loop` and `map`
(`sim.model.flow.count`), the same for every policy, attempt and re-send. An iteration is
admitted as a step's first attempt is: its attempts go through `StepHandle.attempt_limits`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from sim.engine.event_steps import Finish, StepHandle, StepRunner
from sim.model.flow import LOOP, MAP, WHEN, count
from sim.model.rows import FAIL_NO_CALL, OUTCOME_INVALID, OUTCOME_TRUNCATED, Call, Run
from sim.model.workflow import Step

#: What a run of a step's keys gives back: (succeeded, last outcome, the answers it delivers).
Result = tuple[bool, str, list["Call | None"]]
#: Outcomes of an invalid answer (junk the check caught, or one cut at max_tokens).
_INVALID = (OUTCOME_INVALID, OUTCOME_TRUNCATED)


def flow_step(
    runner: StepRunner, run: Run, step: Step, finish: Finish
) -> Generator[simpy.Event, Any, list[Step]]:
    """Run `step` (with `step.flow` set) as its keys say, resolve it (a group: each of its
    steps) and return the steps it made ready. A skipped step succeeds with no answer."""
    flow = step.flow
    assert flow is not None
    if flow.members:
        return (yield from _group(runner, run, step, finish))
    ok, outcome = yield from _keyed(runner, run, step)
    return runner.resolve(run, step, ok, outcome, finish)


def _keyed(
    runner: StepRunner, run: Run, step: Step
) -> Generator[simpy.Event, Any, tuple[bool, str]]:
    """Run a step with keys of its own: (succeeded, the outcome a failure reports); its answers
    recorded."""
    flow = step.flow
    assert flow is not None
    bank, i = runner.bank, run.index
    if flow.when_probability is not None:
        if not bank.uniform(i, WHEN, step.id) < flow.when_probability:
            return True, ""
    elif flow.when_step is not None and run.valid_steps[flow.when_step] != flow.when_valid:
        return True, ""
    env, controls = runner.env, runner.controls
    run.running = step.id
    began = env.now if controls is not None else 0.0
    if flow.map is not None:
        n = count(flow.map, bank.uniform(i, MAP, step.id))
        ok, outcome, answers = yield from _map(runner, run, step, n, flow.map_first or n)
    elif flow.loop is not None:
        n = count(flow.loop, bank.uniform(i, LOOP, step.id), flow.loop_max)
        ok, outcome, answers = yield from _loop(runner, run, step, n)
    else:
        ok, outcome, answers = yield from _repeat(runner, run, step, flow.repeat)
    if ok and not run.closed and answers:
        runner.record_answer(run, step, answers[-1])
        if any(a is not None and not a.valid for a in answers):  # every one is built on
            run.valid_steps[step.index] = False
    if controls is not None:
        controls.step_ended(step.index, env.now - began, ok, runner.deadline_s)
    return ok, outcome or FAIL_NO_CALL


def _group(
    runner: StepRunner, run: Run, first: Step, finish: Finish
) -> Generator[simpy.Event, Any, list[Step]]:
    """A group looped: N iterations (N per request on stream `loop` and the group's name), each
    running the group's steps in order; the first failed step fails the group (the steps after
    it cannot run). Each step's answer is valid if every iteration's was."""
    flow = first.flow
    assert flow is not None
    assert flow.loop is not None
    steps = [runner.workflow.steps[m] for m in flow.members]
    n = count(flow.loop, runner.bank.uniform(run.index, LOOP, flow.loop_key), flow.loop_max)
    env, controls = runner.env, runner.controls
    answers: list[list[Call | None]] = [[] for _ in steps]
    failed: tuple[Step, str] | None = None
    for k in range(n):
        for j, step in enumerate(steps):
            run.running = step.id
            began = env.now if controls is not None else 0.0
            ok, handle = yield from _once(runner, run, step, k)
            if controls is not None:
                controls.step_ended(step.index, env.now - began, ok, runner.deadline_s)
            if not ok or run.closed:
                failed = (step, handle.last_outcome or FAIL_NO_CALL)
                break
            answers[j].append(handle.answer)
        if failed is not None:
            break
    ready: list[Step] = []
    for j, step in enumerate(steps):
        if failed is not None and failed[0] is step:
            return runner.resolve(run, step, False, failed[1], finish)
        if not run.closed and answers[j]:
            runner.record_answer(run, step, answers[j][-1])
            if any(a is not None and not a.valid for a in answers[j]):
                run.valid_steps[step.index] = False
        ready = runner.resolve(run, step, True, "", finish)
    return ready


def _once(
    runner: StepRunner, run: Run, step: Step, iteration: int
) -> Generator[simpy.Event, Any, tuple[bool, StepHandle]]:
    """One run of the step through its policy (or the tool desk) as iteration `iteration`."""
    handle = runner.handle(run, step, iteration)
    if step.tool is None:
        ok = yield from runner.policy.execute(handle)
    else:
        ok = yield from runner.tools.execute(handle)
    return ok, handle


def _repeat(runner: StepRunner, run: Run, step: Step, asks: int) -> Generator[Any, Any, Result]:
    """Ask while the answer is invalid (junk caught, truncated, or let through by the
    validator), at most `asks` times; the last ask's result stands (with 1: the step once)."""
    for k in range(asks):
        ok, handle = yield from _once(runner, run, step, k)
        answer = handle.answer
        invalid = (not ok and handle.last_outcome in _INVALID) or (
            ok and answer is not None and not answer.valid
        )
        if not invalid or k + 1 == asks or run.closed:
            return ok, handle.last_outcome, [answer] if ok else []
    raise AssertionError("unreachable: the last ask returns")  # pragma: no cover


def _loop(runner: StepRunner, run: Run, step: Step, n: int) -> Generator[Any, Any, Result]:
    """`n` iterations one after another; the first failed one fails the step."""
    answers: list[Call | None] = []
    outcome = ""
    for k in range(n):
        ok, handle = yield from _once(runner, run, step, k)
        outcome = handle.last_outcome
        if not ok or run.closed:
            return False, outcome, []
        answers.append(handle.answer)
    return True, outcome, answers


def _map(
    runner: StepRunner, run: Run, step: Step, n: int, first: int
) -> Generator[simpy.Event, Any, Result]:
    """`n` copies side by side, joined once `first` have answered validly (the rest are
    cancelled: their calls in flight end now, billed per `billing.cancelled`), or failed once
    too many have failed for that. Short of `first` valid answers when every copy has ended,
    answers the validator let through make up the count (the step's answer is then invalid)."""
    env = runner.env
    handles: dict[simpy.Process, StepHandle] = {}
    for k in range(n):
        handle = runner.handle(run, step, k)
        handle.tracked = set()
        handles[env.process(_copy(runner, handle))] = handle
    pending = list(handles)
    valid: list[StepHandle] = []  # succeeded with a valid answer (or none)
    invalid: list[StepHandle] = []  # succeeded with an answer the validator let through
    failed = 0
    outcome = ""
    while pending:
        yield env.any_of(pending)
        for process in [p for p in pending if not p.is_alive]:
            pending.remove(process)
            handle = handles[process]
            if not process.value:
                failed += 1
                outcome = outcome or handle.last_outcome
            elif handle.answer is not None and not handle.answer.valid:
                invalid.append(handle)
            else:
                valid.append(handle)
        if len(valid) >= first or failed > n - first or run.closed:
            break
    for process in pending:  # no longer needed: start nothing more, cancel what flies
        handle = handles[process]
        handle.stopped = True
        for attempt in list(handle.tracked or ()):
            handle.cancel(attempt)
    # the first K valid answers; short of them once every copy ended, invalid ones make up K
    joined = (valid + invalid)[:first]
    if len(joined) >= first and not run.closed:
        return True, joined[-1].last_outcome, [h.answer for h in joined]
    return False, outcome, []


def _copy(runner: StepRunner, handle: StepHandle) -> Generator[simpy.Event, Any, bool]:
    """One map copy through the step's policy: its process's value is whether it succeeded."""
    return (yield from runner.policy.execute(handle))
