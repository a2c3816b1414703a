"""Client presets (`providers.P.sdk`) and per-call overhead (`overhead_s`, `overhead_held`).

Wait sequences are checked against each SDK's formula as read from its source (docs/clients.md)
and, when the SDK is installed, against the SDK's own function with its `random()` pinned; the
engine's handling (sim.engine.event_calls: retry_on, per-attempt timeouts, the deadline rule,
overhead) on scripted draws, to the exact second. Held overhead's cost in capacity (M/D/1) is
in tests/integration/test_clients.py."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

from sim.calibration.synth import calls_to_log
from sim.engine.choice import vectorized_tables
from sim.engine.event_calls import serve
from sim.engine.provider import Provider, Serving
from sim.model.backoff import retry_wait, sdk_wait
from sim.model.config import ProviderSpec, SdkSpec
from sim.model.errors import ScenarioError
from sim.model.latency import OK, CallDraws, CallLatency, Constant
from sim.model.rows import Call
from sim.model.scenario import scenario_from_dict
from sim.model.streams import CallDrawBank, Streams
from sim.plan import compile_scenario
from sim.policy.build import build_policy
from tests.helpers import (
    Draw,
    ScriptedBank,
    error,
    invalid,
    ok,
    scenario_dict,
    serving,
    simulate,
    step,
    timeline,
)

US = (0.0, 0.37, 0.5, 0.999)  # uniforms the jitter is checked at (U is in [0, 1))
NAN = math.nan


def preset(name: str, **override: Any) -> SdkSpec:
    """The `sdk` spec of a preset with overrides, as a scenario would give it."""
    return SdkSpec.model_validate({"preset": name, **override})


# ----------------------------------------------------------------------------- wait formulas


@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_openai_and_anthropic_backoff_is_their_formula(name: str) -> None:
    """_calculate_retry_timeout: min(0.5 * 2^k, 8) * (1 - 0.25 U), k = retries taken."""
    sdk = preset(name)
    for k in range(1, 8):
        nominal = min(0.5 * 2.0 ** (k - 1), 8.0)
        for u in US:
            wait = sdk_wait(sdk, k, u)
            assert wait == nominal * (1 - 0.25 * u)
            assert 0.75 * nominal < wait <= nominal  # the jitter's bounds


def test_litellm_backoff_is_its_formula() -> None:
    """calculate_retry_after: min(0.5 * 2^k, 8) + 0.75 U."""
    sdk = preset("litellm")
    for k in range(1, 8):
        nominal = min(0.5 * 2.0 ** (k - 1), 8.0)
        for u in US:
            wait = sdk_wait(sdk, k, u)
            assert wait == nominal + 0.75 * u
            assert nominal <= wait < nominal + 0.75


def test_preset_none_is_the_layer_before_presets() -> None:
    spec = SdkSpec.model_validate({"retries": 2, "backoff": {"base_s": 0.3, "max_s": 5}})
    for k in range(1, 6):
        for u in US:
            for ra in (NAN, 0.0, 3.0, 60.0, 61.0, math.inf):
                assert sdk_wait(spec, k, u, ra) == retry_wait(spec.backoff, k, u, ra)


def test_retry_after_rules_per_preset() -> None:
    openai, anthropic, litellm = preset("openai"), preset("anthropic"), preset("litellm")
    u = 0.4
    # within the cap: waited as is (litellm: plus 0.75 U)
    assert sdk_wait(openai, 1, u, 7.0) == 7.0
    assert sdk_wait(anthropic, 1, u, 7.0) == 7.0
    assert sdk_wait(litellm, 1, u, 7.0) == 7.0 + 0.75 * u
    # retry-after-ms preferred by openai and anthropic; litellm reads only Retry-After
    assert sdk_wait(openai, 1, u, 7.0, 6.123) == 6.123
    assert sdk_wait(anthropic, 1, u, 7.0, 6.123) == 6.123
    assert sdk_wait(litellm, 1, u, 7.0, 6.123) == 7.0 + 0.75 * u
    # above the cap: openai does not retry past 120 s; anthropic waits it (up to 4294967 s);
    # litellm backs off past 60 s
    assert sdk_wait(openai, 1, u, 120.0) == 120.0
    assert sdk_wait(openai, 1, u, 121.0) is None
    assert sdk_wait(anthropic, 1, u, 500.0) == 500.0
    assert sdk_wait(anthropic, 1, u, math.inf) == 4_294_967.0
    assert sdk_wait(litellm, 2, u, 61.0) == 1.0 + 0.75 * u
    # an infinite Retry-After: openai backs off (math.isfinite), litellm cannot int() it
    assert sdk_wait(openai, 1, u, math.inf) == 0.5 * (1 - 0.25 * u)
    assert sdk_wait(litellm, 1, u, math.inf) == 0.5 + 0.75 * u
    # litellm parses Retry-After with int(): fractional seconds are ignored
    assert sdk_wait(litellm, 1, u, 2.5) == 0.5 + 0.75 * u
    # every field is overridable
    assert sdk_wait(preset("openai", retry_after_max_s=10), 1, u, 11.0) is None
    assert sdk_wait(preset("openai", retry_after_ms=False), 1, u, 7.0, 6.123) == 7.0


def test_presets_read_from_source() -> None:
    openai = preset("openai")
    assert openai.retries == 2
    assert openai.timeout_s == 600
    assert not openai.honours_deadline
    assert set(openai.retry_on) == {"429", "408", "409", "5xx", "timeout", "connection"}
    assert SdkSpec.model_validate("litellm") == preset("litellm")
    merged = SdkSpec.model_validate({"preset": "litellm", "backoff": {"base_s": 1.0}})
    assert merged.backoff.base_s == 1.0
    assert merged.backoff.jitter_s == 0.75
    assert SdkSpec() == preset("none")


# ------------------------------------------------------------- the SDKs' own code, if installed

HEADERS = [{}, {"retry-after": "3"}, {"retry-after-ms": "1234", "retry-after": "2"},
           {"retry-after": "2.5"}, {"retry-after": "90"}, {"retry-after": "150"}]  # fmt: skip


def _headers_to_args(headers: dict[str, str]) -> tuple[float, float]:
    """(Retry-After, retry-after-ms) in seconds as the simulated provider gives them (NaN:
    not sent)."""
    ms = float(headers.get("retry-after-ms", "nan")) / 1000
    return float(headers.get("retry-after", "nan")), ms


@pytest.mark.slow
@pytest.mark.parametrize("package", ["openai", "anthropic"])
def test_wait_equals_the_installed_sdk(package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_calculate_retry_timeout` and `_should_retry` of the installed SDK, its random() pinned,
    give the preset's wait (or no retry) for retries 1..5 and every header case."""
    sdk_module = pytest.importorskip(package)
    base = pytest.importorskip(f"{package}._base_client")
    models = pytest.importorskip(f"{package}._models")
    httpx = pytest.importorskip("httpx")
    client_class = sdk_module.OpenAI if package == "openai" else sdk_module.Anthropic
    client = client_class(api_key="x", base_url="http://127.0.0.1:9", max_retries=5)
    options = models.FinalRequestOptions.construct(method="post", url="/x")
    spec = preset(package)
    for u in US:
        monkeypatch.setattr(base, "random", lambda u=u: u)
        for headers in HEADERS:
            retry_after, retry_after_ms = _headers_to_args(headers)
            response = httpx.Response(429, headers=headers)
            for k in range(1, 6):
                mine = sdk_wait(spec, k, u, retry_after, retry_after_ms)
                if not client._should_retry(response):
                    assert mine is None, (headers, k)
                    continue
                theirs = client._calculate_retry_timeout(5 - (k - 1), options, headers)
                assert mine == pytest.approx(theirs, rel=1e-12), (u, headers, k)


