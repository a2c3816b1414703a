"""Golden examples: every bundled scenario runs at a fixed size and gives its recorded summary, and
meets assertions derived independently of the code's output.

The record comparison catches any change of a bundled scenario's numbers, so behaviour changes
are deliberate: after checking the new numbers are right, rewrite the records with
`TAILSIM_REGENERATE_GOLDEN=1 python -m pytest tests/golden` and commit them with the change.
It allows 1e-9 relative difference (floating-point reassociation across platforms), far below
any statistical effect.

A record is the code's own output, so it would agree with a wrong simulator once regenerated.
Each bundled scenario therefore also has checks in `INDEPENDENT` (closed forms, an independent
re-computation of the latency law, exact conservation laws, orderings with a standard-error
margin) run on the same golden run; a bundled scenario without any is reported by
`test_every_bundled_scenario_has_independent_checks`.

Statistical tolerances: rates and means use +-Z standard errors (Z = 4, as `tailsim validate`:
a correct simulator fails one check by chance with probability ~6e-5, and the seed is fixed);
orderings ask the better policy to lead by more than ORDER_Z = 2 standard errors of the
difference (the brief's margin; every ordering here leads by 3.5 SE or more at the fixed seed).
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

import sim
from sim.model.config import Scenario
from sim.model.scenario import with_overrides
from tests.helpers import REPO_ROOT
from tests.integration.golden.test_deadline_scenarios import (
    CHECKS as DEADLINE_CHECKS,  # run at the golden size
)
from tests.integration.golden.test_hardness_scenario import (
    CHECKS as HARDNESS_CHECKS,  # run at the golden size
)
from tests.integration.golden.test_sdk_stacking_scenario import (
    SDK_CHECKS,  # run at its shipped size there
)
from tests.integration.golden.test_storm_scenarios import (
    STORM_CHECKS,  # run at their shipped size there
)

SCENARIOS = sorted((REPO_ROOT / "scenarios").glob("*.yaml"))
RECORDS = Path(__file__).resolve().parent / "records"
#: Requests of a golden run unless a scenario needs more (see GOLDEN_SIZE).
GOLDEN_REQUESTS = 300
#: Per-scenario sizes: azure-code-burst needs its first big burst (trace second ~250, 531
#: arrivals in a minute) for its token quota to bind; the first 300 arrivals never exceed 237 a
#: minute (2.8M tokens at 11,800 a request, under the 3M TPM), so a 300-request record never
#: drew a 429. 1000 requests cover two bursts at ~1 s of run time.
GOLDEN_SIZE = {"azure-code-burst": 1000, "retry-storm": 1500}  # quota binds; burst covered
#: hardness: its closed forms need ~200 hard requests to tell shared hardness from fresh draws.
GOLDEN_SIZE["hardness"] = 2000
GOLDEN_SIZE["streaming"] = 1000  # 3% of calls stall: enough stalled calls to order the cuts
GOLDEN_SIZE["agent-loop"] = 1000  # enough runs to order cut against wait by > 2 SE
#: Half-width of statistical checks, in standard errors.
Z = 4.0
#: Lead, in standard errors of the difference, that an ordering asks of the better policy.
ORDER_Z = 2.0


def _size(stem: str) -> int:
    """Requests of the golden run of scenario `stem`."""
    return GOLDEN_SIZE.get(stem, GOLDEN_REQUESTS)


@cache
def _scenario(stem: str) -> Scenario:
    """The bundled scenario `scenarios/<stem>.yaml`, loaded once per test process."""
    return sim.load_scenario(REPO_ROOT / "scenarios" / f"{stem}.yaml")


@cache
def _golden_run(stem: str) -> sim.RunResult:
    """The golden run of a bundled scenario (its own seed), shared by record and checks."""
    return sim.run(_scenario(stem), requests=_size(stem))


# --------------------------------------------------------------------------- small statistics


def _rates(result: sim.RunResult) -> dict[str, tuple[float, int]]:
    """(hit rate, runs) per policy, from the requests table (not from the summary)."""
    grouped = result.requests.groupby("policy", sort=False)["ok"]
    return {str(p): (float(g.mean()), len(g)) for p, g in grouped}


def _assert_rate_leads(result: sim.RunResult, better: str, worse: str) -> None:
    """`better`'s hit rate exceeds `worse`'s by more than ORDER_Z SE of the difference
    (unpaired binomial SEs: conservative, as common random numbers correlate the two)."""
    rates = _rates(result)
    (p1, n1), (p2, n2) = rates[better], rates[worse]
    se = math.sqrt(max(p1 * (1 - p1), 1 / n1) / n1 + max(p2 * (1 - p2), 1 / n2) / n2)
    assert p1 - p2 > ORDER_Z * se, (
        f"{better} hit rate {p1:.4f} does not lead {worse}'s {p2:.4f} by {ORDER_Z:g} SE "
        f"(SE of the difference {se:.4f})"
    )


def _quantile_bounds(sample: np.ndarray, q: float, z: float) -> tuple[float, float]:
    """Distribution-free bounds of the q-quantile: the order statistics at ranks
    nq -+ z sqrt(nq(1-q)) (the binomial count of values below the quantile)."""
    x = np.sort(sample)
    n = len(x)
    half = z * math.sqrt(n * q * (1 - q))
    lo = int(max(0, math.floor(n * q - half)))
    hi = int(min(n - 1, math.ceil(n * q + half)))
    return float(x[lo]), float(x[hi])


def _latencies(result: sim.RunResult, policy: str) -> np.ndarray:
    """latency_s of every run of `policy` (failed runs at the deadline)."""
    req = result.requests
    return req.loc[req["policy"] == policy, "latency_s"].to_numpy(float)


# --------------------------------------------------------------------------- default: references


def _lognormal(median: float, p99: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this median and p99, from the stdlib normal (not from
    sim.analysis.analytic), so the reference shares no code with the simulator."""
    return math.log(median), math.log(p99 / median) / NormalDist().inv_cdf(0.99)


