"""The real-client experiment's mechanics: the fake server (FIFO slots, token bucket with
whole-second Retry-After, per-request log) driven in-process by the real `openai` SDK on a free
loopback port. Checked from the server's log (order of timestamps, retry headers), never from
wall time: a loaded machine only makes every wait longer, which no assertion here minds."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.real_client import compare, litellm_setup
from experiments.real_client import scenario as scen
from sim.model.scenario import load_scenario

#: The tests that need the fake server (aiohttp) and the real SDK (openai) skip without them.
needs_sdk = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("aiohttp", "openai")),
    reason="openai and aiohttp are not installed: pip install -e '.[dev]' (or '.[real]')",
)


def _server_args(tmp: Path, **over: object) -> argparse.Namespace:
    from experiments.real_client import server  # noqa: PLC0415 (needs aiohttp)

    args = server.parse(["--log", str(tmp / "server.jsonl"), "--slots", "1"])
    for key, value in over.items():
        setattr(args, key, value)
    return args


def _run(tmp: Path, client_job, **server_opts: object) -> list[dict]:
    """Start the server in this event loop, run `client_job(base_url)`, stop, return the log."""

    from experiments.real_client import server  # noqa: PLC0415 (needs aiohttp)

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


@needs_sdk
def test_429_is_retried_after_its_retry_after(tmp_path: Path) -> None:
    """An empty bucket of 120 tokens/min (2 per second) refuses a 2-token call with Retry-After
    1; the SDK parses the response, waits at least that long and its retry is admitted."""
    answers = []

    import openai  # noqa: PLC0415 (optional)

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


@needs_sdk
def test_a_timeout_is_retried(tmp_path: Path) -> None:
    """A call slower than the client's per-attempt timeout: the SDK gives up on it, the server
    sees the disconnect (status 499, service never ended), the SDK retries it once
    (`max_retries=1`) and raises the timeout."""
    errors = []

    import openai  # noqa: PLC0415 (optional)

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


@needs_sdk
def test_the_deadline_cancels_the_call_and_the_queue_moves_on(tmp_path: Path) -> None:
    """asyncio.wait_for at the caller's deadline cancels the SDK call: no SDK retry, the server
    frees the only slot, and the next call is served."""
    outcomes = []

    import openai  # noqa: PLC0415 (optional)

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


@needs_sdk
def test_slots_are_handed_out_in_arrival_order() -> None:
    """Strict FIFO: a freed slot goes to the oldest waiter; a waiter cancelled in the queue
    leaves it without taking a slot."""
    order: list[int] = []

    from experiments.real_client import server  # noqa: PLC0415 (needs aiohttp)

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


def _completed(tmp: Path, tpm: float | None) -> tuple[Path, Path]:
    """The trace and overhead files of a small made-up run."""
    scen.write_trace(tmp, np.array([0.0, 0.4, 0.5, 1.7]))
    scen.write_overhead(tmp, np.array([0.004, 0.009, 0.012, -0.00001]))
    return tmp / "arrivals.csv", tmp / "overhead.csv"


def test_the_generated_openai_scenario_loads_with_the_preset_and_overhead(tmp_path: Path) -> None:
    """The scenario made from a run: trace arrivals of its own times, `sdk: openai`, the
    measured overhead as an empirical law, the server's slots, law and quota."""
    _completed(tmp_path, 120_000)
    setup = scen.Setup()
    data = scen.openai_scenario(setup, "t", "arrivals.csv", 120_000, "overhead.csv", 0.01)
    sc = load_scenario(scen.save(tmp_path, data))
    p = sc.providers["p"]
    assert sc.arrivals.kind == "trace"
    assert list(sc.arrivals.trace_offsets) == [0.0, 0.4, 0.5, 1.7]
    assert p.concurrency == setup.slots
    assert p.tpm == 120_000
    assert p.sdk.preset == "openai"
    assert p.overhead_held == pytest.approx(0.01)
    assert [s.id for s in sc.workflow.steps] == ["s1", "s2", "s3"]


@pytest.mark.slow
def test_the_litellm_scenario_comes_from_tailsim_import(tmp_path: Path) -> None:
    """The LiteLLM run's scenario is `tailsim import litellm` of its own router config: one
    provider per deployment with the config's quota, the router policy, completed by us."""
    _completed(tmp_path, 120_000)
    over = compare.Overhead(np.array([0.01, 0.02]), np.array([0.0, 0.0]))
    data, policy = litellm_setup.scenario(
        scen.Setup(), "t", "arrivals.csv", 120_000, "overhead.csv", over, tmp_path
    )
    sc = load_scenario(scen.save(tmp_path, data))
    assert policy == "litellm"
    assert sc.policies["litellm"].kind == "router"
    assert sorted(p.tpm for p in sc.providers.values()) == [40_000, 120_000]
    assert {s.model for s in sc.workflow.steps} == {litellm_setup.GROUP}
