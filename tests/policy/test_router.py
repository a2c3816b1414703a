"""The `router` kind's mechanics against LiteLLM's Router (litellm 1.80.0), on scripted calls.

A fake `StepRun` answers each call with a scripted outcome and duration per provider and hands
out scripted uniforms, so every timeline here is exact: where a retry lands, when it starts
(LiteLLM's sleep, jitter included), when a fallback starts, and how a cooldown one request
causes steers the next. The wait formula is checked against LiteLLM's own function, and whole
requests against LiteLLM's own Router run in a process of its own (tests/litellm_driver.py).
A cooldown over a whole run of the event engine is in tests/integration/test_router.py."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest
import simpy

from sim.model.config import RouterPolicy
from sim.model.errors import ScenarioError
from sim.model.rows import OUTCOME_ERROR, OUTCOME_OK, OUTCOME_RATE_LIMITED, Call
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario
from sim.policy.kinds.router import Router, header_seconds, retry_sleep, simple_shuffle
from sim.policy.plans import Attempt
from tests.helpers import REPO_ROOT

EPS = 1e-9


@dataclass
class _Step:
    id: str = "s1"
    model: str = "big"
    input_tokens: int = 100


@dataclass
class FakeRun:
    """A StepRun whose calls take `seconds` and end as `script[provider]` says (a list popped
    per call, or one outcome for every call), with uniforms `u` per stream."""

    env: simpy.Environment
    script: dict[str, Any]
    u: dict[str, float] = field(default_factory=lambda: {"router-pick": 0.0, "router-sleep": 0.5})
    seconds: float = 1.0
    retry_after: float = 2.0
    step: _Step = field(default_factory=_Step)
    log: list[tuple[float, str, str]] = field(default_factory=list)  # (start, provider, outcome)
    closed: bool = False

    def uniform(self, stream: str, number: int) -> float:
        return self.u[stream]

    def call(self, attempt: int, plan: Attempt) -> Generator[simpy.Event, Any, Call | None]:
        outcomes = self.script[plan.provider]
        outcome = outcomes.pop(0) if isinstance(outcomes, list) else outcomes
        start = self.env.now
        self.log.append((start, plan.provider, outcome))
        yield self.env.timeout(self.seconds)
        call = Call(None, self.step.id, attempt, plan.provider, plan.model, start, 100, 10)
        call.end, call.outcome = self.env.now, outcome
        if outcome == OUTCOME_RATE_LIMITED:
            call.retry_after = self.retry_after
        return call


def _router(**keys: Any) -> Router:
    """A router over providers a, b (model big), c (model small) and d (model tiny)."""
    law = {
        "ttft_s": {"dist": "constant", "value": 1.0},
        "tokens_per_s": {"dist": "constant", "value": 100},
    }
    data = {
        "name": "r",
        "deadline_s": 100,
        "requests": 1,
        "models": {"big": {}, "small": {}, "tiny": {}},
        "providers": {
            "a": {"serves": {"big": law}},
            "b": {"serves": {"big": law}},
            "c": {"serves": {"small": law}},
            "d": {"serves": {"tiny": law}},
        },
        "workflow": {"steps": [{"id": "s1", "model": "big"}]},
        "policies": {"r": {"kind": "router", **keys}},
    }
    scenario = scenario_from_dict(data)
    spec = scenario.policies["r"]
    assert isinstance(spec, RouterPolicy)
    return Router("r", spec, compile_scenario(scenario).routes)


def _run(router: Router, run: FakeRun, at: float = 0.0) -> list[bool]:
    """Run one step of `run` under `router` starting at `at`; the result lands in the list."""
    result: list[bool] = []

    def go() -> Generator[simpy.Event, Any, None]:
        if at:
            yield run.env.timeout(at)
        ok = yield from router.execute(run)  # type: ignore[arg-type]
        result.append(ok)

    run.env.process(go())
    return result


# ----------------------------------------------------------------------------- the wait formula


@pytest.mark.parametrize("u", [0.0, 0.3, 0.999999])
def test_retry_after_plus_jitter_within_its_bounds(u: float) -> None:
    """A whole-second Retry-After r in (0, 60] is obeyed plus U[0, 0.75): r + 0.75 u."""
    assert retry_sleep(3.0, 2, 2, 0.0, u) == pytest.approx(3.0 + 0.75 * u, abs=EPS)
    assert 3.0 <= retry_sleep(3.0, 2, 2, 0.0, u) < 3.75


def test_backoff_sequence_min_and_cap() -> None:
    """No usable Retry-After: 0.5 x 2^(num_retries - remaining), boxed in [retry_after, 8],
    plus the jitter; a fractional or > 60 s Retry-After is not a header litellm reads."""
    waits = [retry_sleep(math.nan, remaining, 3, 0.0, 0.0) for remaining in (3, 3, 2, 1)]
    assert waits == [0.5, 0.5, 1.0, 2.0]  # k = 0, 0, 1, 2: the first retry's and the loop's
    assert retry_sleep(math.nan, 0, 10, 0.0, 0.0) == 8.0  # capped
    assert retry_sleep(math.nan, 3, 3, 2.0, 0.0) == 2.0  # Router(retry_after=2) as the floor
    assert retry_sleep(1.5, 3, 3, 0.0, 0.0) == 0.5  # '1.5' does not parse: backoff
    assert retry_sleep(61.0, 3, 3, 0.0, 0.0) == 0.5  # above 60 s: backoff
    assert header_seconds(2.0) == 2.0
    assert header_seconds(2.5) == -1.0


@pytest.mark.slow
def test_wait_formula_equals_litellms_own() -> None:
    """The same numbers as litellm's `_calculate_retry_after` with `random.random` fixed."""
    litellm = pytest.importorskip("litellm")
    for u in (0.0, 0.4, 0.9):
        for header, remaining, retries, floor in [(3, 2, 2, 0), (None, 2, 2, 0), (None, 1, 4, 0),
                                                  (None, 2, 2, 3), (None, 0, 9, 0)]:  # fmt: skip
            headers = {"retry-after": str(header)} if header is not None else None
            original = random.random
            random.random = lambda u=u: u  # type: ignore[assignment]
            try:
                theirs = litellm._calculate_retry_after(remaining, retries, headers, floor)
            finally:
                random.random = original  # type: ignore[assignment]
            mine = retry_sleep(float(header) if header else math.nan, remaining, retries, floor, u)
            assert mine == pytest.approx(theirs, abs=1e-12)