def _wait_chain_reference(
    scenario: Scenario, provider: str, model: str, retries: int, timeout_s: float, samples: int
) -> np.ndarray:
    """Time to finish a chain of the scenario's steps under wait, re-computed from the latency
    law in plain numpy (inf when a step fails every attempt): no engine, queue-free.

    A call: first token lognormal; outcome error / invalid at first token, else the answer
    after output_tokens / speed (speed lognormal) plus a stall with its probability; a call
    longer than `timeout_s` is cut there and retried."""
    spec = scenario.providers[provider].serves[model]
    rng = np.random.default_rng(20_250_601)  # the reference's own fixed stream
    ttft = _lognormal(float(spec.ttft_s.median), float(spec.ttft_s.p99))
    speed = _lognormal(float(spec.tokens_per_s.median), float(spec.tokens_per_s.p99))
    stall_p = spec.stall.probability if spec.stall else 0.0
    stall = (
        _lognormal(float(spec.stall.extra_s.median), float(spec.stall.extra_s.p99))
        if spec.stall
        else (0.0, 0.0)
    )
    total = np.zeros(samples)
    for step in scenario.workflow.steps:
        done = np.zeros(samples, dtype=bool)
        for _ in range(retries + 1):
            live = ~done
            first = rng.lognormal(*ttft, samples)
            answer = first + step.output_tokens / rng.lognormal(*speed, samples)
            answer += np.where(rng.random(samples) < stall_p, rng.lognormal(*stall, samples), 0.0)
            failed = rng.random(samples) < spec.error_rate + spec.invalid_rate
            took = np.where(failed, first, answer)
            cut = took > timeout_s
            total += np.where(live, np.minimum(took, timeout_s), 0.0)
            done |= live & ~failed & ~cut
        total[~done] = math.inf
    return total


def _attempt_bill(scenario: Scenario, provider: str, model: str, step_index: int) -> np.ndarray:
    """(probability, USD) of what one attempt bills under billing 'full': an answer bills input
    and output, junk its input, a hard error nothing."""
    spec = scenario.providers[provider].serves[model]
    step = scenario.workflow.steps[step_index]
    price = scenario.models[model].price_per_mtok
    full = (step.input_tokens * price.input + step.output_tokens * price.output) / 1e6
    junk = step.input_tokens * price.input / 1e6
    ok = 1.0 - spec.error_rate - spec.invalid_rate
    return np.array([[ok, full], [spec.invalid_rate, junk], [spec.error_rate, 0.0]])


# --------------------------------------------------------------------------- default: checks


def _assert_uncontended(result: sim.RunResult) -> None:
    """No call queued for a slot and none was refused with a 429 (exact)."""
    calls = result.calls
    assert (calls["queue_s"] == 0).all(), calls.loc[calls["queue_s"] > 0].head()
    assert not (calls["outcome"] == "rate_limited").any()


