"""A scenario's policy as openai client code: `tailsim export openai SCENARIO --policy P`.

The client settings of each provider the policy calls (`max_retries` and the timeout of its
`sdk:` preset) and a short asyncio request handler that does what the policy does with the
real `openai.AsyncOpenAI`: wait and cut (one attempt at a time, cut with `asyncio.wait_for`,
a 429's Retry-After honoured), race (all attempts at once, the first valid answer wins, the
rest cancelled) and hedge (a second call after `after` seconds or at once on a failure). The
handler has `tailsim drive`'s interface, so `tailsim drive SCENARIO FILE.py:handle` runs it to
the policy's numbers. Kinds and keys a few lines of asyncio cannot say are refused or listed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sim.model.errors import ScenarioError
from sim.plan import Plan

#: The kinds the export writes code for.
KINDS = ("wait", "cut", "race", "hedge")
#: Policy keys the handler does not carry out (each listed when set).
UNSAID = {
    "backoff": "a backoff between retries (the handler waits only a 429's Retry-After)",
    "admission": "deadline-aware admission",
    "controls": "load-aware controls (breaker, hedge cap, retry budget, shedding)",
    "first_token_timeout_s": "a first-token cut (stream the answer and time its first chunk)",
    "idle_timeout_s": "an idle cut (stream the answer with an httpx read timeout)",
    "resume": "resuming a cut stream",
    "steps": "per-step overrides",
}


@dataclass
class OpenaiExport:
    """The handler's source, the client settings per provider, and what it leaves out."""

    code: str
    settings: dict[str, dict[str, Any]]
    unexpressed: list[str] = field(default_factory=list)


def export_openai(plan: Plan, name: str) -> OpenaiExport:
    """Policy `name` of `plan` (thresholds resolved: seconds) as openai client code."""
    known = plan.policies.get(name)
    if known is None:
        allowed = ", ".join(plan.policies)
        raise ScenarioError(plan.source, [("policies", f"no policy {name!r}; known: {allowed}")])
    if known.kind not in KINDS:
        why = f"kind {known.kind!r} cannot be exported as client code; allowed: {', '.join(KINDS)}"
        raise ScenarioError(plan.source, [(f"policies.{name}.kind", why)])
    steps = [s for s in plan.workflow.steps if s.tool is None]
    unexpressed: list[str] = []
    for s in plan.workflow.steps:
        if s.tool is not None:
            unexpressed.append(f"workflow.steps.{s.id}: a tool step (your own code runs it)")
        elif s.flow is not None:
            unexpressed.append(f"workflow.steps.{s.id}: when/repeat/loop/map (runs once here)")
    for i, s in enumerate(steps[1:], 1):
        if steps[i - 1].index not in s.depends_on or len(s.depends_on) != 1:
            unexpressed.append(
                f"workflow.steps.{s.id}: not a chain (the handler runs steps in order)"
            )
    rows, settings = [], {}
    for step in steps:
        spec = known.specs[step.id]
        data = spec.model_dump(exclude_none=True) if hasattr(spec, "model_dump") else dict(spec)
        for key, why in UNSAID.items():
            if data.get(key) not in (None, False, {}, []) and f"policies.{name}.{key}" not in (
                u.split(":")[0] for u in unexpressed
            ):
                unexpressed.append(f"policies.{name}.{key}: {why}")
        providers = list(data.get("providers") or [step.provider])
        if "after" in data:  # a hedge: its primary on the step's provider, then these
            providers = [step.provider, *providers]
        row = {"id": step.id, "model": step.model, "providers": providers,
               "retries": int(data.get("retries", 0)),
               "timeout": _seconds(data.get("timeout_s", data.get("cutoff"))),
               "attempts": int(data.get("attempts", 2)), "hedges": int(data.get("hedges", 1)),
               "after": _seconds(data.get("after"))}  # fmt: skip
        rows.append(row)
        for provider in providers:
            sdk = plan.providers[provider].spec.sdk
            settings[provider] = {"max_retries": int(sdk.retries),
                                  "timeout": sdk.timeout_s}  # fmt: skip
    code = _render(name, known.kind, plan.name, rows, settings, unexpressed)
    compile(code, f"<export of {name}>", "exec")  # the export is valid Python, or this fails
    return OpenaiExport(code, settings, unexpressed)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def _render(
    name: str,
    kind: str,
    scenario: str,
    rows: list[dict[str, Any]],
    settings: dict[str, dict[str, Any]],
    unexpressed: list[str],
) -> str:
    head = [f'"""Policy {name!r} of scenario {scenario!r} as openai client code ({kind}).',
            "", "Written by `tailsim export openai`; `tailsim drive SCENARIO THIS_FILE.py:handle`",
            "runs it against the simulated providers. Not carried out here:"]  # fmt: skip
    head += [f"- {line}" for line in unexpressed] or ["- nothing: the policy is said whole"]
    head += ['"""', ""]
    steps = json.dumps(rows, indent=4).replace("null", "None")
    clients = json.dumps(settings, indent=4).replace("null", "None")
    return "\n".join(head) + _BODY.format(kind=kind, steps=steps, clients=clients)


