"""Replay a scenario's arrivals through the user's async handler, in simulated time.

`drive_outcome` runs `handler(request, clients)` for every arrival of the run's context (the
same arrivals and provider draws `tailsim run` uses), each request held to its deadline: when
it passes, the handler is cancelled (the customer hangs up) and its calls still in flight with
it. A handler that returns in time has answered; one that raises has failed, with the
exception's type as the reason (`exception:<Type>`), never ending the drive. The records become
the engine's tables (`requests_frame`, `calls_frame`), so every summary, figure and report of
`tailsim run` reads a drive unchanged.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sim.analysis.capacity import ALL
from sim.analysis.metrics import calls_frame, requests_frame
from sim.analysis.user_signal import fill_user_first_token
from sim.harness.clients import Clients, Request
from sim.harness.clock import run_simulated
from sim.harness.service import BY_DEADLINE, CURRENT_RUN, Service
from sim.model.errors import ScenarioError
from sim.model.rows import FAIL_DEADLINE, OUTCOME_OK, Records, Run
from sim.plan import Plan
from sim.study.pilot import prepare
from sim.study.policy_run import DES, PolicyOutcome, RunContext, RunJob, run_policy
from sim.study.result import RunResult
from sim.study.runner import tables_result

Handler = Callable[[Request, Clients], Awaitable[Any]]
#: The `ended_by` of calls still in flight when their request answered.
BY_RUN_END = "run"
#: The reason of a run whose handler raised: this prefix and the exception's type.
FAIL_EXCEPTION = "exception:"


def drive_outcome(
    context: RunContext,
    handler: Handler,
    name: str,
    progress: Callable[[str, int], None] | None = None,
) -> PolicyOutcome:
    """Every request of `context` through `handler`, as policy `name`'s tables."""
    began = time.perf_counter()
    plan = context.plan
    service = Service(plan, context.bank, context.streams)
    clients = Clients(service)
    runs: list[Run] = []
    deadline_s = plan.deadline_s
    quality = plan.model_quality
    floor = plan.quality_floor
    steps = plan.workflow.steps

    def settle(run: Run, ok: bool, reason: str) -> None:
        run.closed = True
        run.ok = ok
        now = service.env.now
        run.end = now if ok or reason != FAIL_DEADLINE else run.deadline_at
        if not ok:
            run.failed, run.fail_reason, run.fail_step = True, reason, run.running
        answers = service.state(run).answers
        for step in steps:
            answer = answers.get(step.id)
            if answer is not None:
                run.answered += 1
                run.quality_sum += quality.get(answer.model, 1.0)
            run.valid_steps[step.index] = answer is not None and answer.outcome == OUTCOME_OK
        if ok:
            run.valid = all(
                run.valid_steps[s.index] for s in steps if s.required and s.tool is None
            )
            mean = run.quality_sum / run.answered if run.answered else 1.0
            run.quality = mean if run.valid else 0.0
            run.valid_hit = run.valid and run.quality >= floor - 1e-12
        cause = BY_RUN_END if reason != FAIL_DEADLINE else BY_DEADLINE
        service.end_run(run, cause)
        current = asyncio.current_task()
        for task in started.pop(id(run), ()):  # the request's own tasks (a hedge's calls) stop
            if task is not current and not task.done():
                task.cancel()

    async def one(run: Run) -> None:
        request = Request(run.index, run.resend, run.arrival, run.deadline_at)
        try:
            if math.isfinite(run.deadline_at):
                async with asyncio.timeout_at(run.deadline_at) as window:
                    await handler(request, clients)
            else:
                window = None
                await handler(request, clients)
        except TimeoutError as error:
            if window is not None and window.expired():
                settle(run, False, FAIL_DEADLINE)
            else:
                settle(run, False, FAIL_EXCEPTION + type(error).__name__)
            return
        except Exception as error:  # the user's code failed: this request's failure only
            settle(run, False, FAIL_EXCEPTION + type(error).__name__)
            return
        settle(run, True, "")

    #: Per run, the tasks its handler started (made by the loop's task factory in its context).
    started: dict[int, list[asyncio.Task[Any]]] = {}

    def task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        run = (
            CURRENT_RUN.get(None)
            if kwargs.get("context") is None
            else kwargs["context"].get(CURRENT_RUN)
        )
        if run is not None and not run.closed:
            started.setdefault(id(run), []).append(task)
        return task

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(task_factory)
        tasks = []
        for index, at in enumerate(context.arrivals.tolist()):
            if at > loop.time():
                await asyncio.sleep(at - loop.time())
            run = Run(service.env, plan.workflow, index, 0, deadline_s)
            runs.append(run)
            ctx = contextvars.copy_context()
            ctx.run(CURRENT_RUN.set, run)
            tasks.append(loop.create_task(one(run), context=ctx))
            if progress is not None and index % 1000 == 999:
                progress(name, 1000)
        await asyncio.gather(*tasks)
        if progress is not None and len(tasks) % 1000:
            progress(name, len(tasks) % 1000)
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in leftover:  # the handlers' orphans (a hedge nobody awaited): stopped
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)

    saved = random.getstate()  # the SDKs jitter their backoff with `random`: seeded per drive
    random.seed(plan.seed)
    try:
        run_simulated(service.env, main())
    finally:
        random.setstate(saved)
    records = Records(name, runs, service.calls)
    calls = calls_frame(records)
    requests = fill_user_first_token(requests_frame(records), calls, plan.signal_step)
    outcome = PolicyOutcome(name, DES, "driven: the user's handler", 0.0,
                            requests=requests, calls=calls)  # fmt: skip
    outcome.wall_s = time.perf_counter() - began
    return outcome


def drive(
    plan: Plan,
    handler: Handler,
    name: str,
    *,
    compare: Sequence[str] = (),
    progress: Callable[[str, int], None] | None = None,
) -> RunResult:
    """`handler` as policy `name` over `plan`'s arrivals (its size and seed), beside the
    scenario's policies `compare` on the same arrivals and provider draws: one run's tables."""
    if name in compare:
        raise ScenarioError(plan.source, [("policies", f"the handler's name {name!r} is also a "
                                           "policy of the scenario: rename one")])  # fmt: skip
    names = list(compare)
    if names:
        plan, _ = prepare(plan)  # the pilot's thresholds, as `tailsim run` has them
    job = RunJob(plan, names, ALL)
    context = job.context()
    outcomes = [drive_outcome(context, handler, name, progress)]
    outcomes += [run_policy(context, other, progress) for other in names]
    wall = {o.name: o.wall_s for o in outcomes}
    thresholds = {other: dict(plan.policies[other].thresholds) for other in names}
    thresholds[name] = {}
    return tables_result(job, thresholds, wall, outcomes)
