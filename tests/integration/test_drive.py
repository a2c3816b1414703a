"""`tailsim drive` and `sim.api.drive`: real client code (openai, anthropic, LiteLLM's Router)
run against the scenario's simulated providers in simulated time, held to the policies that
describe it, with the user's failures counted and bad input refused."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments import drive_agreement as agreement
from experiments.drive_handlers import MESSAGES, hand_hedge, openai_wait
from sim.api import drive
from sim.model.scenario import load_scenario, with_overrides
from tests.helpers import REPO_ROOT, assert_exit, cli

SCENARIO = REPO_ROOT / "scenarios" / "drive.yaml"


@pytest.mark.parametrize("load", list(agreement.LOADS))
def test_the_real_clients_agree_with_the_policies_that_describe_them(load: str) -> None:
    """At each load the real AsyncOpenAI(max_retries=2), a hand-written hedge and LiteLLM's
    Router give the hit rate of kinds wait (over sdk: openai), hedge and router: the paired
    95% CI of the difference covers 0 and its half-width is under 2 points (n = 800 paired
    requests: the half-width is 1.96 sd(d)/sqrt(n), about 0.5-1.3 points here), and calls and
    429s per request agree within 5% (relative); LiteLLM's Router under the quota within 15%
    (it reads datetime.now() in its failure accounting, docs/drive.md: 7% and 12% at 2,000)."""
    overrides = agreement.LOADS[load]
    scenario = with_overrides(load_scenario(SCENARIO), overrides)
    routed, tpm = agreement.router_scenario(overrides)
    pairs = [
        agreement.compare_pair(load, openai_wait, "openai-wait", scenario, 800),
        agreement.compare_pair(load, hand_hedge, "hedge", scenario, 800),
        agreement.compare_pair(load, agreement.router_handler(tpm), "router", routed, 600),
    ]
    for pair in pairs:
        assert pair.half_width < 0.02, pair
        assert abs(pair.diff) <= pair.half_width or pair.half_width == 0 == pair.diff, pair
        share = 0.15 if pair.policy == "router" and load == "quota-bound" else 0.05
        mine, theirs = pair.calls
        assert abs(mine - theirs) <= share * theirs, pair
        mine, theirs = pair.limited
        assert abs(mine - theirs) <= share * max(theirs, 0.02), pair
    if load == "quota-bound":  # the load does bind: the clients see 429s and retry them
        assert pairs[0].limited[0] > 0.3


def test_the_sdk_over_its_own_retries_is_the_yaml_policy_call_for_call() -> None:
    """The openai SDK's retries draw the engine's SDK-retry slots: the same calls with the same
    outcomes, every first call sent at the same instant (a retry starts after the SDK's own
    jittered backoff, drawn by the SDK, so retries start a little apart, and the queue they
    meet may differ a little)."""
    result = drive(SCENARIO, openai_wait, requests=300, compare=["openai-wait"])
    calls = result.calls.sort_values(["policy", "request_id", "attempt", "sdk_retry"])
    mine = calls[calls["policy"] == "openai_wait"].reset_index(drop=True)
    theirs = calls[calls["policy"] == "openai-wait"].reset_index(drop=True)
    assert len(mine) == len(theirs) > 300
    assert list(mine["request_id"]) == list(theirs["request_id"])
    assert list(mine["outcome"]) == list(theirs["outcome"])
    first = mine["attempt"] == 0
    first_theirs = theirs["sdk_retry"] == 0
    assert mine.loc[first, "start_s"].to_numpy() == pytest.approx(
        theirs.loc[first_theirs, "start_s"].to_numpy(), abs=1e-9
    )


def test_same_seed_same_tables_and_the_wall_clock_is_given_back() -> None:
    import time  # noqa: PLC0415

    real = time.time
    a = drive(SCENARIO, hand_hedge, requests=200)
    b = drive(SCENARIO, hand_hedge, requests=200)
    assert time.time is real
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.calls, b.calls)


async def flaky(request: Any, clients: Any) -> str:
    """Fails every third request with a bug of its own, after a real call."""
    client = clients.openai("bare", max_retries=0)
    await client.chat.completions.create(model=clients.model("bare"), messages=MESSAGES)
    if request.id % 3 == 0:
        raise KeyError("our bug")
    return "ok"


def test_an_exception_in_the_handler_fails_its_request_only_and_is_named() -> None:
    result = drive(SCENARIO, flaky, requests=300)
    requests = result.requests
    ours = requests["request_id"] % 3 == 0
    reasons = requests["fail_reason"]
    assert not requests.loc[ours, "ok"].any()
    # each of ids 0, 3, ..., 297 fails by our bug unless its one call failed first (2% errors)
    assert (reasons[ours] == "exception:KeyError").sum() >= 90
    assert not (reasons[~ours] == "exception:KeyError").any()
    assert set(reasons[~ours & ~requests["ok"]]) <= {"exception:InternalServerError", "deadline"}
    assert result.summary.at[0, "calls_per_request"] == pytest.approx(1.0)


async def impatient(request: Any, clients: Any) -> str:
    """Cuts its own call at 0.5 s (asyncio.wait_for), then gives up."""
    client = clients.openai("bare", max_retries=0)
    create = client.chat.completions.create(model=clients.model("bare"), messages=MESSAGES)
    return await asyncio.wait_for(create, 0.5)


def test_a_call_the_client_cuts_is_cancelled_in_the_simulation_and_billed() -> None:
    """Cancellation is real: the cut call ends at the cut, labelled `client`, billed its input
    (billing.cancelled: elapsed) once served, and frees its slot (later calls are not queued
    behind it: at 0.5 s per call and 8/s on 16 slots no call waits for long)."""
    result = drive(SCENARIO, impatient, requests=400)
    calls = result.calls
    cut = calls[calls["outcome"] == "cancelled"]
    assert len(cut) > 300  # first token and 80 tokens at 100/s: nearly every call is cut
    assert set(cut["ended_by"]) == {"client"}
    assert (cut["end_s"] - cut["start_s"]).to_numpy() == pytest.approx(0.5, abs=1e-9)
    served = cut[cut["queue_s"] < 0.5]
    assert len(served) > 300
    billed = served["cost_usd"].to_numpy()
    input_usd = 2000 * 2.5e-6  # its input, at $2.50/Mtok (a drawn error bills nothing: 2%)
    assert ((billed == 0) | (billed >= input_usd - 1e-12)).all()
    assert (billed > 0).mean() > 0.95
    assert calls["queue_s"].max() < 0.5
    assert (result.requests["fail_reason"] == "exception:TimeoutError").sum() == len(cut)


async def claude(request: Any, clients: Any) -> str:
    """One call through anthropic's AsyncAnthropic, no retries: a 429 is this request's."""
    client = clients.anthropic("a", max_retries=0)
    message = await client.messages.create(model=clients.model("a"), max_tokens=200,
                                           messages=MESSAGES)  # fmt: skip
    return message.content[0].text


def test_the_anthropic_sdk_reads_the_messages_api_and_its_429s() -> None:
    scenario = with_overrides(load_scenario(SCENARIO), {"providers.a.tpm": 300_000})
    result = drive(scenario, claude, requests=300)
    reasons = result.requests["fail_reason"].value_counts()
    assert reasons.get("", 0) > 50
    assert reasons.get("exception:RateLimitError", 0) > 50  # the SDK raised on the 429s
    limited = result.calls[result.calls["outcome"] == "rate_limited"]
    assert len(limited) == reasons["exception:RateLimitError"]


def test_the_fixture_runs_a_reliability_test_in_simulated_time(tailsim_drive: Any) -> None:
    """What a team writes (docs/drive.md): our hedge meets 99% of 12 s deadlines at 8/s."""
    result = tailsim_drive(SCENARIO, hand_hedge, requests=1000)
    assert result.summary.set_index("policy").at["hand_hedge", "hit_rate"] >= 0.99


def test_the_command_writes_the_run_tables(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("drive", SCENARIO, "experiments/drive_handlers.py:openai_wait", "--requests",
                 "200", "--policy", "openai-wait", "--out", out, "--no-plot")  # fmt: skip
    assert_exit(result, 0)
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["openai_wait", "openai-wait"]
    assert (out / "requests.parquet").is_file()
    assert (out / "calls.parquet").is_file()
    assert "openai_wait" in result.stdout


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("experiments/drive_handlers.py:nothing", "has no 'nothing'"),
        ("experiments/missing.py:handle", "file not found"),
        ("no_colon", "expected package.module:function"),
        ("experiments.drive_handlers:MESSAGES", "expected an async function"),
        ("json:dumps", "expected an async function"),
    ],
)
def test_a_bad_handler_is_exit_2_with_what_is_allowed(
    handler: str, message: str, tmp_path: Path
) -> None:
    result = cli("drive", SCENARIO, handler, "--out", tmp_path / "out")
    assert_exit(result, 2)
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_handler_module_that_fails_to_import_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent("import not_a_module_anywhere\n"))
    result = cli("drive", SCENARIO, f"{bad}:handle", "--out", tmp_path / "out")
    assert_exit(result, 2)
    assert "ModuleNotFoundError" in result.stderr


async def streamed(request: Any, clients: Any) -> str:
    """A streamed answer read to its end (openai), no timeout of its own."""
    client = clients.openai("bare", max_retries=0)
    stream = await client.chat.completions.create(model=clients.model("bare"), messages=MESSAGES,
                                                  stream=True)  # fmt: skip
    text = ""
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    return text


async def streamed_read_timeout(request: Any, clients: Any) -> None:
    """A streamed answer under httpx's 3 s read timeout: between any two bytes."""
    import httpx2  # noqa: PLC0415

    client = clients.openai("bare", max_retries=0, timeout=httpx2.Timeout(3.0))
    stream = await client.chat.completions.create(model=clients.model("bare"), messages=MESSAGES,
                                                  stream=True)  # fmt: skip
    async for _ in stream:
        pass