def default_is_uncontended(result: sim.RunResult) -> None:
    """Premise of the closed forms below: no call queues and none is refused. At 0.5 runs/s,
    each over in <= 90 s with <= 2 calls at once, ~45 runs (~90 calls) are in the system, far
    below 512 and 256 slots; ~300 calls a minute x 6,300 tokens is ~2M tokens, a tenth of the
    20M TPM. Exact."""
    _assert_uncontended(result)


def _assert_wait_matches_the_latency_law(result: sim.RunResult) -> None:
    """wait's hit rate and latency quartiles against its chain of steps re-computed from the
    latency law in numpy (200,000 samples; queue-free, as each scenario's premise check shows):
    P(total <= deadline), and the share of runs done by the reference's 25% and 50% quantiles.
    Tolerance Z binomial SE of the golden runs plus the reference's own (~0.001)."""
    scenario = result.scenario
    spec = scenario.policies["wait"]
    samples = 200_000
    timeout = math.inf if spec.timeout_s is None else spec.timeout_s
    total = _wait_chain_reference(scenario, "direct", "big", spec.retries, timeout, samples)
    latency = _latencies(result, "wait")
    ok = result.requests.loc[result.requests["policy"] == "wait", "ok"].to_numpy(bool)
    n = len(latency)
    hit = float(np.mean(total <= scenario.deadline_s))
    checks = [("hit rate", hit, float(ok.mean()))]
    for q in (0.25, 0.5):
        t = float(np.quantile(total, q))
        checks.append(
            (
                f"done by the reference p{q * 100:g} = {t:.2f} s",
                q,
                float(np.mean(ok & (latency <= t))),
            )
        )
    for name, theory, got in checks:
        se = math.sqrt(theory * (1 - theory) * (1 / n + 1 / samples))
        assert abs(got - theory) <= Z * se, (
            f"wait {name}: {got:.4f} vs {theory:.4f} +- {Z * se:.4f}"
        )


def default_wait_matches_the_latency_law(result: sim.RunResult) -> None:
    """The ten-step chain of wait (2 retries, timeout 300 s) against the numpy re-computation."""
    _assert_wait_matches_the_latency_law(result)


def default_wait_without_deadline_closed_forms(result: sim.RunResult) -> None:
    """The default with its deadline lifted (everything else equal; same size and seed): with no
    contention and no deadline, a step of wait with r retries succeeds with 1 - f^(r+1), f =
    error + invalid rate, so the hit rate is (1 - f^(r+1))^10; a step makes 1 + f + ... + f^r
    calls on average and bills that many times the mean bill of one attempt. Exact expectations;
    tolerance Z SE from the exact per-step variances (10 independent steps per run)."""
    scenario = result.scenario.model_copy(update={"deadline_s": 1e9})
    spec = scenario.policies["wait"]
    lifted = sim.run(scenario, requests=result.requests_count, policies=["wait"])
    req = lifted.requests
    n, steps, r = len(req), len(scenario.workflow.steps), spec.retries
    serving = scenario.providers["direct"].serves["big"]
    f = serving.error_rate + serving.invalid_rate
    # per step: attempt k happens with probability f^k, and its bill is independent of that
    bill = _attempt_bill(scenario, "direct", "big", 0)
    calls = np.arange(1, r + 2)  # calls a step makes when attempt k-1 is its last
    last = np.array([f**k * (1 - f) for k in range(r)] + [f**r])  # P(last attempt is k)
    mean_bill = float(bill[:, 0] @ bill[:, 1])
    var_bill = float(bill[:, 0] @ bill[:, 1] ** 2) - mean_bill**2
    calls_mean = float(last @ calls)
    calls_var = float(last @ calls**2) - calls_mean**2
    # cost of a step = sum over its N attempts of iid bills: E = E[N] m, Var = E[N] v + Var[N] m^2
    cost_mean = calls_mean * mean_bill
    cost_var = calls_mean * var_bill + calls_var * mean_bill**2
    hit = (1 - f ** (r + 1)) ** steps
    rows = [
        ("hit rate", hit, float(req["ok"].mean()), math.sqrt(hit * (1 - hit) / n)),
        (
            "calls/request",
            steps * calls_mean,
            float(req["calls"].mean()),
            math.sqrt(steps * calls_var / n),
        ),
        (
            "cost/request",
            steps * cost_mean,
            float(req["cost_usd"].mean()),
            math.sqrt(steps * cost_var / n),
        ),
    ]
    for name, theory, got, se in rows:
        # a rate near 1 has an SE near 0: allow at least one run's worth
        tol = max(Z * se, 1.0 / n if name == "hit rate" else 0.0)
        assert abs(got - theory) <= tol, (
            f"{name}: {got:.6g} vs closed form {theory:.6g} +- {tol:.3g}"
        )


