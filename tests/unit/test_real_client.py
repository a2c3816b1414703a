"""The real-client experiment's mechanics: the fake server (FIFO slots, token bucket with
whole-second Retry-After, per-request log) driven in-process by the real `openai` SDK on a free
loopback port. Checked from the server's log (order of timestamps, retry headers), never from
wall time: a loaded machine only makes every wait longer, which no assertion here minds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiohttp", reason="the fake server needs aiohttp: pip install -e '.[dev]'")
openai = pytest.importorskip("openai", reason="the real SDK is needed: pip install -e '.[dev]'")

from experiments.real_client import compare, server  # noqa: E402


def _server_args(tmp: Path, **over: object) -> tuple:
    args = server.parse(["--log", str(tmp / "server.jsonl"), "--slots", "1"])
    for key, value in over.items():
        setattr(args, key, value)
    return args


def _run(tmp: Path, client_job, **server_opts: object) -> list[dict]:
    """Start the server in this event loop, run `client_job(base_url)`, stop, return the log."""

    async def main() -> None:
        with (tmp / "server.jsonl").open("w", buffering=1) as log:
            runners, ports = await server.start(_server_args(tmp, **server_opts), log)
            try:
                await client_job(f"http://127.0.0.1:{ports['d0']}/v1")
            finally:
                for runner in runners:
                    await runner.cleanup()

    asyncio.run(main())
    return [json.loads(line) for line in (tmp / "server.jsonl").read_text().splitlines()]


def _create(client, call_id: str, **extra: object):
    return client.chat.completions.create(
        model="fake",
        messages=[{"role": "user", "content": "w"}],
        max_tokens=1,
        extra_headers={"x-call-id": call_id},
        extra_body=extra or None,
    )


def test_429_is_retried_after_its_retry_after(tmp_path: Path) -> None:
    """An empty bucket of 120 tokens/min (2 per second) refuses a 2-token call with Retry-After
    1; the SDK parses the response, waits at least that long and its retry is admitted."""
    answers = []

    async def job(url: str) -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=2)
        answers.append(await _create(client, "a"))
        await client.close()

    rows = _run(tmp_path, job, tpm="120", start="steady")
    assert [(r["status"], r["retry"]) for r in rows] == [(429, 0), (200, 1)]
    assert rows[0]["retry_after"] == 1
    assert rows[1]["arrival"] - rows[0]["sent"] >= rows[0]["retry_after"]
    assert answers[0].choices[0].message.content.strip() == "ok"
    assert answers[0].usage.total_tokens == 2


def test_a_timeout_is_retried(tmp_path: Path) -> None:
    """A call slower than the client's per-attempt timeout: the SDK gives up on it, the server
    sees the disconnect (status 499, service never ended), the SDK retries it once
    (`max_retries=1`) and raises the timeout."""
    errors = []

    async def job(url: str) -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=1, timeout=0.2)
        try:
            await _create(client, "t", fake_service_s=60)
        except openai.APITimeoutError as error:
            errors.append(error)
        await client.close()

    rows = _run(tmp_path, job)
    assert len(errors) == 1
    assert [r["retry"] for r in rows] == [0, 1]
    assert all(r["status"] == 499 and r["end"] is None for r in rows)
    assert rows[1]["arrival"] > rows[0]["arrival"]


def test_the_deadline_cancels_the_call_and_the_queue_moves_on(tmp_path: Path) -> None:
    """asyncio.wait_for at the caller's deadline cancels the SDK call: no SDK retry, the server
    frees the only slot, and the next call is served."""
    outcomes = []

    async def job(url: str) -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=2)
        try:
            await asyncio.wait_for(_create(client, "d", fake_service_s=60), 0.2)
        except TimeoutError:
            outcomes.append("deadline")
        # let the server notice the closed connection before the next call
        await asyncio.sleep(0.05)
        await _create(client, "n", fake_service_s=0.01)
        outcomes.append("next ok")
        await client.close()

    rows = _run(tmp_path, job)
    assert outcomes == ["deadline", "next ok"]
    first = [r for r in rows if r["call_id"] == "d"]
    after = [r for r in rows if r["call_id"] == "n"]
    assert [(r["status"], r["end"]) for r in first] == [(499, None)]
    assert [r["status"] for r in after] == [200]
    assert after[0]["slot"] >= first[0]["sent"]


def test_slots_are_handed_out_in_arrival_order() -> None:
    """Strict FIFO: a freed slot goes to the oldest waiter; a waiter cancelled in the queue
    leaves it without taking a slot."""
    order: list[int] = []

    async def main() -> None:
        slots = server.FifoSlots(1)
        await slots.acquire()

        async def waiter(k: int) -> None:
            await slots.acquire()
            order.append(k)
            slots.release()

        tasks = [asyncio.create_task(waiter(k)) for k in range(4)]
        await asyncio.sleep(0)  # all four queued, in order
        tasks[1].cancel()
        slots.release()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert slots.free == 1
        assert not slots.waiters

    asyncio.run(main())
    assert order == [0, 2, 3]


def test_bootstrap_of_identical_runs_has_no_difference() -> None:
    """A replay equal to the real run differs by exactly 0 in every resample; a replay with
    one more call per request shows it, with an interval around the true ratio."""
    rng = np.random.default_rng(3)
    n = 200
    real = pd.DataFrame(
        {
            "latency_s": rng.lognormal(0, 0.5, n),
            "ok": rng.random(n) < 0.8,
            "calls": rng.integers(3, 6, n).astype(float),
            "r429": rng.integers(0, 2, n).astype(float),
        }
    )
    same = compare.bootstrap(real, [real.copy(), real.copy()], n_boot=200)
    assert np.allclose(same[["diff", "diff_lo", "diff_hi"]].fillna(0).to_numpy(), 0.0)
    more = real.assign(calls=real["calls"] + 1)
    table = compare.bootstrap(real, [more], n_boot=200).set_index("metric")
    true = 1 / real["calls"].mean()
    assert table.loc["calls/req", "diff"] == pytest.approx(true)
    assert table.loc["calls/req", "diff_lo"] < true < table.loc["calls/req", "diff_hi"]
