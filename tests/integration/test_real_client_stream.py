"""The streaming half of the real-client experiment: the fake server's SSE answers (OpenAI
chat.completions stream format, stalls before the first chunk or mid-stream, mid-stream breaks),
read by aiohttp and by the real `openai` SDK with `stream=True` on a free loopback port, and the
streaming driver's retries. Checked from what arrived and from the server's log, never from wall
time: the stalls that must trip a read timeout are 60 s against a timeout of 0.3 s."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from experiments.real_client import compare
from experiments.real_client import stream_run as sr
from sim.model.scenario import load_scenario

needs_aiohttp = pytest.mark.skipif(
    importlib.util.find_spec("aiohttp") is None, reason="aiohttp is not installed"
)
#: The tests that need the real SDK (openai) skip without it, as in test_real_client.py.
needs_sdk = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("aiohttp", "openai")),
    reason="openai and aiohttp are not installed: pip install -e '.[dev]' (or '.[real]')",
)


def _run(tmp: Path, job, *argv: str) -> list[dict]:
    """Start the fake server (in this loop, port 0), run `job(base_url)`, return its log."""
    from experiments.real_client import server  # noqa: PLC0415 (needs aiohttp)

    args = server.parse(["--log", str(tmp / "server.jsonl"), "--slots", "2", *argv])

    async def main() -> None:
        with (tmp / "server.jsonl").open("w", buffering=1) as log:
            runners, ports = await server.start(args, log)
            try:
                await job(f"http://127.0.0.1:{ports['d0']}/v1")
            finally:
                for runner in runners:
                    await runner.cleanup()

    asyncio.run(main())
    return [json.loads(line) for line in (tmp / "server.jsonl").read_text().splitlines()]


def _body(max_tokens: int, **fake: object) -> dict:
    return {
        "model": "fake",
        "messages": [{"role": "user", "content": "w w"}],
        "max_tokens": max_tokens,
        "stream": True,
        "fake_service_s": 0.01,
        **fake,
    }


async def _raw(url: str, body: dict) -> list[tuple[str | None, str]]:
    """The SSE events of one streamed answer as (event name, data), read with aiohttp."""
    import aiohttp  # noqa: PLC0415 (optional)

    events: list[tuple[str | None, str]] = []
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/chat/completions", json=body) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        text = (await response.read()).decode()
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields.get("event"), fields["data"]))
    return events


@needs_aiohttp
def test_the_server_streams_openai_chunks_then_done(tmp_path: Path) -> None:
    events: list = []

    async def job(url: str) -> None:
        events.extend(await _raw(url, _body(12)))

    rows = _run(tmp_path, job, "--chunk-tokens", "5")
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content", "") for d in deltas) == "ok " * 12
    assert [len(d["content"].split()) for d in deltas[1:-1]] == [5, 5, 2]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert rows[0]["status"] == 200
    assert rows[0]["tokens_sent"] == 12
    assert rows[0]["first"] <= rows[0]["end"]


@needs_aiohttp
def test_a_break_sends_an_error_event_and_no_done(tmp_path: Path) -> None:
    events: list = []

    async def job(url: str) -> None:
        events.extend(await _raw(url, _body(20, fake_break_after=7)))

    rows = _run(tmp_path, job, "--chunk-tokens", "5")
    assert events[-1][0] == "error"
    assert json.loads(events[-1][1])["error"]["code"] == "overloaded"
    assert all(data != "[DONE]" for _, data in events)
    assert rows[0]["broken"] is True
    assert rows[0]["tokens_sent"] == 5  # the break falls in the chunk holding token 7


@needs_aiohttp
def test_stall_places_and_breaks_follow_the_law() -> None:
    """2,000 draws at S = 0.3, p = 0.5, break 0.1: each share within 4 binomial SEs; six draws
    per answer whatever it holds, so answers never shift each other's draws."""
    from experiments.real_client.streaming import StreamLaw  # noqa: PLC0415 (needs aiohttp)

    law = StreamLaw(stall_probability=0.5, before_first_token=0.3, mid_stream_error_rate=0.1)
    rng = np.random.default_rng(5)
    plans = [law.draw(rng, 50) for _ in range(2000)]
    twin = np.random.default_rng(5)
    for _ in range(2000):
        twin.random(5)
        twin.standard_normal()
    assert rng.random() == twin.random()
    stalled = np.array([p["stall_s"] > 0 for p in plans])
    before = np.array([p["before"] for p in plans])[stalled]
    broken = np.array([p["break_at"] is not None for p in plans])
    for share, truth, n in ((stalled.mean(), 0.5, 2000), (before.mean(), 0.3, len(before))):
        assert abs(share - truth) <= 4 * np.sqrt(truth * (1 - truth) / n)
    assert abs(broken.mean() - 0.1) <= 4 * np.sqrt(0.09 / 2000)
    assert all(0 <= p["onset"] < 50 for p in plans)