def _assert_race_cost_closed_form(result: sim.RunResult, providers: tuple[str, str]) -> None:
    """A race of two on `providers` with billing 'full' bills both attempts of every step
    whatever wins: the loser is cancelled and billed in full, unless it drew an error (nothing)
    or junk (input), which it bills the same if it ends first. So a successful run paid, per
    step, the two attempts' bills given that at least one drew an answer: exact in
    expectation (sums over the 3 x 3 outcome pairs); tolerance Z SE from that variance."""
    scenario = result.scenario
    mean, var = 0.0, 0.0
    for index, step in enumerate(scenario.workflow.steps):
        a = _attempt_bill(scenario, providers[0], step.model, index)
        b = _attempt_bill(scenario, providers[1], step.model, index)
        pairs = [
            (pa * pb, ba + bb)
            for k, (pa, ba) in enumerate(a)
            for j, (pb, bb) in enumerate(b)
            if k == 0 or j == 0  # row 0 is the answer: the step succeeds
        ]
        p = np.array([q for q, _ in pairs]) / sum(q for q, _ in pairs)
        bill = np.array([c for _, c in pairs])
        step_mean = float(p @ bill)
        mean += step_mean
        var += float(p @ bill**2) - step_mean**2
    req = result.requests
    won = req.loc[(req["policy"] == "race") & req["ok"], "cost_usd"]
    se = math.sqrt(var / len(won))
    assert abs(float(won.mean()) - mean) <= Z * se, (
        f"race cost per successful run {won.mean():.6f} vs closed form {mean:.6f} +- {Z * se:.2g}"
    )


def default_race_cost_closed_form(result: sim.RunResult) -> None:
    """Race on [direct, managed] (managed never fails): per step one full managed answer plus
    one direct attempt's bill. Race's cost per request is then ~2x wait's, as this closed form
    is ~1.95x wait's (per step 1.0309 x E[bill])."""
    _assert_race_cost_closed_form(result, ("direct", "managed"))


def default_orderings(result: sim.RunResult) -> None:
    """Why each policy exists, as orderings with a margin: wait's misses come from stalls (3%
    of calls, +30 s median) that it waits out; cut, race, hedge and downshift all route around
    a slow call, so each beats wait's hit rate by more than ORDER_Z SE. Race's p95 lies below
    wait's: the upper distribution-free bound of race's p95 (rank 0.95n + 2 sqrt(n 0.95 0.05))
    is below the lower bound of wait's."""
    for better in ("cut", "race", "hedge", "downshift"):
        _assert_rate_leads(result, better, "wait")
    _, race_hi = _quantile_bounds(_latencies(result, "race"), 0.95, ORDER_Z)
    wait_lo, _ = _quantile_bounds(_latencies(result, "wait"), 0.95, ORDER_Z)
    assert race_hi < wait_lo, (
        f"race p95 upper bound {race_hi:.2f} s >= wait's lower {wait_lo:.2f} s"
    )


# --------------------------------------------------------------------------- azure: checks


def _trace_offsets(scenario: Scenario) -> np.ndarray:
    """The trace's arrival offsets read afresh from the bundled CSV (not through
    sim.model.scenario)."""
    path = REPO_ROOT / "scenarios" / str(scenario.arrivals.file)
    stamps = pd.to_datetime(pd.read_csv(path)[scenario.arrivals.column])
    seconds = np.sort((stamps - stamps.min()).dt.total_seconds().to_numpy(float))
    return seconds - seconds[0]


def azure_replays_the_trace(result: sim.RunResult) -> None:
    """Every policy's runs arrive at the trace's first n timestamps (offset to 0) times
    time_scale. Exact up to float rounding."""
    scenario = result.scenario
    expected = _trace_offsets(scenario)[: result.requests_count] * scenario.arrivals.time_scale
    req = result.requests[result.requests["resend"] == 0]
    for policy, group in req.groupby("policy", sort=False):
        got = group.sort_values("request_id")["arrival_s"].to_numpy(float)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-9, err_msg=str(policy))