async def claude_streamed(request: Any, clients: Any) -> str:
    """anthropic's `messages.stream` read to its final message."""
    client = clients.anthropic("bare", max_retries=0)
    async with client.messages.stream(model=clients.model("bare"), max_tokens=100,
                                      messages=MESSAGES) as stream:  # fmt: skip
        async for _ in stream.text_stream:
            pass
        message = await stream.get_final_message()
    return message.content[0].text


def _streamed_scenario(timeout_s: float | None) -> Any:
    """scenarios/drive.yaml with a streamed step on `bare` and a plain `wait` policy there;
    with `timeout_s`, bare's client has that timeout (the engine's read timeout of a stream:
    a first-token cut and an idle cut, docs/clients.md)."""
    sdk: dict[str, Any] = {"retries": 0} | ({"timeout_s": timeout_s} if timeout_s else {})
    step = {"id": "answer", "model": "big", "provider": "bare", "input_tokens": 2000,
            "output_tokens": 80, "stream": True}  # fmt: skip
    return with_overrides(load_scenario(SCENARIO), {
        "policies": {"plain": {"kind": "wait", "providers": ["bare"]}},
        "providers.bare.sdk": sdk, "workflow.steps": [step],
    })  # fmt: skip


@pytest.mark.parametrize(
    ("handler", "timeout_s"),
    [(streamed, None), (claude_streamed, None), (streamed_read_timeout, 3.0)],
    ids=["openai", "anthropic", "openai-read-timeout"],
)
def test_a_streamed_answer_is_the_engines_stream_call_for_call(
    handler: Any, timeout_s: float | None
) -> None:
    """Tokens stream as the engine's stream (first token, pace, mid-stream stalls), so the
    same call read by the real SDK ends when the engine's does; under httpx's read timeout
    the SDK's stream is cut exactly where the engine's client cuts it (no first token within
    3 s: `sdk`; a stall longer than 3 s mid-stream: `idle`), billed the same."""
    result = drive(_streamed_scenario(timeout_s), handler, requests=1000, compare=["plain"])
    calls = result.calls.sort_values(["policy", "request_id", "attempt"])
    mine = calls[calls["policy"] == handler.__name__].reset_index(drop=True)
    theirs = calls[calls["policy"] == "plain"].reset_index(drop=True)
    assert list(mine["outcome"]) == list(theirs["outcome"])
    assert list(mine["ended_by"]) == list(theirs["ended_by"])
    for col in ("end_s", "cost_usd", "ttft_s"):
        assert mine[col].to_numpy() == pytest.approx(theirs[col].to_numpy(), abs=1e-9, nan_ok=True)
    if timeout_s is not None:  # the cuts happened, of both kinds
        assert {"sdk", "idle"} <= set(mine["ended_by"])