_BODY = '''
import asyncio

import openai

KIND = "{kind}"
#: Per step, in order: its model, providers in turn, retries, cut (s), race attempts, hedge.
STEPS = {steps}
#: Per provider: the client's own settings (its `sdk:` preset in the scenario).
CLIENTS = {clients}
MESSAGES = [{{"role": "user", "content": "..."}}]  # your prompt


def valid(text):
    """Your validator (here: the simulated providers' junk answer fails it)."""
    return text is not None and not text.startswith("[tailsim: junk answer]")


async def ask(clients, step, provider):
    client = clients.openai(provider, **CLIENTS[provider])
    answer = await client.chat.completions.create(
        model=clients.model(provider), messages=MESSAGES,
        extra_headers={{"x-tailsim-step": step["id"]}},
    )
    text = answer.choices[0].message.content
    if not valid(text):
        raise ValueError("invalid answer")
    return text


async def one_at_a_time(clients, step):
    """wait / cut: attempt k on providers[k mod n], each cut at step["timeout"]."""
    providers = step["providers"]
    for k in range(step["retries"] + 1):
        call = ask(clients, step, providers[k % len(providers)])
        try:
            if step["timeout"] is None:
                return await call
            return await asyncio.wait_for(call, step["timeout"])
        except openai.RateLimitError as error:
            wait = float(error.response.headers.get("retry-after", 0) or 0)
            if k < step["retries"] and wait > 0:
                await asyncio.sleep(wait)
        except (openai.APIError, TimeoutError, ValueError):
            pass
    raise RuntimeError(f"step {{step['id']}}: every attempt failed")


async def first_valid(pending):
    """The first of `pending` to answer validly; the others cancelled."""
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is None:
                    return task.result()
        raise RuntimeError("every call failed")
    finally:
        for task in pending:
            task.cancel()


async def race(clients, step):
    providers = step["providers"]
    tasks = {{asyncio.create_task(ask(clients, step, providers[i % len(providers)]))
             for i in range(step["attempts"])}}
    return await first_valid(tasks)


async def hedge(clients, step):
    """The primary; a hedge `after` s past the last start, or at once when all failed."""
    loop = asyncio.get_running_loop()
    providers = step["providers"]
    pending = {{asyncio.create_task(ask(clients, step, providers[0]))}}
    fired, fire_at = 0, loop.time() + step["after"]
    try:
        while pending:
            more = fired < step["hedges"]
            wait = max(0.0, fire_at - loop.time()) if more else None
            done, pending = await asyncio.wait(pending, timeout=wait,
                                               return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is None:
                    return task.result()
            if more and (not pending or loop.time() >= fire_at):
                fired += 1
                provider = providers[1 + (fired - 1) % (len(providers) - 1)]
                pending.add(asyncio.create_task(ask(clients, step, provider)))
                fire_at = loop.time() + step["after"]
        raise RuntimeError(f"step {{step['id']}}: every call failed")
    finally:
        for task in pending:
            task.cancel()


RUN = {{"wait": one_at_a_time, "cut": one_at_a_time, "race": race, "hedge": hedge}}[KIND]


async def handle(request, clients):
    """Every step in order under the policy."""
    answer = None
    for step in STEPS:
        answer = await RUN(clients, step)
    return answer
'''