@pytest.mark.slow
def test_wait_equals_installed_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    utils = pytest.importorskip("litellm.utils")
    spec = preset("litellm")
    for u in US:
        monkeypatch.setattr(utils.random, "random", lambda u=u: u)
        for headers in HEADERS:
            retry_after, retry_after_ms = _headers_to_args(headers)
            for k in range(1, 6):
                theirs = utils.calculate_retry_after(5 - (k - 1), 5, headers)
                mine = sdk_wait(spec, k, u, retry_after, retry_after_ms)
                assert mine == pytest.approx(theirs, rel=1e-12), (u, headers, k)
        assert utils.should_retry(429)
        assert utils.should_retry(503)
        assert utils.should_retry(408)


# ----------------------------------------------------------------------------- the engine


class SdkScriptedBank(ScriptedBank):
    """A scripted bank whose SDK retries have a script of their own: (attempt, sdk) -> Draw."""

    def __init__(self, script: dict[tuple[int, int], Draw], default: Draw) -> None:
        super().__init__({}, 1, default)
        self.by_sdk = script

    def draws(
        self,
        step: str,
        attempt: int,
        resend: int,
        path: tuple[str, str],
        latency: CallLatency,
        output_tokens: int,
        sdk: int = 0,
    ) -> CallDraws:
        d = self.by_sdk.get((attempt, sdk), self.default)
        return CallDraws([d.ttft], [d.generation], [d.stall], [d.outcome])


