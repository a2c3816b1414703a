"""Theory checks: the simulator held to closed forms, each within ~4 standard errors.

Every check builds a scenario simple enough to have a closed form (a dict through
`scenario_from_dict`), runs it with `sim.run` at a fixed seed, and compares what it measured with
`sim.analysis.analytic`. The acceptance interval is theory +- `Z_TOLERANCE` standard errors, the
standard
error derived from the sample: binomial for rates, the asymptotic sqrt(q(1-q)/n)/f(x_q) for
quantiles, batch means for queue waits and occupancy (autocorrelated series). Invariants that hold
exactly (every race loser cancelled, cancelled calls billed in full) are compared exactly, up to
floating-point rounding.

`tailsim validate` prints these checks; tests/integration/validation runs the same ones, at the
same fixed seed, so both are deterministic. With another seed a correct simulator still fails a
row by chance now and then (measured: well under 1% of seeds, the queue-wait rows being the
likeliest, as their batch-means SE is itself skewed). The engine never imports this module.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from sim.analysis.analytic import (
    batch_means_se,
    binomial_se,
    chain_success,
    chain_success_with_retries,
    erlang_c,
    hedge_sf,
    littles_law_l,
    lognormal_sf,
    mmc_mean_in_system,
    mmc_mean_wait,
    quantile_from_sf,
    quantile_se,
    race_sf,
)
from sim.model.latency import lognormal_params
from sim.model.scenario import scenario_from_dict
from sim.plan import Plan, compile_scenario
from sim.study.result import RunResult
from sim.study.runner import run
from sim.study.validation_flow import workflow_rows

#: Simulated requests of the base check at the default size (others use a multiple of it).
DEFAULT_SIZE = 20_000
#: Smallest size accepted: below it the asymptotic standard errors are not to be trusted.
MIN_SIZE = 1_000
#: The fixed seed of `tailsim validate` and of the validation tests.
DEFAULT_SEED = 20_250_601
#: Half-width of every statistical acceptance interval, in standard errors.
Z_TOLERANCE = 4.0
#: Relative tolerance of the exact checks: floating-point rounding only.
EXACT_REL = 1e-9
#: A deadline no request meets in practice: "no deadline" (the format wants a finite number).
NO_DEADLINE_S = 1e9
#: Batches for batch-means standard errors (the classic 20 to 30).
BATCHES = 20
#: Share of the requests dropped as the warm-up of queueing checks (the system starts empty).
WARM_UP = 0.1

# The known latency law of the race and hedge checks: ttft lognormal (median 1 s, p99 5 s), then
# a constant generation of 100 tokens at 100 tokens/s, so a call takes exactly SHIFT + ttft.
TTFT_MEDIAN_S, TTFT_P99_S = 1.0, 5.0
GEN_TOKENS, GEN_TOKENS_PER_S = 100, 100.0
SHIFT_S = GEN_TOKENS / GEN_TOKENS_PER_S
HEDGE_AFTER_S = 1.5
QUANTILES = (0.5, 0.9, 0.99)

# Prices (USD per million tokens) and sizes of the billing check.
PRICE_IN, PRICE_OUT = 2.0, 8.0
BILL_INPUT_TOKENS = 1000


@dataclass(frozen=True)
class CheckResult:
    """One theory check: what theory says, what the simulator did, and the accepted interval."""

    name: str
    theory: float
    simulated: float
    lo: float
    hi: float
    passed: bool
    detail: str

    def describe(self) -> str:
        """One line for an assertion message: theory, simulated value and tolerance."""
        verdict = "pass" if self.passed else "FAIL"
        return (
            f"{self.name}: {verdict}: theory {self.theory:.6g}, simulated {self.simulated:.6g}, "
            f"accepted [{self.lo:.6g}, {self.hi:.6g}] ({self.detail})"
        )


# --------------------------------------------------------------------------- result builders


def _within(name: str, theory: float, simulated: float, se: float, detail: str) -> CheckResult:
    """A statistical check: pass when `simulated` is within Z_TOLERANCE standard errors."""
    lo, hi = theory - Z_TOLERANCE * se, theory + Z_TOLERANCE * se
    passed = bool(lo <= simulated <= hi)
    return CheckResult(
        name, theory, simulated, lo, hi, passed, f"{detail}; +-{Z_TOLERANCE:g} SE, SE={se:.3g}"
    )


def _exact(name: str, theory: float, simulated: float, detail: str) -> CheckResult:
    """An exact invariant: pass when `simulated` equals `theory` up to rounding."""
    slack = EXACT_REL * max(1.0, abs(theory))
    lo, hi = theory - slack, theory + slack
    passed = bool(lo <= simulated <= hi)
    return CheckResult(name, theory, simulated, lo, hi, passed, f"{detail}; exact invariant")


# --------------------------------------------------------------------------- scenario builders


def _sub_seed(seed: int, check: str) -> int:
    """A seed per check, so checks are independent of each other yet fixed by `seed`."""
    return (seed * 1_000_003 + zlib.crc32(check.encode("utf-8"))) % (2**31)


def _serving(ttft: dict[str, Any], *, tokens_per_s: float, **rates: float) -> dict[str, Any]:
    """A serving spec with a constant generation speed (so generation time is known exactly)."""
    return {"ttft_s": ttft, "tokens_per_s": {"dist": "constant", "value": tokens_per_s}, **rates}


def _chain(n: int, input_tokens: int, output_tokens: int) -> list[dict[str, Any]]:
    """n sequential steps s1 -> s2 -> ... on model m."""
    return [
        {
            "id": f"s{i + 1}",
            "model": "m",
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "after": [f"s{i}"] if i else [],
        }
        for i in range(n)
    ]


def _scenario(
    name: str,
    serving: dict[str, Any],
    steps: list[dict[str, Any]],
    policies: dict[str, dict[str, Any]],
    *,
    concurrency: int | None = None,
    rate_per_s: float = 1.0,
    deadline_s: float = NO_DEADLINE_S,
    billing: str = "full",
) -> Plan:
    """One provider `p` serving one model `m`: the shape of every theory check, compiled."""
    provider: dict[str, Any] = {"serves": {"m": serving}}
    if concurrency is not None:
        provider["concurrency"] = concurrency
    data = {
        "name": name,
        "deadline_s": deadline_s,
        "arrivals": {"kind": "poisson", "rate_per_s": rate_per_s},
        "models": {"m": {"price_per_mtok": {"input": PRICE_IN, "output": PRICE_OUT}}},
        "providers": {"p": provider},
        "workflow": {"steps": steps},
        "policies": policies,
        "billing": {"cancelled": billing},
    }
    return compile_scenario(scenario_from_dict(data, source=f"<validation:{name}>"))


def _known_latency_serving() -> dict[str, Any]:
    """Lognormal ttft, constant generation, no stall, no errors: a call takes SHIFT_S + ttft."""
    return _serving({"median": TTFT_MEDIAN_S, "p99": TTFT_P99_S}, tokens_per_s=GEN_TOKENS_PER_S)


def _call_sf(t: np.ndarray | float) -> np.ndarray:
    """Survival of one call's latency SHIFT_S + ttft on the uncontended provider."""
    mu, sigma = lognormal_params(TTFT_MEDIAN_S, TTFT_P99_S)
    return np.asarray(lognormal_sf(mu, sigma, np.asarray(t, dtype=float) - SHIFT_S))