def azure_quota_binds(result: sim.RunResult) -> None:
    """The size covers a burst where the direct quota must bind: some minute of the replayed
    arrivals asks, at wait's 11,800 tokens a request (every step on direct), for more than
    twice the TPM (a full bucket plus a minute of refill). And so 429s happen under every
    policy, and the record covers them."""
    scenario = result.scenario
    arrive = _trace_offsets(scenario)[: result.requests_count] * scenario.arrivals.time_scale
    per_request = sum(s.input_tokens + s.output_tokens for s in scenario.workflow.steps)
    peak = int((np.searchsorted(arrive, arrive + 60.0) - np.arange(len(arrive))).max())
    tpm = scenario.providers["direct"].tpm
    assert peak * per_request > 2 * tpm, f"peak minute {peak} x {per_request} tokens vs TPM {tpm}"
    limited = result.summary.set_index("policy")["rate_limited_per_request"]
    assert (limited > 0).all(), limited


def azure_quotas_are_never_exceeded(result: sim.RunResult) -> None:
    """The token-bucket law, exact: over any interval [a, b] of call starts, a provider admits
    at most TPM (a full bucket) + TPM/60 (b - a) tokens, and likewise RPM requests. Checked
    over all intervals at once: max over b of (C(b) - rate t_b) - min over a <= b of
    (C(a-) - rate t_a) <= capacity, C the cumulative admitted amount in start order. A call's
    tokens are its step's input and output tokens from the scenario (the providers charge the
    output), not the charge the code recorded (`quota_tokens`)."""
    calls = result.calls
    asked = {s.id: s.input_tokens + s.output_tokens for s in result.scenario.workflow.steps}
    for (policy, provider), group in calls.groupby(["policy", "provider"], sort=False):
        spec = result.scenario.providers[str(provider)]
        assert spec.charge == "output"
        admitted = group[group["outcome"] != "rate_limited"].sort_values("start_s", kind="stable")
        t = admitted["start_s"].to_numpy(float)
        limits = [("tpm", spec.tpm, admitted["step"].map(asked).to_numpy(float))]
        limits.append(("rpm", spec.rpm, np.ones(len(t))))
        for name, capacity, amount in limits:
            if not capacity or not len(t):
                continue
            rate = capacity / 60.0
            after = np.cumsum(amount) - rate * t  # C(b) - rate t_b
            before = np.minimum.accumulate(np.cumsum(amount) - amount - rate * t)
            worst = float((after - before).max())
            assert worst <= capacity * (1 + 1e-9), (
                f"{policy} on {provider}: {worst:.0f} admitted beyond the {name} bucket's "
                f"{capacity}"
            )


def azure_orderings(result: sim.RunResult) -> None:
    """Under binding quotas, wait retries a 429 on direct only after its Retry-After, while cut
    sends its retry to managed's own quota and hedge its second call there: both lead wait's
    hit rate by more than ORDER_Z SE."""
    for better in ("cut", "hedge"):
        _assert_rate_leads(result, better, "wait")


# --------------------------------------------------------------------------- draft-race: checks


def draft_race_is_uncontended(result: sim.RunResult) -> None:
    """Premise: no quotas, 256 slots per provider, 0.5 runs/s of <= 60 s with <= 2 calls at
    once: ~30 runs, ~60 calls in the system. No queue, no 429 (exact)."""
    _assert_uncontended(result)


def draft_race_wait_matches_the_latency_law(result: sim.RunResult) -> None:
    """The four-step chain of wait (1 retry, no timeout) against the numpy re-computation."""
    _assert_wait_matches_the_latency_law(result)


def draft_race_race_cost_closed_form(result: sim.RunResult) -> None:
    """Race on [direct, managed], both of which err and return junk: the 3 x 3 closed form."""
    _assert_race_cost_closed_form(result, ("direct", "managed"))


def draft_race_orderings(result: sim.RunResult) -> None:
    """The scenario's claim: a draft race (one big + one draft answer a step, the draft a fifth
    of the price) costs less per request than the plain race (two big answers) by more than
    ORDER_Z SE of the difference (per-run costs, unpaired), at a hit rate not below race's by
    more than ORDER_Z SE; and racing beats wait's hit rate (a stuck call is routed around)."""
    req = result.requests
    cost = {p: g["cost_usd"].to_numpy(float) for p, g in req.groupby("policy", sort=False)}
    se = math.sqrt(sum(float(np.var(cost[p], ddof=1)) / len(cost[p]) for p in ("race", "draft")))
    lead = float(cost["race"].mean() - cost["draft"].mean())
    assert lead > ORDER_Z * se, f"draft saves {lead:.4f} $/request over race, SE {se:.4f}"
    rates = _rates(result)
    (p_draft, n_draft), (p_race, n_race) = rates["draft"], rates["race"]
    se_rate = math.sqrt(
        max(p_draft * (1 - p_draft), 1 / n_draft) / n_draft
        + max(p_race * (1 - p_race), 1 / n_race) / n_race
    )
    assert p_draft >= p_race - ORDER_Z * se_rate, (p_draft, p_race, se_rate)
    _assert_rate_leads(result, "race", "wait")