def one(sdk: Any, policy: dict[str, Any] | None = None, **provider: Any) -> Any:
    """A one-step scenario on provider p1 with this `sdk`, policy `p` (default: wait)."""
    data = scenario_dict(
        [step("s1")],
        {"p": policy or {"kind": "wait"}},
        providers={"p1": {"serves": {"big": serving()}, "sdk": sdk, **provider}},
    )
    return scenario_from_dict(data)


def sdk_u(bank: CallDrawBank, j: int, attempt: int = 0) -> float:
    """The jitter uniform the engine draws from `bank` for SDK retry j of request 0."""
    return bank.uniform(0, "sdk-backoff", "s1", attempt, 0, j)


def test_timeout_restarts_per_sdk_retry_and_is_retried() -> None:
    """openai with timeout_s 0.5 over 2 s calls: three calls, each cut 0.5 s after its own
    send (ended_by sdk), waits 0.5 and 1.0 (jitter none) between them."""
    sdk = {"preset": "openai", "timeout_s": 0.5, "backoff": {"jitter": "none"}}
    result = simulate(one(sdk), "p", ScriptedBank({}, default=ok()))
    assert timeline(result.calls) == [
        ("s1", 0, "p1", "big", 0.0, 0.5, "timeout"),
        ("s1", 0, "p1", "big", 1.0, 1.5, "timeout"),
        ("s1", 0, "p1", "big", 2.5, 3.0, "timeout"),
    ]
    assert list(result.calls["ended_by"]) == ["sdk"] * 3
    assert list(result.calls["sdk_retry"]) == [0, 1, 2]


def test_timeout_retried_with_the_sdks_jitter() -> None:
    """The same with the preset's own jitter: the waits are 0.5 (1 - U/4), 1.0 (1 - U/4) with
    the engine's uniforms."""
    bank = ScriptedBank({})
    result = simulate(one({"preset": "openai", "timeout_s": 0.5}), "p", bank)
    starts = sorted(result.calls["start_s"])
    w1, w2 = 0.5 * (1 - 0.25 * sdk_u(bank, 1)), 1.0 * (1 - 0.25 * sdk_u(bank, 2))
    assert starts == pytest.approx([0.0, 0.5 + w1, 0.5 + w1 + 0.5 + w2], abs=1e-12)


def test_retry_on() -> None:
    """openai retries a hard error (5xx) and recovers; junk is a success to it; `none` with a
    timeout_s does not retry its timeout (timeout not in its retry_on) but does with it."""
    script = {(0, 0): error(), (0, 1): error(), (0, 2): ok()}
    result = simulate(one("openai"), "p", SdkScriptedBank(script, ok()))
    assert list(result.calls["outcome"]) == ["error", "error", "ok"]
    assert bool(result.requests["ok"].iloc[0])
    junk = simulate(one("openai"), "p", ScriptedBank({}, default=invalid()))
    assert list(junk.calls["outcome"]) == ["invalid"]
    plain = {"retries": 2, "timeout_s": 0.5, "backoff": {"jitter": "none"}}
    result = simulate(one(plain), "p", ScriptedBank({}, default=ok()))
    assert list(result.calls["outcome"]) == ["timeout"]
    plain["retry_on"] = [429, "timeout"]
    result = simulate(one(plain), "p", ScriptedBank({}, default=ok()))
    assert list(result.calls["outcome"]) == ["timeout"] * 3
    no_5xx = simulate(one({**plain, "retry_on": [429]}), "p", ScriptedBank({}, default=error()))
    assert len(no_5xx.calls) == 1


