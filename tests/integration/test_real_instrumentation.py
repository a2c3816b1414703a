"""The real-instrumentation round trip: the real `openai` SDK, instrumented by the official
OpenTelemetry GenAI instrumentation (`opentelemetry-instrumentation-openai-v2`), drives a small
agent against the fake server (experiments/real_client/server.py, a free loopback port); the
spans, written as OTLP JSON, are read back by `tailsim fit --workflow`. Every figure asserted is
a count the test drove (loop counts, the branch's share, token sizes), never a wall time."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sim.calibration.traces_out import otlp_value
from tests.helpers import cli

pytestmark = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m)
        for m in ("aiohttp", "openai", "opentelemetry.sdk", "opentelemetry.instrumentation")
    ),
    reason="the dev extra is not installed: pip install -e '.[dev]'",
)

REQUESTS = 60
SEED = 20261202
#: The agent's loop law (the act count per request; drawn per request, then counted exactly).
ACT_LAW = {1: 0.5, 2: 0.3, 3: 0.2}
#: Requests that run the check step: exactly this many of REQUESTS (a shuffled subset).
CHECKED = 36
#: Requests in flight at once (few: one event loop runs the client and the server).
IN_FLIGHT = 8
#: Each step's model and its (input words = input tokens, max_tokens = output tokens).
STEPS = {
    "plan": ("planner", 300, 50),
    "act": ("actor", 800, 120),
    "check": ("checker", 200, 10),
    "answer": ("writer", 1000, 200),
}


def _attributes(attrs: Any) -> list[dict[str, Any]]:
    return [{"key": k, "value": otlp_value(v)} for k, v in (attrs or {}).items()]


def otlp_json(spans: Any) -> dict[str, Any]:
    """Finished SDK spans as one OTLP JSON document (as the OTLP file exporter writes it: ids
    in hex, times in unix nanoseconds as strings, status code 2 = error)."""
    resources: dict[int, tuple[Any, list[dict[str, Any]]]] = {}
    for span in spans:
        _, out = resources.setdefault(id(span.resource), (span.resource, []))
        ctx = span.get_span_context()
        out.append(
            {
                "traceId": f"{ctx.trace_id:032x}",
                "spanId": f"{ctx.span_id:016x}",
                "parentSpanId": f"{span.parent.span_id:016x}" if span.parent else "",
                "name": span.name,
                "kind": int(span.kind.value) + 1,
                "startTimeUnixNano": str(span.start_time),
                "endTimeUnixNano": str(span.end_time),
                "attributes": _attributes(span.attributes),
                "status": {"code": int(span.status.status_code.value)},
            }
        )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource.attributes)},
                "scopeSpans": [{"scope": {"name": "tailsim-test"}, "spans": out}],
            }
            for resource, out in resources.values()
        ]
    }


@pytest.fixture
def instrumented() -> Iterator[tuple[Any, Any]]:
    """(tracer, exporter): the openai SDK instrumented into an in-memory exporter for the
    test only (uninstrumented after, so no other test sees patched methods)."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: PLC0415
        InMemorySpanExporter,
    )

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield provider.get_tracer("tailsim-test"), exporter
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def plan_requests() -> list[tuple[int, bool]]:
    """Per request, (act count, runs check): the counts drawn from ACT_LAW, the check on a
    shuffled CHECKED of the REQUESTS (seeded, so the truth is known before the run)."""
    rng = np.random.default_rng(SEED)
    acts = rng.choice(list(ACT_LAW), size=REQUESTS, p=list(ACT_LAW.values()))
    checked = np.zeros(REQUESTS, dtype=bool)
    checked[rng.permutation(REQUESTS)[:CHECKED]] = True
    return [(int(a), bool(c)) for a, c in zip(acts, checked, strict=True)]