# --------------------------------------------------------------------------- quality-floor: checks


def quality_floor_is_uncontended(result: sim.RunResult) -> None:
    """Premise: no quotas, 256 slots, 0.5 runs/s of <= 45 s with one call at a time: ~23 calls
    in the system. No queue, no 429 (exact)."""
    _assert_uncontended(result)


def quality_floor_quality_law(result: sim.RunResult) -> None:
    """A delivered run's quality is the mean, over its steps, of the `quality` of the model that
    answered the step (its ok call), and it is a valid hit iff it was delivered and that
    quality reaches `quality_floor`. Re-computed from the calls table and the scenario's
    model qualities, exact up to rounding. With small at 0.5, one small step in four gives
    0.875 < 0.9: a downshift to small that fires anywhere breaks the floor."""
    scenario = result.scenario
    quality = {name: spec.quality for name, spec in scenario.models.items()}
    calls = result.calls[result.calls["outcome"] == "ok"]
    keys = ["policy", "request_id", "resend"]
    answered = calls.assign(q=calls["model"].map(quality)).groupby(keys)["q"]
    per_run = answered.mean().rename("expected")
    steps = answered.size().rename("answered")
    req = result.requests.join(per_run, on=keys).join(steps, on=keys)
    delivered = req[req["ok"]]
    assert (delivered["answered"] == len(scenario.workflow.steps)).all()
    np.testing.assert_allclose(delivered["quality"], delivered["expected"], rtol=1e-12)
    floor = scenario.quality_floor
    expected_valid = req["ok"] & (req["expected"].fillna(0.0) >= floor - 1e-12)
    assert (req["valid_hit"] == expected_valid).all()
    assert (delivered["quality"] == 0.875).any()  # the case the scenario is about happens


def quality_floor_orderings(result: sim.RunResult) -> None:
    """The scenario's claim: downshift to small meets more deadlines than cut (a fast fallback
    after the cutoff), yet downshift to mid has more valid hits than downshift to small (small
    answers fall below the floor). Each lead > ORDER_Z SE of the difference."""
    _assert_rate_leads(result, "downshift", "cut")
    req = result.requests
    valid = {p: (float(g.mean()), len(g)) for p, g in req.groupby("policy")["valid_hit"]}
    (p1, n1), (p2, n2) = valid["downshift_mid"], valid["downshift"]
    se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    assert p1 - p2 > ORDER_Z * se, f"valid hits: downshift_mid {p1:.4f}, downshift {p2:.4f}"


def nines_is_uncontended(result: sim.RunResult) -> None:
    """scenarios/nines.yaml is the default's providers and steps at the same 0.5 runs/s, runs
    over in <= 150 s: ~75 runs, <= 150 calls in the system, far below 512 and 256 slots and the
    quotas (as `default_is_uncontended`). Exact."""
    _assert_uncontended(result)


def nines_race_cost_closed_form(result: sim.RunResult) -> None:
    """Its race is the default's (both attempts billed, managed never fails): the same closed
    form of the cost per successful run (`_assert_race_cost_closed_form`)."""
    _assert_race_cost_closed_form(result, ("direct", "managed"))


def streaming_stream_cuts_end_where_they_should(result: sim.RunResult) -> None:
    """Exact, per call (no queue: 512 slots at 0.5 runs/s): a first-token cut ends 4 s after
    its send having streamed nothing; an idle cut ends at least 5 s past its first token, having
    streamed less than its answer, and bills exactly what it streamed (billing elapsed)."""
    _assert_uncontended(result)
    calls = result.calls
    first = calls[calls["ended_by"] == "first_token"]
    idle = calls[calls["ended_by"] == "idle"]
    assert len(first) > 0
    assert len(idle) > 0
    assert set(first["policy"]) <= {"first_token", "both"}
    assert set(idle["policy"]) <= {"idle", "both"}
    np.testing.assert_allclose(first["end_s"] - first["start_s"], 4.0, rtol=1e-12)
    assert (first["tokens_streamed"] == 0).all()
    assert (idle["end_s"] - idle["start_s"] >= 5.0).all()
    asked = idle["step"].map({"plan": 200, "draft": 300, "answer": 300})
    assert (idle["tokens_streamed"] < asked).all()
    assert (idle["output_tokens"] == idle["tokens_streamed"]).all()