def _race_latency_sf(k: int) -> Callable[[float], float]:
    """Survival of the fastest of k independent calls started together: S(t)^k."""

    def sf(t: float) -> float:
        """P(a race of k takes longer than t)."""
        return float(race_sf(_call_sf, t, k))

    return sf


def _hedge_latency_sf(t: float) -> float:
    """P(a hedge fired HEDGE_AFTER_S after the first call takes longer than t): S(t)S(t-d)."""
    return float(hedge_sf(_call_sf, t, HEDGE_AFTER_S))


# --------------------------------------------------------------------------- quantile helpers


def _density(sf: Callable[[float], float], x: float) -> float:
    """The density -d sf/dx at x, by a central difference (for the quantile standard error)."""
    h = 1e-5 * max(1.0, abs(x))
    return (sf(x - h) - sf(x + h)) / (2.0 * h)


def _quantile_checks(
    label: str, sample: np.ndarray, sf: Callable[[float], float], detail: str
) -> list[CheckResult]:
    """Sample quantiles against the quantiles of the exact survival `sf`."""
    n = len(sample)
    results = []
    for q in QUANTILES:
        x = quantile_from_sf(sf, q)
        se = quantile_se(_density(sf, x), q, n)
        simulated = float(np.quantile(sample, q))
        name = f"{label} p{round(q * 100)}"
        results.append(_within(name, x, simulated, se, f"{detail}, n={n}"))
    return results


