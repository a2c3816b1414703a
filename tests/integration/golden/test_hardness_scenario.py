"""Independent checks of the bundled `scenarios/hardness.yaml` on its golden run (the size and
seed of tests/golden/records; `CHECKS` joins test_bundled_scenarios.py's `INDEPENDENT`).

Nothing queues and the deadline never binds (checked), so a run succeeds iff every step gets a
valid answer within its tries, and given the request's hardness the tries are independent. The
hit rate of each policy is then h S(hard) + (1 - h) S(easy), S the product over steps of
1 - (product of the tries' failure probabilities), a try failing with error + junk probability,
or, answering, when its length (times the model's `when_hard.length` on a hard request) rounds
above `max_tokens`. Re-computed here from the scenario's numbers with the standard library only.
Tolerances: +-Z binomial standard errors of the golden run (Z = 4, as test_bundled_scenarios);
orderings lead by more than ORDER_Z paired standard errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np

import sim
from sim.model.config import Scenario, StepSpec

#: Half-width of the closed-form checks, in standard errors.
Z = 4.0
#: Lead, in paired standard errors, that an ordering asks of the better policy.
ORDER_Z = 2.0
#: The models each policy's tries of a step use, in order (read off the scenario's policies).
TRIES = {"redraw": ("small",) * 3, "race": ("small",) * 3, "fallup": ("small", "big", "big")}


def _try_fails(scenario: Scenario, model: str, step: StepSpec, hard: bool) -> float:
    """P(one try of `model` on `step` gives no valid answer), for a hard or an easy request."""
    serving = scenario.providers["api"].serves[model]
    when = scenario.models[model].when_hard
    junk = serving.invalid_rate
    factor = 1.0
    if hard and when is not None:
        junk = serving.invalid_rate if when.invalid_rate is None else when.invalid_rate
        factor = when.length
    bad = serving.error_rate + junk
    truncated = 0.0
    if step.max_tokens is not None:
        cap = step.max_tokens + 0.5  # round(factor * length) > max_tokens
        length = step.output_tokens
        if isinstance(length, int):
            truncated = float(factor * length > cap)
        else:  # lognormal from median and p99
            sigma = math.log(length.p99 / length.median) / NormalDist().inv_cdf(0.99)
            truncated = 1 - NormalDist().cdf(math.log(cap / factor / length.median) / sigma)
    return bad + (1 - bad) * truncated


def _success(scenario: Scenario, tries: tuple[str, ...], hard: bool) -> float:
    """P(a request gets every step answered) under `tries`, given its hardness."""
    p = 1.0
    for step in scenario.workflow.steps:
        p *= 1 - math.prod(_try_fails(scenario, m, step, hard) for m in tries)
    return p


def closed_form(scenario: Scenario, policy: str) -> float:
    """The hit rate of `policy`: h S(hard) + (1 - h) S(easy)."""
    assert scenario.hardness is not None
    h = scenario.hardness.share
    tries = TRIES[policy]
    return h * _success(scenario, tries, True) + (1 - h) * _success(scenario, tries, False)


def independent_draws(scenario: Scenario, tries: int) -> float:
    """What `tries` draws of `small` would give if junk and length were drawn afresh per try,
    with the request-averaged failure probability p of one try: the product of 1 - p^tries."""
    assert scenario.hardness is not None
    h = scenario.hardness.share
    out = 1.0
    for step in scenario.workflow.steps:
        p = h * _try_fails(scenario, "small", step, True)
        p += (1 - h) * _try_fails(scenario, "small", step, False)
        out *= 1 - p**tries
    return out


def _ok(result: sim.RunResult, policy: str) -> np.ndarray:
    req = result.requests[result.requests["policy"] == policy].sort_values("request_id")
    return req["ok"].to_numpy(bool)


# --------------------------------------------------------------------------- checks


def hardness_is_uncontended(result: sim.RunResult) -> None:
    """Premise of the closed forms: no call queued or was refused, none was cut at fallup's
    60 s cutoff, no run met the 120 s deadline (exact; a call takes seconds: 750 tokens at the
    small model's p1 speed of 90 tok/s is 8 s)."""
    calls, req = result.calls, result.requests
    assert (calls["queue_s"] == 0).all()
    assert not calls["outcome"].isin(["rate_limited", "timeout"]).any()
    assert not (req["fail_reason"] == "deadline").any()


def hardness_hit_rates_closed_form(result: sim.RunResult) -> None:
    """Every policy's hit rate is its closed form within Z SE; and re-drawing the same model
    gains less than independent draws would: redraw falls short of the independent-draws
    value by more than Z SE (hardness shared by the tries, not drawn afresh)."""
    scenario = result.scenario
    for policy in TRIES:
        ok = _ok(result, policy)
        theory, n = closed_form(scenario, policy), len(ok)
        se = math.sqrt(max(theory * (1 - theory), 1 / n) / n)
        assert abs(ok.mean() - theory) <= Z * se, f"{policy}: {ok.mean():.4f} vs {theory:.4f}"
    ok = _ok(result, "redraw")
    theory = closed_form(scenario, "redraw")
    se = math.sqrt(theory * (1 - theory) / len(ok))
    fresh = independent_draws(scenario, 3)
    assert fresh - ok.mean() > Z * se, f"redraw {ok.mean():.4f}, independent draws {fresh:.4f}"


def hardness_belongs_to_the_request(result: sim.RunResult) -> None:
    """The `answer` step's fixed 300 tokens become 750 (x 2.5) on `small` for a hard request,
    on every try: each request's answering small calls bill one length (exact), big's always
    300 (exact); a first try answering at 750 has probability h (1 - error - hard junk) (Z SE).
    A truncated summary bills exactly `max_tokens` (exact)."""
    scenario, calls = result.scenario, result.calls
    steps = {s.id: s for s in scenario.workflow.steps}
    answered = calls[(calls["step"] == "answer") & (calls["outcome"] == "ok")]
    small = answered[answered["model"] == "small"]
    lengths = small.groupby(["policy", "request_id"])["output_tokens"].agg(["min", "max"])
    assert (lengths["min"] == lengths["max"]).all()
    assert set(small["output_tokens"]) == {300, 750}
    assert (answered.loc[answered["model"] == "big", "output_tokens"] == 300).all()
    first = calls[(calls["policy"] == "redraw") & (calls["step"] == "answer")]
    first = first[first["attempt"] == 0]
    long_first = float(((first["outcome"] == "ok") & (first["output_tokens"] == 750)).mean())
    assert scenario.hardness is not None
    serving = scenario.providers["api"].serves["small"]
    when = scenario.models["small"].when_hard
    assert when is not None
    assert when.invalid_rate is not None
    theory = scenario.hardness.share * (1 - serving.error_rate - when.invalid_rate)
    se = math.sqrt(theory * (1 - theory) / len(first))
    assert abs(long_first - theory) <= Z * se, f"{long_first:.4f} vs {theory:.4f}"
    truncated = calls[calls["outcome"] == "truncated"]
    assert len(truncated) > 0
    assert (truncated["output_tokens"] == steps["summary"].max_tokens).all()


def hardness_orderings(result: sim.RunResult) -> None:
    """Speed won't fix a bad answer: race makes the very same three draws as redraw, so with
    no deadline binding it meets exactly the same requests (exact). Falling up to `big` beats
    re-drawing `small` by more than ORDER_Z paired standard errors."""
    redraw, race, fallup = (_ok(result, p) for p in ("redraw", "race", "fallup"))
    np.testing.assert_array_equal(race, redraw)
    d = fallup.astype(float) - redraw.astype(float)
    se = float(d.std(ddof=1)) / math.sqrt(len(d))
    assert d.mean() > ORDER_Z * se, f"fallup - redraw {d.mean():.4f} (paired SE {se:.4f})"


CHECKS: dict[str, tuple[Callable[[sim.RunResult], None], ...]] = {
    "hardness": (
        hardness_is_uncontended,
        hardness_hit_rates_closed_form,
        hardness_belongs_to_the_request,
        hardness_orderings,
    ),
}