def test_a_policy_cut_is_not_retried_by_the_sdk() -> None:
    """The policy's own timeout is the caller's: the SDK below it never retries it."""
    policy = {"kind": "wait", "timeout_s": 0.5, "retries": 1}
    result = simulate(one({"preset": "openai"}, policy), "p", ScriptedBank({}, default=ok()))
    assert list(result.calls["ended_by"]) == ["attempt", "attempt"]
    assert list(result.calls["sdk_retry"]) == [0, 0]


def test_a_cut_at_the_steps_attempt_budget_is_not_retried_by_the_sdk() -> None:
    """Bug: the SDK loop retries a timeout the caller itself cut (`_sdk_retries` without its
    `ended_by != BY_SDK` break). The step's `attempt_budget_s` is the caller's cut too, and
    unlike the policy's own timeout no later check stops the loop: an 11 s call cut at 2 s
    (`ended_by` attempt) under openai (timeout in its retry_on, 2 retries) is one call, and
    the run fails at 2 s. With the bug the SDK sends it twice more (3 calls, each cut 2 s after
    its send, the next after openai's jittered backoff)."""
    data = scenario_dict(
        [step("s1", attempt_budget_s=2.0)],
        {"p": {"kind": "wait"}},
        providers={"p1": {"serves": {"big": serving()}, "sdk": "openai"}},
    )
    result = simulate(scenario_from_dict(data), "p", ScriptedBank({}, default=ok(1.0, 10.0)))
    assert timeline(result.calls) == [("s1", 0, "p1", "big", 0.0, 2.0, "timeout")]
    assert list(result.calls["ended_by"]) == ["attempt"]
    run = result.requests.iloc[0]
    assert (bool(run["ok"]), float(run["end_s"])) == (False, 2.0)


def test_policy_over_sdk_timeouts_makes_nine_calls() -> None:
    """retries 2 over openai with timeout_s: 3 x 3 = 9 calls when every call is slow."""
    policy = {"kind": "wait", "retries": 2}
    sdk = {"preset": "openai", "timeout_s": 0.5}
    result = simulate(one(sdk, policy), "p", ScriptedBank({}, default=ok()))
    assert len(result.calls) == 9
    assert list(result.calls["sdk_retry"]) == [0, 1, 2] * 3


def test_429_retry_after_ms_preferred() -> None:
    """rpm 1: the second request, sent at 0.3 s, gets a 429 with Retry-After 60 (whole
    seconds) and retry-after-ms 59.7; openai waits 59.7, `none` waits 60."""
    calls = {}
    for name, sdk in (("openai", "openai"), ("none", {"retries": 2})):
        scenario = one(sdk, rpm=1, retry_after_ms=True)
        calls[name] = simulate(scenario, "p", ScriptedBank({}, 2), arrivals=(0.0, 0.3)).calls
    for name, wait in (("openai", 59.7), ("none", 60.0)):
        c = calls[name].sort_values("start_s")
        second = c[c["request_id"] == 1]
        assert list(second["outcome"]) == ["rate_limited", "ok"]
        assert float(second["retry_after_s"].iloc[0]) == 60.0
        assert float(second["start_s"].iloc[1]) == pytest.approx(0.3 + wait, abs=1e-9)


def test_honours_deadline_against_the_policy_cut() -> None:
    """A hard error at 1 s, a 3 s backoff, a policy cut at 2 s: a client that honours it gives
    up at 1 s (the policy's retry starts then); one that does not sleeps until the cut at 2."""
    policy = {"kind": "wait", "timeout_s": 2, "retries": 1}
    starts = {}
    for honours in (True, False):
        sdk = {"retries": 1, "backoff": {"base_s": 3, "jitter": "none"},
               "honours_deadline": honours}  # fmt: skip
        result = simulate(one(sdk, policy), "p", ScriptedBank({(("s1", 0)): error()}))
        starts[honours] = sorted(result.calls["start_s"])
    assert starts[True] == [0.0, 1.0]
    assert starts[False] == [0.0, 2.0]


def test_honours_deadline_against_the_deadline() -> None:
    """Deadline 5 s, a 10 s backoff after a hard error at 1 s: honouring, the run fails at 1
    s; not, the client sleeps until the deadline cancels it at 5 s."""
    ends = {}
    for honours in (True, False):
        sdk = {"retries": 1, "backoff": {"base_s": 10, "max_s": 10, "jitter": "none"},
               "honours_deadline": honours}  # fmt: skip
        data = scenario_dict(
            [step("s1")],
            {"p": {"kind": "wait"}},
            deadline_s=5.0,
            providers={"p1": {"serves": {"big": serving()}, "sdk": sdk}},
        )
        result = simulate(scenario_from_dict(data), "p", ScriptedBank({}, default=error()))
        assert len(result.calls) == 1
        ends[honours] = float(result.requests["end_s"].iloc[0])
    assert ends[True] == pytest.approx(1.0)
    assert ends[False] == pytest.approx(5.0)