# --------------------------------------------------------------------------- the checks


def check_chain(size: int, seed: int) -> list[CheckResult]:
    """n=5 sequential steps failing with e=0.1 (errors + invalid answers): hit rate (1-e)^n,
    and with one retry per step (1-e^2)^n (no deadline, so only the outcome draws matter)."""
    steps, error, invalid = 5, 0.06, 0.04
    e = error + invalid
    serving = _serving(
        {"dist": "constant", "value": 0.5},
        tokens_per_s=1000.0,
        error_rate=error,
        invalid_rate=invalid,
    )
    policies = {"no_retry": {"kind": "wait"}, "one_retry": {"kind": "wait", "retries": 1}}
    scenario = _scenario("chain", serving, _chain(steps, 500, 100), policies)
    n = max(size // 2, 100)
    result = run(scenario, requests=n, seed=_sub_seed(seed, "chain"))
    ok = result.requests.groupby("policy", sort=False)["ok"].mean()
    theory = {
        "no_retry": chain_success(1 - e, steps),
        "one_retry": chain_success_with_retries(1 - e, steps, 1),
    }
    label = {"no_retry": "chain hit rate (1-e)^n", "one_retry": "chain hit rate (1-e^2)^n"}
    return [
        _within(
            label[p],
            theory[p],
            float(ok[p]),
            binomial_se(theory[p], n),
            f"n={steps} steps, e={e:g}, {n} requests, binomial SE at the theory's rate",
        )
        for p in ("no_retry", "one_retry")
    ]


def check_race_quantiles(size: int, seed: int) -> list[CheckResult]:
    """A race of k on an uncontended provider: request latency quantiles of S(t)^k, k=2 and 3."""
    steps = _chain(1, 1000, GEN_TOKENS)
    policies = {f"race{k}": {"kind": "race", "attempts": k} for k in (2, 3)}
    scenario = _scenario("race", _known_latency_serving(), steps, policies)
    n = max(size, 100)
    result = run(scenario, requests=n, seed=_sub_seed(seed, "race"))
    results = []
    for k in (2, 3):
        latency = result.requests.loc[result.requests["policy"] == f"race{k}", "latency_s"]
        results += _quantile_checks(
            f"race k={k}", latency.to_numpy(float), _race_latency_sf(k), "S(t)^k, quantile SE"
        )
    return results


def check_hedge_quantiles(size: int, seed: int) -> list[CheckResult]:
    """A hedge fired d after the first call (uncontended): latency quantiles of S(t)S(t-d)."""
    steps = _chain(1, 1000, GEN_TOKENS)
    policies = {"hedge": {"kind": "hedge", "after": HEDGE_AFTER_S}}
    scenario = _scenario("hedge", _known_latency_serving(), steps, policies)
    n = max(size, 100)
    result = run(scenario, requests=n, seed=_sub_seed(seed, "hedge"))
    return _quantile_checks(
        f"hedge d={HEDGE_AFTER_S:g}s",
        result.requests["latency_s"].to_numpy(float),
        _hedge_latency_sf,
        "S(t)S(t-d), quantile SE",
    )


def check_erlang_c(size: int, seed: int) -> list[CheckResult]:
    """M/M/c: exponential service, Poisson arrivals, c slots: the Erlang C mean queue wait,
    probability of waiting and mean number in system L (time-averaged over the event trace) at
    utilisation 0.5 and 0.8 (batch-means SE, warm-up dropped)."""
    c, mu = 4, 1.0
    serving = _serving({"dist": "exponential", "mean": 1.0 / mu}, tokens_per_s=1e12)
    steps = _chain(1, 0, 1)  # generation 1e-12 s: service is the exponential ttft
    results = []
    # (rho, requests per unit of size, floor): queue waits are skewed and autocorrelated, so
    # the batch-means SE is only trusted on long runs; these never shrink below the default
    for rho, factor, floor in ((0.5, 1, DEFAULT_SIZE), (0.8, 5, 5 * DEFAULT_SIZE)):
        lam = rho * c * mu
        scenario = _scenario(
            f"mmc-{rho:g}",
            serving,
            steps,
            {"wait": {"kind": "wait"}},
            concurrency=c,
            rate_per_s=lam,
        )
        n = max(size * factor, floor)
        result = run(scenario, requests=n, seed=_sub_seed(seed, f"erlang-{rho:g}"))
        calls = result.calls.sort_values("start_s", kind="stable")
        waits = calls["queue_s"].to_numpy(float)[int(WARM_UP * n) :]
        detail = f"c={c}, lambda={lam:g}, mu={mu:g}, {len(waits)} calls after warm-up"
        results.append(
            _within(
                f"M/M/c Wq rho={rho:g}",
                mmc_mean_wait(c, lam, mu),
                float(waits.mean()),
                batch_means_se(waits, BATCHES),
                f"Erlang C mean wait, {detail}, batch-means SE",
            )
        )
        waited = (waits > 0).astype(float)
        results.append(
            _within(
                f"M/M/c P(wait) rho={rho:g}",
                erlang_c(c, lam, mu),
                float(waited.mean()),
                batch_means_se(waited, BATCHES),
                f"Erlang C, {detail}, batch-means SE",
            )
        )
        runs = result.requests
        arrive = runs["arrival_s"].to_numpy(float)
        t0, t1 = float(np.quantile(arrive, WARM_UP)), float(arrive.max())
        in_system, se = _time_average_in_system(arrive, runs["end_s"].to_numpy(float), t0, t1)
        results.append(
            _within(
                f"M/M/c L rho={rho:g}",
                mmc_mean_in_system(c, lam, mu),
                in_system,
                se,
                f"Erlang C L = lambda (Wq + 1/mu), time average of requests in the system over "
                f"{t1 - t0:.0f} s of the trace, c={c}, batch-means SE over {BATCHES} windows",
            )
        )
    return results


def _time_average_in_system(
    arrive: np.ndarray, leave: np.ndarray, t0: float, t1: float
) -> tuple[float, float]:
    """The time-average number of requests in the system over [t0, t1], measured from the event
    trace (each request is in the system from its arrival to its end), and its batch-means SE.

    Each request adds its overlap with a window to that window's area, so the average is exact
    (no sampling grid). The count is autocorrelated over about one time in system, far shorter
    than a window, so the window means are near independent: their spread gives the SE."""
    edges = np.linspace(t0, t1, BATCHES + 1)
    lo, hi = edges[:-1], edges[1:]
    overlap = np.clip(
        np.minimum(leave[:, None], hi[None, :]) - np.maximum(arrive[:, None], lo[None, :]),
        0.0,
        None,
    )
    per_window = overlap.sum(axis=0) / (hi - lo)
    return float(per_window.mean()), float(np.std(per_window, ddof=1) / math.sqrt(BATCHES))


def check_littles_law(size: int, seed: int) -> list[CheckResult]:
    """L = lambda W with W from theory, not from the simulation: Poisson arrivals on an
    uncontended provider (M/G/infinity), each request one call of the known latency law, so
    its mean time in system is W = SHIFT_S + E[ttft] (lognormal mean) exactly. L is measured
    by time-averaging the number of requests in the system over the event trace (arrival to
    end), warm-up dropped. Anything that changes how long a call holds the system (generation
    time, first token, a queue that should not be there) moves L away from lambda W."""
    lam = 2.0
    scenario = _scenario(
        "little",
        _known_latency_serving(),
        _chain(1, 1000, GEN_TOKENS),
        {"wait": {"kind": "wait"}},
        rate_per_s=lam,
    )
    n = max(size, 1000)
    result = run(scenario, requests=n, seed=_sub_seed(seed, "little"))
    runs = result.requests
    arrive = runs["arrival_s"].to_numpy(float)
    leave = runs["end_s"].to_numpy(float)
    t0, t1 = float(np.quantile(arrive, WARM_UP)), float(arrive.max())
    measured, se = _time_average_in_system(arrive, leave, t0, t1)
    mu, sigma = lognormal_params(TTFT_MEDIAN_S, TTFT_P99_S)
    w = SHIFT_S + math.exp(mu + sigma**2 / 2)
    detail = (
        f"M/G/inf, lambda={lam:g}/s, W = {SHIFT_S:g} s generation + lognormal ttft mean = "
        f"{w:.4g} s; L time-averaged over {t1 - t0:.0f} s of the trace; batch-means SE over "
        f"{BATCHES} windows"
    )
    return [_within("Little L = lambda W (M/G/inf)", littles_law_l(lam, w), measured, se, detail)]


@lru_cache(maxsize=2)
def _race_two_steps(size: int, seed: int) -> tuple[RunResult, int]:
    """A two-step workflow raced 2-wide on an uncontended provider, billing cancelled calls in
    full; the first step's losers can only be cancelled by the race itself, not by the
    request ending."""
    k = 2
    scenario = _scenario(
        "race-cancel",
        _known_latency_serving(),
        _chain(2, BILL_INPUT_TOKENS, GEN_TOKENS),
        {"race": {"kind": "race", "attempts": k}},
        billing="full",
    )
    return run(scenario, requests=max(size // 4, 100), seed=_sub_seed(seed, "race-cancel")), k


def check_race_cancellation(size: int, seed: int) -> list[CheckResult]:
    """Every loser of a won race ends 'cancelled' at the winner's end time (exact)."""
    result, _ = _race_two_steps(size, seed)
    calls = result.calls
    keys = ["request_id", "resend", "step"]
    ok = calls[calls["outcome"] == "ok"]
    won_at = ok.groupby(keys)["end_s"].min().rename("won_at")
    merged = calls.join(won_at, on=keys)
    first_ok = merged["outcome"].eq("ok") & merged["end_s"].eq(merged["won_at"])
    winners = merged[first_ok].drop_duplicates(keys)
    losers = merged.drop(winners.index)
    losers = losers[losers["won_at"].notna()]
    good = losers["outcome"].eq("cancelled") & np.isclose(
        losers["end_s"], losers["won_at"], rtol=0, atol=1e-9
    )
    share = float(good.mean()) if len(losers) else math.nan
    by_step = ", ".join(
        f"{step}: {float(g.mean()):.3f}" for step, g in good.groupby(losers["step"], sort=True)
    )
    detail = (
        f"{len(losers)} losers of won races; share cancelled at the winner's end by step {by_step}"
    )
    return [_exact("race losers cancelled at win", 1.0, share, detail)]


def check_race_billing(size: int, seed: int) -> list[CheckResult]:
    """With billing 'full', a race of k bills every attempt's whole answer: cost per request is
    steps x k x (input x price_in + output x price_out) exactly."""
    result, k = _race_two_steps(size, seed)
    steps = result.plan.workflow.steps
    per_call = (BILL_INPUT_TOKENS * PRICE_IN + GEN_TOKENS * PRICE_OUT) / 1e6
    theory = len(steps) * k * per_call
    cost = result.requests["cost_usd"].mean()
    cancelled = result.calls[result.calls["outcome"] == "cancelled"]
    full = (
        cancelled["input_tokens"].eq(BILL_INPUT_TOKENS) & cancelled["output_tokens"].eq(GEN_TOKENS)
    ).mean()
    detail = (
        f"{len(steps)} steps x k={k} x ${per_call:.6f}; billed tokens of cancelled calls equal "
        f"the full answer in {float(full):.1%} of {len(cancelled)}"
    )
    return [_exact("race cost, billing full ($/req)", theory, float(cost), detail)]


def check_workflow_keys(size: int, seed: int) -> list[CheckResult]:
    """The workflow keys against their closed forms (`sim.study.validation_flow`): a `when`
    branch's mixture, repeat's 1 - r^K, loops' E[q^N], maps' order statistics."""
    return [_within(*row) for row in workflow_rows(size, seed)]


#: Every check, in the order `tailsim validate` prints them.
CHECKS: tuple[Callable[[int, int], list[CheckResult]], ...] = (
    check_chain,
    check_race_quantiles,
    check_hedge_quantiles,
    check_erlang_c,
    check_littles_law,
    check_race_cancellation,
    check_race_billing,
    check_workflow_keys,
)


def run_checks(size: int = DEFAULT_SIZE, seed: int = DEFAULT_SEED) -> list[CheckResult]:
    """Run every theory check at `size` requests (scaled per check) and `seed`."""
    if size < MIN_SIZE:
        raise ValueError(f"size must be >= {MIN_SIZE} for the asymptotic SEs to hold, got {size}")
    return [result for check in CHECKS for result in check(size, seed)]
