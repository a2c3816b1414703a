"""Request handlers written as a team would write them, for `tailsim drive` (docs/drive.md).

`openai_wait` is the real openai SDK with its own retries and nothing above them (the YAML
policy `openai-wait` of scenarios/drive.yaml); `hand_hedge` is an asyncio hedge written by
hand (the YAML policy `hedge`): a primary call, a second one on another provider `HEDGE_AFTER_S`
after it or at once when it fails, the first good answer wins and the other is cancelled.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sim.harness.transport import is_junk

MESSAGES = [{"role": "user", "content": "Summarise the ticket."}]
HEDGE_AFTER_S = 2.0


class JunkAnswerError(ValueError):
    """The answer failed our validation (the simulated junk)."""


async def openai_wait(request: Any, clients: Any) -> str:
    """One call through AsyncOpenAI(max_retries=2, timeout=6): the SDK retries 429s, 5xx and
    its own timeouts; a junk answer fails the request."""
    client = clients.openai("a", max_retries=2, timeout=6.0)
    answer = await client.chat.completions.create(model=clients.model("a"), messages=MESSAGES)
    text = answer.choices[0].message.content
    if is_junk(text):
        raise JunkAnswerError(text)
    return text


async def _ask(clients: Any, provider: str) -> str:
    client = clients.openai(provider, max_retries=0)
    answer = await client.chat.completions.create(model=clients.model(provider), messages=MESSAGES)
    text = answer.choices[0].message.content
    if is_junk(text):
        raise JunkAnswerError(text)
    return text


async def hand_hedge(request: Any, clients: Any) -> str:
    """A hedge by hand: `bare` first; `b` once the primary is `HEDGE_AFTER_S` old or failed."""
    loop = asyncio.get_running_loop()
    pending = {asyncio.create_task(_ask(clients, "bare"))}
    fire_at, fired = loop.time() + HEDGE_AFTER_S, False
    while pending:
        wait = None if fired else max(0.0, fire_at - loop.time())
        done, pending = await asyncio.wait(pending, timeout=wait,
                                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        for task in done:
            if task.exception() is None:
                for loser in pending:
                    loser.cancel()
                return task.result()
        if not fired and (not pending or loop.time() >= fire_at):
            pending.add(asyncio.create_task(_ask(clients, "b")))
            fired = True
    raise RuntimeError("every call failed")
