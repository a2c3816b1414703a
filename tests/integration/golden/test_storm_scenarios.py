"""Independent checks of the storm scenarios (issue 8), at their own size, and their must-show
claims.

test_bundled_scenarios.py records every bundled scenario's summary at the golden size; these
checks run retry-storm and tpm-saturation at the size they ship with (the golden 300 requests
end before retry-storm's burst) and hold them to laws that do not come from the code under test:
arrival counts per schedule segment against Poisson (4 SE), the token-bucket law, the gRPC
retry-budget bound, and the claims of the issue, with standard-error margins where they are
statistical. `STORM_CHECKS` is keyed by scenario stem like the golden suite's `INDEPENDENT`, so
the two can be merged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np
import pytest

import sim
from sim.analysis.timeseries import recovery
from sim.model.arrivals import bursts
from tests.helpers import REPO_ROOT

#: Half-width of statistical checks, in standard errors.
Z = 4.0


@cache
def _run(stem: str) -> sim.RunResult:
    """The scenario at its own size and seed, once per test process."""
    return sim.run(sim.load_scenario(REPO_ROOT / "scenarios" / f"{stem}.yaml"))


def _rate_se(result: sim.RunResult, policy: str) -> tuple[float, float]:
    ok = result.requests.loc[result.requests["policy"] == policy, "ok"]
    p = float(ok.mean())
    return p, math.sqrt(max(p * (1 - p), 1 / len(ok)) / len(ok))


# --------------------------------------------------------------------------- retry-storm


def storm_arrivals_follow_the_schedule(result: sim.RunResult) -> None:
    """First sends per schedule segment within Z SE of rate x length (Poisson counts)."""
    arrivals = result.scenario.arrivals
    first = result.requests[(result.requests["resend"] == 0)]
    times = first[first["policy"] == first["policy"].iloc[0]]["arrival_s"].to_numpy(float)
    clock = 0.0
    for segment in arrivals.segments or []:
        end = clock + segment.duration_s
        count = int(((times >= clock) & (times < end)).sum())
        expected = segment.rate_per_s * segment.duration_s
        assert abs(count - expected) < Z * math.sqrt(expected), (clock, count, expected)
        clock = end


def storm_outlives_the_burst_under_plain_retrying(result: sim.RunResult) -> None:
    """Plain retrying: customers re-send more than half as many runs again (amplification >
    1.5) and goodput one burst-length after the burst is still below half its pre-burst level."""
    summary = result.summary.set_index("policy")
    assert summary.loc["retry", "retry_amplification"] > 1.5
    level, after, back = recovery(result.timeseries, "retry", bursts(result.scenario.arrivals)[0])
    assert after < 0.5 * level, (level, after)
    assert back == math.inf


def best_load_aware_policy_recovers(result: sim.RunResult) -> None:
    """The best policy with controls is back within 10% of its pre-burst goodput one
    burst-length after the burst ends (and within that time)."""
    burst = bursts(result.scenario.arrivals)[0]
    length = burst[1] - burst[0]
    aware = [n for n, spec in result.scenario.policies.items() if spec.controls is not None]
    outcomes = {p: recovery(result.timeseries, p, burst) for p in aware}
    best = max(aware, key=lambda p: outcomes[p][1] / outcomes[p][0])
    level, after, back = outcomes[best]
    assert after >= 0.9 * level, outcomes
    assert back <= length, outcomes


def storm_budget_bounds_retries(result: sim.RunResult) -> None:
    """gRPC throttling's bound on the `budget` policy: retries < max_tokens / 2 + token_ratio x
    successful attempts, and far fewer retries than plain retrying sends."""
    spec = result.scenario.policies["budget"].controls
    assert spec is not None
    assert spec.retry_budget is not None
    calls = result.calls[result.calls["policy"] == "budget"]
    retries = int((calls["attempt"] > 0).sum())
    successes = int((calls["outcome"] == "ok").sum())
    budget = spec.retry_budget
    assert retries < budget.max_tokens / 2 + budget.token_ratio * successes
    plain = result.calls[result.calls["policy"] == "retry"]
    assert retries < 0.2 * int((plain["attempt"] > 0).sum())


# --------------------------------------------------------------------------- tpm-saturation


def blind_race_piles_on(result: sim.RunResult) -> None:
    """Blind race draws more 429s than cut and a hit rate lower by more than Z SE."""
    summary = result.summary.set_index("policy")
    assert (
        summary.loc["race", "rate_limited_per_request"]
        > summary.loc["cut", "rate_limited_per_request"] + 0.5
    )
    (race, se_race), (cut, se_cut) = _rate_se(result, "race"), _rate_se(result, "cut")
    assert cut - race > Z * math.hypot(se_race, se_cut), (cut, race)


def capped_race_keeps_up_with_cut(result: sim.RunResult) -> None:
    """Race with a hedge cap is at least as good as cut on hit rate within one standard error
    of the difference."""
    (capped, se_capped), (cut, se_cut) = _rate_se(result, "race_capped"), _rate_se(result, "cut")
    assert capped >= cut - math.hypot(se_capped, se_cut), (capped, cut)


def tpm_quota_is_never_exceeded(result: sim.RunResult) -> None:
    """The token-bucket law: over any interval [a, b] of call starts the provider admits at most
    TPM + TPM/60 (b - a) tokens (max over b of C(b) - rate t_b minus min over a <= b of
    C(a-) - rate t_a, C cumulative admitted tokens in start order); and from t = 0, at most
    the starting level (TPM when the bucket starts full, 0 when `start: steady`) + TPM/60 t.
    A call's tokens come from its step's input and output tokens in the scenario (the provider
    charges the output), not from the charge the code recorded (`quota_tokens`), so a quota
    that under-charges fails."""
    api = result.scenario.providers["api"]
    tpm = api.tpm
    assert tpm is not None
    assert api.charge == "output"
    asked = {s.id: s.input_tokens + s.output_tokens for s in result.scenario.workflow.steps}
    for policy, group in result.calls.groupby("policy", sort=False):
        admitted = group[group["outcome"] != "rate_limited"].sort_values("start_s", kind="stable")
        t = admitted["start_s"].to_numpy(float)
        amount = admitted["step"].map(asked).to_numpy(float)
        rate = tpm / 60.0
        after = np.cumsum(amount) - rate * t
        before = np.minimum.accumulate(np.cumsum(amount) - amount - rate * t)
        assert float((after - before).max()) <= tpm * (1 + 1e-9), policy
        level = tpm if api.start == "full" else 0.0
        assert float(after.max()) <= level + tpm * 1e-9, policy


STORM_CHECKS: dict[str, tuple[Callable[[sim.RunResult], None], ...]] = {
    "retry-storm": (
        storm_arrivals_follow_the_schedule,
        storm_outlives_the_burst_under_plain_retrying,
        best_load_aware_policy_recovers,
        storm_budget_bounds_retries,
    ),
    "tpm-saturation": (
        blind_race_piles_on,
        capped_race_keeps_up_with_cut,
        tpm_quota_is_never_exceeded,
    ),
}
CASES = [(stem, check) for stem, checks in STORM_CHECKS.items() for check in checks]


@pytest.mark.parametrize(
    ("stem", "check"), CASES, ids=[f"{stem}-{check.__name__}" for stem, check in CASES]
)
def test_storm_scenario_meets_check(stem: str, check: Callable[[sim.RunResult], None]) -> None:
    check(_run(stem))