# ----------------------------------------------------------------------------- overhead


def overhead(value: float, held: float = 0.0, **provider: Any) -> Any:
    data = scenario_dict(
        [step("s1")],
        {"p": {"kind": "wait"}},
        providers={
            "p1": {
                "serves": {"big": serving()},
                "overhead_s": {"dist": "constant", "value": value},
                "overhead_held": held,
                **provider,
            }
        },
    )
    return scenario_from_dict(data)


def test_constant_overhead_shifts_latency_exactly() -> None:
    base = simulate(one({}), "p", ScriptedBank({}, 3), arrivals=(0.0, 1.0, 7.0))
    shifted = simulate(overhead(0.25), "p", ScriptedBank({}, 3), arrivals=(0.0, 1.0, 7.0))
    diff = shifted.requests["latency_s"].to_numpy() - base.requests["latency_s"].to_numpy()
    assert diff == pytest.approx([0.25] * 3, abs=1e-12)
    assert list(shifted.calls["ttft_s"]) == list(base.calls["ttft_s"])  # nothing held
    assert shifted.calls["cost_usd"].sum() == base.calls["cost_usd"].sum()
    # calls.parquet carries each call's overhead (only when a provider sets one), so the
    # provider's own view of a call is end - start - overhead: what synth logs as the server's
    assert "overhead_s" not in base.calls
    assert list(shifted.calls["overhead_s"]) == [0.25] * 3
    server = calls_to_log(shifted.calls)["server_latency_s"].to_numpy()
    assert server == pytest.approx(base.calls["end_s"] - base.calls["start_s"], abs=1e-12)


def test_held_overhead_holds_the_slot_and_the_rest_does_not() -> None:
    """One slot, 2 s service, overhead 0.4 half held: a call holds its slot 2.2 s (first
    token at 1.2) and is seen 0.2 s after; the next call gets the slot at 2.2, not at 2.4."""
    scenario = overhead(0.4, 0.5, concurrency=1)
    result = simulate(scenario, "p", ScriptedBank({}, 3), arrivals=(0.0, 0.0, 0.0))
    c = result.calls.sort_values("start_s", kind="stable")
    assert list(c["queue_s"]) == pytest.approx([0.0, 2.2, 4.4])
    assert list(c["ttft_s"]) == pytest.approx([1.2] * 3)
    assert list(c["end_s"]) == pytest.approx([2.4, 4.6, 6.8])
    # per slot: one call every 2 + 0.4 * 0.5 = 2.2 s (throughput 1 / 2.2 calls/s, not 1 / 2)


class Bench:
    """One provider with 0.2 s of overhead after the slot (nothing held), one slot."""

    def __init__(self, held: float = 0.0) -> None:
        self.env = simpy.Environment()
        spec = ProviderSpec.model_validate(
            {
                "concurrency": 1,
                "overhead_s": {"dist": "constant", "value": 0.2},
                "overhead_held": held,
                "serves": {"m": serving()},
            }
        )
        latency = CallLatency(Constant(1.0), Constant(1.0), 0.0, None, 0.0, 0.0)
        self.provider = Provider(self.env, "p", spec, {"m": Serving(latency, 1e-6, 2e-6)}, "none")
        self.calls: dict[str, Call] = {}

    def send(self, name: str, give_up_after: float | None = None) -> simpy.Process:
        def life() -> Generator[simpy.Event, Any, None]:
            call = Call(None, name, 0, "p", "m", self.env.now, 1000, 100)
            call.overhead = 0.2
            self.calls[name] = call
            yield from serve(self.provider, call, 1.0, 1.0, 0.0, OK, give_up_after)

        return self.env.process(life())