# ----------------------------------------------------------------------------- retries and picks


@pytest.mark.parametrize("version", ["1.80", "1.110"])
def test_a_retry_lands_on_the_other_deployment_at_once(version: str) -> None:
    """least-busy picks a first; its 429 cools it down (a 429 in a group of several
    deployments, both releases), so the retry goes to b with no sleep
    (`_time_to_sleep_before_retry`: 0 while another deployment is healthy)."""
    router = _router(routing_strategy="least-busy", litellm_version=version)
    run = FakeRun(simpy.Environment(), {"a": OUTCOME_RATE_LIMITED, "b": OUTCOME_OK})
    result = _run(router, run)
    run.env.run()
    assert result == [True]
    assert run.log == [(0.0, "a", OUTCOME_RATE_LIMITED), (1.0, "b", OUTCOME_OK)]


@pytest.mark.parametrize(("version", "calls_on_a"), [("1.80", 1), ("1.110", 5)])
def test_a_failing_deployment_cools_by_share_after_enough_calls(
    version: str, calls_on_a: int
) -> None:
    """The failure-share rule (more than half of this minute's calls failed, group of several):
    1.80 applies it from the first call, 1.110 only from 5 calls this minute; until then
    least-busy keeps picking a (its count is back to 0 after each call)."""
    router = _router(routing_strategy="least-busy", num_retries=7, litellm_version=version)
    run = FakeRun(simpy.Environment(), {"a": OUTCOME_ERROR, "b": OUTCOME_OK})
    result = _run(router, run)
    run.env.run()
    assert result == [True]
    assert [p for _, p, _ in run.log] == ["a"] * calls_on_a + ["b"]