@needs_sdk
def test_the_openai_sdk_parses_the_stream(tmp_path: Path) -> None:
    import openai  # noqa: PLC0415 (optional)

    pieces: list[str] = []

    async def job(url: str) -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        stream = await client.chat.completions.create(
            model="fake",
            messages=[{"role": "user", "content": "w"}],
            max_tokens=9,
            stream=True,
            extra_body={"fake_service_s": 0.01},
        )
        async for chunk in stream:
            pieces.append(chunk.choices[0].delta.content or "")
        await client.close()

    _run(tmp_path, job, "--chunk-tokens", "4")
    assert "".join(pieces) == "ok " * 9
    assert len(pieces) == 1 + 3 + 1  # the role, three chunks of content, the finish


@needs_sdk
def test_a_stall_before_the_first_chunk_trips_the_read_timeout_and_the_sdk_retries(
    tmp_path: Path,
) -> None:
    """No byte before the first chunk: openai's `timeout` (httpx's read timeout) fires while
    waiting for the headers, inside the SDK's retry loop: 1 + max_retries calls, all cut
    (499), then APITimeoutError from `create`."""
    import openai  # noqa: PLC0415 (optional)

    errors: list[BaseException] = []

    async def job(url: str) -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=1, timeout=0.3)
        try:
            await client.chat.completions.create(
                model="fake",
                messages=[{"role": "user", "content": "w"}],
                max_tokens=5,
                stream=True,
                extra_body={"fake_stall_s": 60, "fake_stall_where": "before_first_token"},
            )
        except openai.APITimeoutError as error:
            errors.append(error)
        await client.close()

    rows = _run(tmp_path, job)
    assert len(errors) == 1
    assert [r["retry"] for r in rows] == [0, 1]
    assert all(r["status"] == 499 and r.get("first") is None for r in rows)


@needs_sdk
def test_a_mid_stream_stall_trips_the_read_timeout_while_reading_and_is_not_retried(
    tmp_path: Path,
) -> None:
    """After the first chunk the same read timeout fires between chunks, raised by the stream's
    iteration: the SDK's retry loop is over, so one call only (the driver's own retry is what
    restarts it)."""
    import openai  # noqa: PLC0415 (optional)

    got: list[object] = []

    async def job(url: str) -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=2, timeout=0.3)
        stream = await client.chat.completions.create(
            model="fake",
            messages=[{"role": "user", "content": "w"}],
            max_tokens=20,
            stream=True,
            extra_body={"fake_stall_s": 60, "fake_stall_where": "mid_stream"},
        )
        try:
            async for chunk in stream:
                got.append(chunk)
        except openai.APITimeoutError as error:
            got.append(error)
        await client.close()

    rows = _run(tmp_path, job, "--chunk-tokens", "100")  # one content chunk: the stall before it
    assert isinstance(got[-1], openai.APITimeoutError)
    assert len(got) == 2  # the role chunk arrived, then the timeout
    assert len(rows) == 1
    assert rows[0]["status"] == 499
    assert rows[0]["first"] is not None


@needs_sdk
def test_the_streaming_driver_counts_its_calls_and_retries_broken_streams(tmp_path: Path) -> None:
    """Every answer breaks: each step is sent twice (the driver's one retry; the SDK does not
    retry an `error` event), and the request fails with the SDK's APIError."""
    from experiments.real_client import driver  # noqa: PLC0415

    out: dict = {}
    work = driver.Workload(50.0, 2, steps=1, deadline_s=60.0, input_tokens=2, max_tokens=10)

    async def job(url: str) -> None:
        out["requests"], out["calls"] = await driver.run_openai_stream(work, url, 30.0, 1)

    log = _run(
        tmp_path, job, "--mid-stream-error-rate", "1", "--median-s", "0.01", "--p99-s", "0.02"
    )
    import pandas as pd  # noqa: PLC0415

    real = compare.real_requests(out["requests"], pd.DataFrame(log), work.deadline_s)
    assert real["calls"].tolist() == [2, 2]
    assert not real["ok"].any()
    assert all(row["broken"] for row in log)
    assert {c["outcome"] for c in out["calls"]} == {"error"}


def test_the_reference_scenario_is_the_one_the_run_writes() -> None:
    """`streaming_scenario.yaml` is `reference_text()` (regenerate it with that function)."""
    assert sr.SCENARIO_FILE.read_text() == sr.reference_text()


def test_the_streaming_scenario_uses_the_streams_keys() -> None:
    """The keys of the streams schema, with the server's law, in a file tailsim loads."""
    data = sr.scenario_dict(sr.StreamSetup(), "t", {"kind": "poisson", "rate_per_s": 1.0})
    serving = data["providers"]["p"]["serves"]["fake"]
    assert serving["stall"]["where"] == {"before_first_token": 0.5}
    assert serving["mid_stream_error_rate"] == 0.02
    assert all(step["stream"] for step in data["workflow"]["steps"])
    assert data["providers"]["p"]["sdk"] == {"preset": "openai", "timeout_s": 1.5}
    scenario = load_scenario(sr.SCENARIO_FILE)
    assert scenario.deadline_s == 6.0
    assert all(step.stream for step in scenario.workflow.steps)