def streaming_orderings(result: sim.RunResult) -> None:
    """Each stream cut catches the stalls on its side of the first token, so each beats waiting,
    and both together beat either alone (by more than ORDER_Z SE)."""
    for better, worse in (("first_token", "wait"), ("idle", "wait"), ("both", "first_token"),
                          ("both", "idle")):  # fmt: skip
        _assert_rate_leads(result, better, worse)


def agent_loop_count_law_and_success_closed_form(result: sim.RunResult) -> None:
    """Without a deadline (1e6 s) and under wait alone, 2,000 runs: every run that succeeds ran
    its full N iterations of `act` (the calls' `iteration` column), so N's mean and P(N = 8)
    meet the capped geometric's closed forms (p = 1/3: E[min(G, 8)] = (1 - (2/3)^8) / p,
    P(N = 8) = (2/3)^7), and the success share meets E[q^(3 + N)] with q = 1 - 0.01^2 (a step
    fails only if both its attempts error; waiting never cuts a stall), each within Z = 4 SE
    (SE from the law's own variance over the runs)."""
    del result  # its own run: the golden run's deadline censors long loops
    base = _scenario("agent-loop")
    free = with_overrides(
        base, {"deadline_s": 1e6, "policies": {"wait": {"kind": "wait", "retries": 1}}}
    )
    run = sim.run(free, requests=2000)
    calls = run.calls
    acts = calls[calls["step"] == "act"].groupby("request_id")["iteration"].max() + 1
    ok = run.requests.set_index("request_id")["ok"]
    n = acts[ok[acts.index].to_numpy(bool)].to_numpy(float)
    p, cap = 1 / 3, 8
    law = np.array([(1 - p) ** (k - 1) * p for k in range(1, cap)] + [(1 - p) ** (cap - 1)])
    ks = np.arange(1, cap + 1)
    mean, var = float(law @ ks), float(law @ ks**2) - float(law @ ks) ** 2
    assert abs(n.mean() - mean) <= Z * math.sqrt(var / len(n)), (n.mean(), mean)
    top = law[-1]
    assert abs((n == cap).mean() - top) <= Z * math.sqrt(top * (1 - top) / len(n))
    q = 1 - 0.01**2
    success = float(law @ q ** (3 + ks))
    got = float(ok.mean())
    assert abs(got - success) <= Z * math.sqrt(max(success * (1 - success), 1 / len(ok)) / len(ok))


def agent_loop_orderings(result: sim.RunResult) -> None:
    """Cutting a stalled call at its p95 and retrying beats waiting through it by more than
    ORDER_Z SE; only the admitted policy refuses starts (exact)."""
    _assert_rate_leads(result, "cut_p95", "wait")
    refused = result.requests.groupby("policy")["refused_starts"].sum()
    assert refused["wait"] == 0
    assert refused["cut_p95"] == 0
    assert refused["admitted"] > 0


#: Independent checks per bundled scenario (by file stem). A new bundled scenario must add its
#: own: `test_every_bundled_scenario_has_independent_checks` fails until it does.
def drive_hedge_fires_when_the_primary_is_late_or_failed(result: sim.RunResult) -> None:
    """drive.yaml's hedge: a second call on b exactly when the primary on bare had no answer
    2 s after its start (then 2 s after it) or failed before (then at its end)."""
    calls = result.calls[result.calls["policy"] == "hedge"]
    primary = calls[calls["attempt"] == 0].set_index("request_id")
    hedges = calls[calls["attempt"] == 1].set_index("request_id")
    assert set(primary["provider"]) == {"bare"}
    assert set(hedges["provider"]) <= {"b"}
    took = primary["end_s"] - primary["start_s"]
    answered = (primary["outcome"] == "ok") & (took <= 2.0)
    assert set(hedges.index) == set(primary.index[~answered])
    late = hedges.index[(took[hedges.index] > 2.0).to_numpy()]
    expected = primary.loc[late, "start_s"] + 2.0
    assert hedges.loc[late, "start_s"].to_numpy() == pytest.approx(expected.to_numpy(), abs=1e-9)
    failed = hedges.index[(took[hedges.index] <= 2.0).to_numpy()]
    ended = primary.loc[failed, "end_s"].to_numpy()
    assert hedges.loc[failed, "start_s"].to_numpy() == pytest.approx(ended, abs=1e-9)