def test_simple_shuffle_weights_by_the_first_deployments_key() -> None:
    """Weighted by rpm when the first healthy deployment sets rpm (weight and tpm unset), with
    `random.choices`' rule: index = bisect(cumulative, u x total)."""
    router = _router(
        deployments={"big": [{"provider": "a", "rpm": 1}, {"provider": "b", "rpm": 3}]}
    )
    group = router.groups["big"]
    assert simple_shuffle(group, 0.24).spec.provider == "a"  # 0.96 < 1
    assert simple_shuffle(group, 0.26).spec.provider == "b"  # 1.04 >= 1
    flat = _router()
    assert [simple_shuffle(flat.groups["big"], u).spec.provider for u in (0.49, 0.51)] == ["a", "b"]


def test_single_deployment_sleeps_retry_after_plus_jitter_then_falls_back() -> None:
    """One deployment answering 429 (Retry-After 2): it is not cooled down (a single-deployment
    group, default rule), so num_retries = 2 retries follow, each after 2 + 0.75 u s, and a
    sleep follows the last failure too; then the fallback group `small` is tried."""
    router = _router(
        deployments={"big": [{"provider": "a"}]}, num_retries=2, fallbacks={"big": ["small"]}
    )
    run = FakeRun(simpy.Environment(), {"a": OUTCOME_RATE_LIMITED, "c": OUTCOME_OK})
    result = _run(router, run)
    run.env.run()
    sleep = 2.0 + 0.75 * 0.5
    starts = [0.0, 1.0 + sleep, 2.0 + 2 * sleep, 3.0 + 3 * sleep]
    assert [p for _, p, _ in run.log] == ["a", "a", "a", "c"]
    assert [t for t, _, _ in run.log] == pytest.approx(starts, abs=EPS)
    assert result == [True]


@pytest.mark.parametrize(
    ("version", "starts"), [("1.80", [0.0, 1.5, 3.0]), ("1.110", [0.0, 1.5, 3.5])]
)
def test_sleeps_follow_the_first_failure_not_the_later_ones(
    version: str, starts: list[float]
) -> None:
    """After a first 5xx, later 429s do not switch the sleep to their Retry-After: every sleep
    is computed from the first exception (backoff, jitter 0): 0.5, 0.5 s under 1.80 (its
    exponent repeats 0), 0.5, 1.0 s under 1.110."""
    router = _router(
        deployments={"big": [{"provider": "a"}]}, num_retries=2, litellm_version=version
    )
    run = FakeRun(simpy.Environment(), {"a": [OUTCOME_ERROR, OUTCOME_RATE_LIMITED, OUTCOME_OK]})
    run.u["router-sleep"] = 0.0
    result = _run(router, run)
    run.env.run()
    assert [t for t, _, _ in run.log] == pytest.approx(starts, abs=EPS)
    assert result == [True]


def test_retry_policy_counts_by_the_first_failures_type() -> None:
    """RateLimitErrorRetries: 0 -> no retry after a first 429, and no fallback configured."""
    router = _router(
        deployments={"big": [{"provider": "a"}]}, retry_policy={"RateLimitErrorRetries": 0}
    )
    run = FakeRun(simpy.Environment(), {"a": [OUTCOME_RATE_LIMITED, OUTCOME_OK]})
    result = _run(router, run)
    run.env.run()
    assert result == [False]
    assert len(run.log) == 1


# ----------------------------------------------------------------------------- shared cooldowns


def test_a_cooldown_steers_other_requests_until_it_expires() -> None:
    """Request 1's 429 on a cools a down for its Retry-After (2 s: a 429's header sets the
    cooldown time); request 2 (at 1.5 s) and 3 (at 2.5 s) pick only b; request 4 at 3.5 s
    may pick a again (least-busy picks the first least busy: a)."""
    router = _router(routing_strategy="least-busy")
    env = simpy.Environment()
    script = {"a": [OUTCOME_RATE_LIMITED, OUTCOME_OK], "b": OUTCOME_OK}
    runs = [FakeRun(env, script, seconds=0.5) for _ in range(4)]
    for run, at in zip(runs, (0.0, 1.5, 2.5, 3.5), strict=True):
        _run(router, run, at)
    env.run()
    # request 1: a at 0 (429, cools a until 0.5 + 2 = 2.5), then b at once
    assert runs[0].log == [(0.0, "a", OUTCOME_RATE_LIMITED), (0.5, "b", OUTCOME_OK)]
    assert runs[1].log == [(1.5, "b", OUTCOME_OK)]
    assert runs[2].log == [(2.5, "b", OUTCOME_OK)]  # 2.5 <= until: still cooling (TTL inclusive)
    assert runs[3].log == [(3.5, "a", OUTCOME_OK)]
    assert router.state(env).cooldowns == 1