def drive(tmp: Path, tracer: Any, plans: list[tuple[int, bool]]) -> None:
    """Start the fake server (ephemeral port, service times of tens of ms), run the requests
    IN_FLIGHT at a time through the real AsyncOpenAI client: a root span per request, a step span
    around each instrumented call."""
    import openai  # noqa: PLC0415 (optional)

    from experiments.real_client import server  # noqa: PLC0415 (needs aiohttp)

    args = server.parse(
        ["--log", str(tmp / "server.jsonl"), "--median-s", "0.02", "--p99-s", "0.06"]
    )
    args.seed, args.slots = SEED, IN_FLIGHT  # no queue: each call's time is the server's law

    async def call(client: Any, step: str) -> None:
        model, words, out = STEPS[step]
        with tracer.start_as_current_span(step):
            await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": " ".join(["w"] * words)}],
                max_tokens=out,
            )

    async def request(client: Any, acts: int, check: bool, gate: asyncio.Semaphore) -> None:
        async with gate, asyncio.timeout(120.0):  # a hang guard only
            await run(client, acts, check)

    async def run(client: Any, acts: int, check: bool) -> None:
        with tracer.start_as_current_span("workflow"):
            await call(client, "plan")
            for _ in range(acts):
                await call(client, "act")
            if check:
                await call(client, "check")
            await call(client, "answer")

    async def main() -> None:
        with (tmp / "server.jsonl").open("w", buffering=1) as log:
            runners, ports = await server.start(args, log)
            client = openai.AsyncOpenAI(
                base_url=f"http://127.0.0.1:{ports['d0']}/v1",
                api_key="x",
                max_retries=0,
                timeout=60.0,  # a hang guard only: a busy machine makes every call slower
            )
            try:
                gate = asyncio.Semaphore(IN_FLIGHT)
                await asyncio.gather(*(request(client, a, c, gate) for a, c in plans))
            finally:
                await client.close()
                for runner in runners:
                    await runner.cleanup()

    asyncio.run(main())


def test_instrumented_openai_calls_fit_back_to_the_workflow_driven(
    tmp_path: Path, instrumented: tuple[Any, Any]
) -> None:
    """60 requests of plan -> act x N (N from ACT_LAW) -> check (in 36) -> answer, each call
    a `chat MODEL` span of the instrumentation under the application's step span: fit
    --workflow gives the four steps in order, the act loop's empirical law equal to the counts
    driven and check's `when` equal to 36/60 (exact: both are counts of the traces, no
    estimate), each step's model and token sizes as sent and as the server's usage returned,
    and a scenario `tailsim check` accepts."""
    tracer, exporter = instrumented
    plans = plan_requests()
    drive(tmp_path, tracer, plans)
    spans = exporter.get_finished_spans()
    calls = [s for s in spans if s.name.startswith("chat ")]
    assert len(calls) == sum(acts + check + 2 for acts, check in plans)
    assert {s.attributes["gen_ai.usage.output_tokens"] for s in calls} == {
        out for _, _, out in STEPS.values()
    }  # the usage the instrumentation read from the server's responses
    traces = tmp_path / "traces.json"
    traces.write_text(json.dumps(otlp_json(spans)))

    out = tmp_path / "agent.yaml"
    result = cli("fit", "--workflow", traces, "--out", out)
    assert result.exit_code == 0, result.output
    assert f"{REQUESTS} traces read" in result.output
    steps = {s["id"]: s for s in yaml.safe_load(out.read_text())["workflow"]["steps"]}
    assert list(steps) == ["plan", "act", "check", "answer"]
    assert [steps[n].get("after") for n in steps] == [None, ["plan"], ["act"], ["check"]]
    for name, (model, words, tokens) in STEPS.items():
        assert steps[name]["model"] == model
        assert steps[name]["provider"] == "openai"
        assert steps[name]["input_tokens"] == words
        assert steps[name]["output_tokens"] == tokens
    driven = Counter(acts for acts, _ in plans)
    loop = steps["act"]["loop"]["count"]
    assert loop["dist"] == "empirical"
    assert loop["values"] == sorted(driven)
    assert loop["weights"] == [round(driven[v] / REQUESTS, 6) for v in sorted(driven)]
    assert steps["check"]["when"] == {"probability": round(CHECKED / REQUESTS, 4)}
    for name in ("plan", "answer"):
        assert not {"loop", "when", "map"} & set(steps[name])
    for name in ("act", "check"):
        assert "map" not in steps[name]
    checked = cli("check", out)
    assert checked.exit_code == 0, checked.output