def drive_openai_wait_retries_only_what_the_sdk_retries(result: sim.RunResult) -> None:
    """drive.yaml's openai-wait (sdk: openai, 2 retries): a call k > 0 follows call k - 1 of
    its request only after a 429, an error or the client's own timeout; none follows an ok."""
    calls = result.calls[result.calls["policy"] == "openai-wait"]
    calls = calls.sort_values(["request_id", "sdk_retry"])
    previous = calls.groupby("request_id")["outcome"].shift()
    retried = calls[calls["sdk_retry"] > 0]
    assert len(retried) > 0
    assert set(previous[retried.index]) <= {"rate_limited", "error", "timeout"}
    assert calls["sdk_retry"].max() <= 2


INDEPENDENT: dict[str, tuple[Callable[[sim.RunResult], None], ...]] = {
    "drive": (
        drive_hedge_fires_when_the_primary_is_late_or_failed,
        drive_openai_wait_retries_only_what_the_sdk_retries,
    ),
    "default": (
        default_is_uncontended,
        default_wait_matches_the_latency_law,
        default_wait_without_deadline_closed_forms,
        default_race_cost_closed_form,
        default_orderings,
    ),
    "azure-code-burst": (
        azure_replays_the_trace,
        azure_quota_binds,
        azure_quotas_are_never_exceeded,
        azure_orderings,
    ),
    "draft-race": (
        draft_race_is_uncontended,
        draft_race_wait_matches_the_latency_law,
        draft_race_race_cost_closed_form,
        draft_race_orderings,
    ),
    "quality-floor": (
        quality_floor_is_uncontended,
        quality_floor_quality_law,
        quality_floor_orderings,
    ),
    "nines": (nines_is_uncontended, nines_race_cost_closed_form),  # its nines: test_nines.py
    # deadline-propagation, futile-retry, tool-resend: written in their own module
    **DEADLINE_CHECKS,
    **HARDNESS_CHECKS,  # hardness: closed forms of shared hardness, in their own module
    "streaming": (streaming_stream_cuts_end_where_they_should, streaming_orderings),
    "agent-loop": (agent_loop_count_law_and_success_closed_form, agent_loop_orderings),
}
CASES = [(stem, check) for stem, checks in INDEPENDENT.items() for check in checks]
#: Scenarios whose independent checks need their shipped size run in a module of their own.
CHECKED_ELSEWHERE: dict[str, tuple[Callable[[sim.RunResult], None], ...]] = {
    **STORM_CHECKS,
    **SDK_CHECKS,
}


# --------------------------------------------------------------------------- tests


def test_there_are_bundled_scenarios() -> None:
    assert {p.name for p in SCENARIOS} >= {"default.yaml", "azure-code-burst.yaml"}


def test_every_bundled_scenario_has_independent_checks() -> None:
    """A record alone only compares the code with itself: every bundled scenario needs checks."""
    registry = {**INDEPENDENT, **CHECKED_ELSEWHERE}
    missing = sorted({p.stem for p in SCENARIOS} - {s for s, c in registry.items() if c})
    assert not missing, f"bundled scenarios without independent checks in INDEPENDENT: {missing}"
    stale = sorted(set(registry) - {p.stem for p in SCENARIOS})
    assert not stale, f"INDEPENDENT names scenarios that are not bundled: {stale}"


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_bundled_scenario_matches_its_record(path: Path) -> None:
    summary = _golden_run(path.stem).summary
    record = RECORDS / f"{path.stem}.summary.csv"
    if os.environ.get("TAILSIM_REGENERATE_GOLDEN"):
        record.parent.mkdir(parents=True, exist_ok=True)
        summary.to_csv(record, index=False)
    expected = pd.read_csv(record)
    got = pd.read_csv(io.StringIO(summary.to_csv(index=False)))  # same dtypes as the record
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9, atol=0)


@pytest.mark.parametrize(
    ("stem", "check"), CASES, ids=[f"{stem}-{check.__name__}" for stem, check in CASES]
)
def test_bundled_scenario_meets_independent_check(
    stem: str, check: Callable[[sim.RunResult], None]
) -> None:
    check(_golden_run(stem))