def test_allowed_fails_counts_failures_within_the_cooldown_window() -> None:
    """allowed_fails: 1 (not litellm's default 3, so the count rule applies): the first 5xx on
    a is allowed, the second within cooldown_time_s cools it down for cooldown_time_s (5 s),
    for every request; a single-deployment group cools down too under this rule."""
    router = _router(
        deployments={"big": [{"provider": "a"}]}, allowed_fails=1, num_retries=0,
        cooldown_time_s=5.0,
    )  # fmt: skip
    env = simpy.Environment()
    script = {"a": [OUTCOME_ERROR, OUTCOME_ERROR, OUTCOME_OK, OUTCOME_OK]}
    runs = [FakeRun(env, script) for _ in range(4)]
    results = [_run(router, run, at) for run, at in zip(runs, (0.0, 2.0, 4.0, 8.5), strict=True)]
    env.run()
    assert [r.log[0][:2] if r.log else None for r in runs] == [
        (0.0, "a"), (2.0, "a"), None, (8.5, "a"),  # the third finds a cooling down until 8.0
    ]  # fmt: skip
    assert results == [[False], [False], [False], [True]]


def test_allowed_fails_equal_to_litellms_default_keeps_the_rate_rule() -> None:
    """allowed_fails: 3 is litellm.allowed_fails, so LiteLLM treats it as not set: a single
    deployment then never cools down on a few failures (the rate rule spares it)."""
    router = _router(deployments={"big": [{"provider": "a"}]}, allowed_fails=3, num_retries=0)
    env = simpy.Environment()
    runs = [FakeRun(env, {"a": OUTCOME_ERROR}) for _ in range(6)]
    for i, run in enumerate(runs):
        _run(router, run, 2.0 * i)
    env.run()
    assert all(len(r.log) == 1 for r in runs)
    assert router.state(env).cooldowns == 0


def test_a_first_failure_leaving_nothing_healthy_is_not_retried() -> None:
    """allowed_fails: 0 cools a deployment on its first failure; with nothing healthy left the
    group is not retried (`should_retry_this_error`): the fallback starts at once."""
    router = _router(
        deployments={"big": [{"provider": "a"}]}, allowed_fails=0, fallbacks={"big": ["small"]}
    )
    run = FakeRun(simpy.Environment(), {"a": OUTCOME_ERROR, "c": OUTCOME_OK})
    result = _run(router, run)
    run.env.run()
    assert run.log == [(0.0, "a", OUTCOME_ERROR), (1.0, "c", OUTCOME_OK)]
    assert result == [True]


@pytest.mark.parametrize(("version", "fallback_at"), [("1.80", 6.75), ("1.110", 2.0)])
def test_retries_with_every_deployment_cooling_then_the_generic_fallback(
    version: str, fallback_at: float
) -> None:
    """Both deployments cool down for 100 s on their 429: the retry lands on b at once (a
    cooling), then with nothing healthy each sleep is the first failure's Retry-After plus
    jitter (2 + 0.375 s), the last retry finds no deployment (no call) and sleeps too, then the
    generic fallback `*` sends the step to `small` (1.80). 1.110 stops as soon as a failed
    retry leaves nothing healthy: the fallback starts at b's failure, 2 s."""
    cool = {"cooldown_time_s": 100.0}
    router = _router(
        deployments={"big": [{"provider": "a", **cool}, {"provider": "b", **cool}]},
        fallbacks={"*": ["small"]},
        routing_strategy="least-busy",
        litellm_version=version,
    )
    run = FakeRun(
        simpy.Environment(),
        {"a": OUTCOME_RATE_LIMITED, "b": OUTCOME_RATE_LIMITED, "c": OUTCOME_OK},
    )
    result = _run(router, run)
    run.env.run()
    assert [(t, p) for t, p, _ in run.log] == [
        (0.0, "a"),
        (1.0, "b"),
        (pytest.approx(fallback_at), "c"),
    ]
    assert result == [True]