def test_cancel_during_the_after_part() -> None:
    """Cancelled at 2.1 s, after its 2 s service and before the caller saw it at 2.2: the call
    ends cancelled at 2.1 billed as served (even under billing none), and the slot was free
    from 2.0 for the next call."""
    bench = Bench()
    first = bench.send("a")
    bench.send("b")

    def cancel() -> Generator[simpy.Event, Any, None]:
        yield bench.env.timeout(2.1)
        first.interrupt("deadline")

    bench.env.process(cancel())
    bench.env.run()
    a, b = bench.calls["a"], bench.calls["b"]
    assert (a.outcome, a.end, a.ended_by) == ("cancelled", pytest.approx(2.1), "deadline")
    assert a.billed_output == 100
    assert a.cost == pytest.approx(1000e-6 + 200e-6)
    assert b.queue == pytest.approx(2.0)
    assert b.end == pytest.approx(4.2)
    assert bench.provider.slots.count == 0


def test_client_timeout_during_the_after_part() -> None:
    """A 2.1 s client timeout includes the overhead: answer ready at 2.0, seen at 2.2: timeout
    at 2.1 (billed as served)."""
    bench = Bench()
    bench.send("a", give_up_after=2.1)
    bench.env.run()
    a = bench.calls["a"]
    assert (a.outcome, a.end) == ("timeout", pytest.approx(2.1))
    assert a.billed_output == 100


def test_overhead_stream_is_common_to_policies() -> None:
    """Lognormal overhead: two policies that make the same calls see the same overheads."""
    data = scenario_dict(
        [step("s1")],
        {"a": {"kind": "wait"}, "b": {"kind": "wait", "timeout_s": 90}},
        providers={
            "p1": {"serves": {"big": serving()}, "overhead_s": {"median": 0.03, "p99": 0.08}}
        },
    )
    scenario = scenario_from_dict(data)
    arrivals = np.arange(20.0) * 5
    ends = [simulate(scenario, p, arrivals=arrivals).calls["end_s"].to_numpy() for p in "ab"]
    assert np.array_equal(ends[0], ends[1])
    assert len(set(np.round(ends[0] - arrivals - 2.0, 12))) == 20  # drawn per call


def test_overhead_runs_on_the_vectorized_engine() -> None:
    """Overhead is per call where nothing is shared: `auto` runs it vectorized, each call's
    overhead in its column (tests/engine/test_vectorized_client_rules.py holds the two engines
    equal)."""
    scenario = overhead(0.1)
    steps = compile_scenario(scenario).workflow.steps
    policy = build_policy("p", scenario.policies["p"], compile_scenario(scenario).routes, steps, {})
    bank = CallDrawBank(Streams(0, "calls"), 3)
    tables, why = vectorized_tables(
        compile_scenario(scenario), policy, bank, np.arange(3.0) * 10, "auto"
    )
    assert tables is not None, why
    assert tables.calls["overhead_s"].tolist() == [0.1] * 3
    np.testing.assert_allclose(tables.requests["latency_s"], 2.1, rtol=1e-12)


# ----------------------------------------------------------------------------- the keys


@pytest.mark.parametrize(
    ("provider", "path", "says"),
    [
        ({"sdk": "openaii"}, "providers.p1.sdk.preset", "'openai'"),
        ({"sdk": {"preset": "openai", "retry_on": [429, 500]}}, "providers.p1.sdk.retry_on", "5xx"),
        ({"sdk": {"timeout_s": 0}}, "providers.p1.sdk.timeout_s", "greater than 0"),
        ({"sdk": {"retry_after_above_max": "wait"}}, "providers.p1.sdk.retry_after_above_max", ""),
        ({"sdk": {"backoff": {"jitter": "sdkk"}}}, "providers.p1.sdk.backoff.jitter", "additive"),
        ({"overhead_held": 1.5}, "providers.p1.overhead_held", "1"),
        ({"overhead_s": {"median": 0.05}}, "providers.p1.overhead_s", "p99"),
    ],
)
def test_bad_client_keys_name_their_path(provider: dict[str, Any], path: str, says: str) -> None:
    data = scenario_dict(providers={"p1": {"serves": {"big": serving()}, **provider}})
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    [(where, message)] = caught.value.problems
    assert where.startswith(path)
    assert says in message


def test_resolved_presets_load_back_the_same() -> None:
    """A preset written out in full (scenario.resolved.yaml) loads back to the same spec."""
    for name in ("none", "openai", "anthropic", "litellm"):
        spec = preset(name, timeout_s=3.0)
        assert SdkSpec.model_validate(spec.model_dump(mode="json")) == spec