def test_router_keys_reject_unknown_groups() -> None:
    """A deployment on a provider that does not serve its group is a reference problem."""
    with pytest.raises(ScenarioError, match="does not serve 'big'"):
        _router(deployments={"big": [{"provider": "c"}]})


# ----------------------------------------------------------------------------- against litellm

DRIVER = REPO_ROOT / "tests" / "litellm_driver.py"
GROUPS = {"a": "big", "b": "big", "c": "small", "d": "tiny"}


def _drive(mode: str, jobs: list[Any]) -> tuple[str, list[Any]]:
    """Run litellm's own Router on `jobs` in a fresh process (tests/litellm_driver.py:
    its sleep and random are patched there, never here); skip without litellm 1.80 or 1.110."""
    if importlib.util.find_spec("litellm") is None or importlib.util.find_spec("aiohttp") is None:
        pytest.skip("litellm (and aiohttp) not installed: pip install litellm")
    release = ".".join(importlib.metadata.version("litellm").split(".")[:2])
    if release not in ("1.80", "1.110"):
        pytest.skip(f"litellm {release} is neither release the router kind models")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no network at import
    payload = json.dumps({"mode": mode, "groups": GROUPS, "jobs": jobs})
    done = subprocess.run(
        [sys.executable, str(DRIVER)], input=payload, capture_output=True, text=True,
        env=env, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return release, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def mocked_results() -> tuple[str, list[Any]]:
    return _drive("mocked", [[script, keys] for script, keys in CASES])


@pytest.fixture(scope="module")
def served_results() -> tuple[str, list[Any]]:
    return _drive("served", [[plan, keys] for plan, keys in SERVED])


_ONE = {"deployments": {"big": [{"provider": "a"}]}}
_FALLBACK = {"fallbacks": [{"big": ["small"]}]}
#: (deployments' mocked outcomes, Router keys); the router kind gets the same settings.
CASES: list[tuple[dict[str, str | None], dict[str, Any]]] = [
    # one deployment failing with 5xx, or 429 (no Retry-After header): backoff, then fallback
    ({"a": "500", "c": None}, {"num_retries": 2, **_FALLBACK}),
    ({"a": "429", "c": None}, {"num_retries": 2, **_FALLBACK}),
    # two deployments, a failing: 1.80 cools it at once, 1.110 after 5 calls this minute
    ({"a": "500", "b": None}, {"num_retries": 2, "routing_strategy": "least-busy"}),
    ({"a": "500", "b": None}, {"num_retries": 7, "routing_strategy": "least-busy"}),
    # a 429 cools a deployment of a group of several at once
    ({"a": "429", "b": None}, {"num_retries": 3, "routing_strategy": "least-busy"}),
    ({"a": "429", "b": "429", "c": None},
     {"num_retries": 2, "routing_strategy": "least-busy", **_FALLBACK}),
    # the count rule: no retry once nothing is healthy
    ({"a": "500", "c": None}, {"num_retries": 2, "allowed_fails": 0, **_FALLBACK}),
    ({"a": "500", "c": None}, {"num_retries": 3, "allowed_fails": 2, **_FALLBACK}),
    # nested fallbacks (each group with its own retries), the generic `*`, max_fallbacks
    ({"a": "500", "c": "500", "d": None},
     {"num_retries": 1, "fallbacks": [{"big": ["small"]}, {"small": ["tiny"]}]}),
    ({"a": "500", "c": "500", "d": None},
     {"num_retries": 0, "fallbacks": [{"big": ["small"]}, {"*": ["tiny"]}]}),
    ({"a": "500", "c": "500", "d": None},
     {"num_retries": 0, "max_fallbacks": 1,
      "fallbacks": [{"big": ["small"]}, {"small": ["tiny"]}]}),
    ({"a": "500", "c": "500", "d": None},
     {"num_retries": 0, "fallbacks": [{"*": ["small", "tiny"]}]}),
    ({"a": "500", "c": "500", "d": None},
     {"num_retries": 0, "fallbacks": [{"big": ["small", "tiny"]}]}),
    # retry_policy by the first failure's type (1.80 does not read InternalServerErrorRetries)
    ({"a": "500", "c": None},
     {"num_retries": 1, "retry_policy": {"InternalServerErrorRetries": 3}, **_FALLBACK}),
]  # fmt: skip


class _SleepLog(simpy.Environment):
    """An Environment that records every positive timeout: the router's sleeps (calls here
    take no time)."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    def timeout(self, delay: float, value: Any = None) -> simpy.Timeout:  # type: ignore[override]
        if delay > 0:
            self.sleeps.append(delay)
        return super().timeout(delay, value)


def _ours(keys: dict[str, Any], script: dict[str, str | None]) -> dict[str, Any]:
    """The router kind's keys for LiteLLM Router keys (fallbacks as a mapping)."""
    mine = {k: v for k, v in keys.items() if k != "fallbacks"}
    if "fallbacks" in keys:
        mine["fallbacks"] = {k: v for item in keys["fallbacks"] for k, v in item.items()}
    if "b" not in script:
        mine.update(_ONE)
    return mine


@pytest.mark.slow
@pytest.mark.parametrize(("script", "keys"), CASES)
def test_litellms_own_router_sleeps_and_calls_the_same(
    script: dict[str, str | None], keys: dict[str, Any], mocked_results: Any
) -> None:
    """The same failures through litellm's Router (when installed: 1.80.x or 1.110.x) and
    through the router kind set to that release: the same sleeps, the same deployments called
    in order, the same answer (or both give up). Calls take no time here, so the sleeps are the
    gaps between call starts."""
    release, results = mocked_results
    sleeps, called, answered = results[CASES.index((script, keys))]
    outcome = {"500": OUTCOME_ERROR, "429": OUTCOME_RATE_LIMITED, None: OUTCOME_OK}
    env = _SleepLog()
    run = FakeRun(env, {p: outcome[k] for p, k in script.items()}, seconds=0.0)
    run.retry_after = math.nan  # litellm's mocked 429 carries no Retry-After header
    result = _run(_router(**_ours(keys, script), litellm_version=release), run)
    env.run()
    assert env.sleeps == pytest.approx(sleeps)
    assert [p for _, p, _ in run.log] == called
    assert result == [answered is not None]
    if answered is not None:
        assert run.log[-1][1] == answered


SERVED: list[tuple[dict[str, list[str]], dict[str, Any]]] = [
    # one deployment: Retry-After 2 + U[0, 0.75) (u = 0.5), a sleep after the last failure too
    ({"a": ["429", "429", "ok"]}, {"num_retries": 2}),
    ({"a": ["429"], "c": ["ok"]}, {"num_retries": 2, "fallbacks": [{"big": ["small"]}]}),
    # two: a's 429 cools it for its Retry-After, for the next request too
    ({"a": ["429", "ok"], "b": ["ok"]}, {"num_retries": 2, "routing_strategy": "least-busy"}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("plan", "keys"), SERVED)
def test_litellms_router_over_http_with_retry_after(
    plan: dict[str, list[str]], keys: dict[str, Any], served_results: Any
) -> None:
    """A real 429 with `Retry-After: 2` over HTTP (loopback, free port) through litellm's
    Router and through the router kind: the same sleeps (2 + 0.375 s), the same deployments per
    request, the same answers; the second request comes right after the first (a cooldown set
    by the first still holds). No wall time is measured: sleeps are recorded, not slept."""
    release, results = served_results
    sleeps, called, answered = results[SERVED.index((plan, keys))]
    outcome = {"429": OUTCOME_RATE_LIMITED, "500": OUTCOME_ERROR, "ok": OUTCOME_OK}
    script = {
        p: [outcome[o] for o in steps] + [outcome[steps[-1]]] * 8 for p, steps in plan.items()
    }
    env = _SleepLog()
    router = _router(**_ours(keys, dict.fromkeys(plan)), litellm_version=release)
    mine: list[list[str]] = []
    results: list[bool] = []
    for _ in range(2):  # one request after the other, at the same simulated instant
        run = FakeRun(env, script, seconds=0.0)
        result = _run(router, run, at=0.0)
        env.run()
        results += result
        mine.append([p for _, p, _ in run.log])
    assert env.sleeps == pytest.approx(sleeps)
    assert mine == called
    assert results == [a is not None for a in answered]
