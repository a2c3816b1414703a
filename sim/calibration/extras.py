"""What a call log says beyond each group's marginal laws: bad spells, per-request hardness,
load dependence, client overhead, and the arrival process (docs/fitting-extras.md).

Each extra is fitted by a stated method and reported with the test that decides whether the data
support it over the simpler model (`ExtraFit.supported`, `ExtraFit.evidence`). Residuals are
log latency minus the expected log latency of the call's (provider, model): from the marginal
fit's medians (`base`: log(ttft median + output_tokens / tokens_per_s median)) where given,
else the group's own median (after a least-squares line on log(1 + output_tokens) when output
sizes vary)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from sim.calibration.arrivals import fit_arrivals as _fit_arrivals
from sim.calibration.episodes import fit_spells, spell_probability
from sim.calibration.hardness import HardnessFit, fit_hardness, request_effects
from sim.calibration.load import fit_load
from sim.calibration.overhead import fit_overhead


@dataclass(frozen=True)
class ExtraFit:
    """One extra: its scenario block, SEs, the test stated, and where the block goes."""

    name: str  # "episodes" | "difficulty" | "slowdown" | "overhead_s" | "arrivals"
    supported: bool
    block: dict
    standard_errors: dict
    evidence: str
    where: str
    #: Per call (the log's index), the posterior probability of a spell (episodes only).
    detail: pd.Series | None = field(default=None, compare=False, repr=False)


def _median_of(spec: object) -> float | None:
    """The median of a {median, p99} block, or of a plain number."""
    if isinstance(spec, dict) and "median" in spec:
        return float(spec["median"])
    if isinstance(spec, int | float):
        return float(spec)
    return None


def residuals(calls: pd.DataFrame, base: dict[tuple[str, str], dict] | None = None) -> pd.Series:
    """log latency_s minus its expected value per (provider, model), for ok calls with a
    positive latency (NaN elsewhere)."""
    out = pd.Series(np.nan, index=calls.index, dtype=float)
    ok = (calls["status"] == "ok") & (calls["latency_s"] > 0)
    for (provider, model), part in calls[ok].groupby(["provider", "model"], sort=False):
        y = np.log(part["latency_s"].to_numpy(float))
        tokens = part["output_tokens"].to_numpy(float)
        block = (base or {}).get((str(provider), str(model)), {})
        ttft, speed = _median_of(block.get("ttft_s")), _median_of(block.get("tokens_per_s"))
        if ttft is not None and speed is not None and not np.isnan(tokens).any():
            out[part.index] = y - np.log(ttft + tokens / speed)
            continue
        x = np.log1p(np.nan_to_num(tokens))
        if np.ptp(x) > 0.1 and len(y) > 10:
            slope, intercept = np.polyfit(x, y, 1)
            fitted = intercept + slope * x
            out[part.index] = y - fitted - float(np.median(y - fitted))
        else:
            out[part.index] = y - float(np.median(y))
    return out


def fit_extras(
    calls: pd.DataFrame,
    base: dict[tuple[str, str], dict] | None = None,
    concurrency: float | None = None,
) -> list[ExtraFit]:
    """Every extra the log allows: spells, load and overhead per provider, difficulty over
    requests, arrivals from the first call of each request (or every call)."""
    with threadpool_limits(1):  # small optimisations: BLAS threads only cost (fit_episodes)
        return _fit_extras(calls, base, concurrency)


def _fit_extras(
    calls: pd.DataFrame, base: dict[tuple[str, str], dict] | None, concurrency: float | None
) -> list[ExtraFit]:
    """`fit_extras`' work."""
    r = residuals(calls, base)
    usable = r.notna()
    has_requests = "request_id" in calls and bool(calls["request_id"].notna().any())
    if has_requests:
        # the drain after the last request arrived holds only slow requests' late calls (a
        # finite log's edge, not a spell): spells and load are fitted before it
        last_arrival = calls.groupby("request_id")["start_s"].min().max()
        usable &= calls["start_s"] <= last_arrival
    fits: list[ExtraFit] = []
    spell_r = r
    first: dict[str, ExtraFit] = {}
    if has_requests:
        # a hard request's calls are close in time, so its effect reads as a short spell, and
        # a spell's calls share requests: backfit. Spells first, then the request effect on
        # residuals without the spells, then the spells again without the request effects.
        ids = calls.loc[usable, "request_id"]
        first = {
            p: episodes_fit(part, r[part.index], str(p)) for p, part in _by_provider(calls, usable)
        }
        despelled = r[usable].copy()
        for spells in first.values():
            if spells.supported and spells.detail is not None:
                d = math.log(spells.block["slowdown"])
                despelled[spells.detail.index] -= spells.detail * d
        # a request with a cut call (deadline, race loser) has the calls its own latencies left
        # it: its mean residual is selected high. Left out of the ANOVA (a test that can then
        # only err low); its calls still get their request's effect below
        cut = calls.loc[calls["status"] == "timeout", "request_id"].dropna().unique()
        whole = ~ids.isin(cut).to_numpy()
        hardness = fit_hardness(ids[whole], despelled.to_numpy(float)[whole])
        if len(cut):
            hardness = replace(
                hardness,
                evidence=f"{hardness.evidence}; {len(cut)} requests with a cut call left out",
            )
        fits.append(difficulty_extra(hardness))
        if hardness.supported:  # else the first pass stands
            spell_r = r.copy()
            spell_r[usable] = r[usable] - request_effects(ids, despelled.to_numpy(float), hardness)
            first = {}
    for provider, part in _by_provider(calls, usable):
        spells = first.get(provider) or episodes_fit(part, spell_r[part.index], str(provider))
        fits.append(spells)
        # calls likely in a spell are left out of the load curve: a spell also keeps more calls
        # in flight (they last longer), which would read as load dependence
        quiet = part if spells.detail is None else part[spells.detail.to_numpy() < 0.5]
        fits.append(load_fit(quiet, spell_r[quiet.index], str(provider), concurrency))
        if "server_latency_s" in calls:
            extra = overhead_fit(calls[calls["provider"] == provider], str(provider))
            if extra is not None:
                fits.append(extra)
    fits.append(arrivals_fit(calls))
    return fits


def _by_provider(calls: pd.DataFrame, usable: pd.Series) -> list[tuple[str, pd.DataFrame]]:
    """The usable calls of each provider, providers in name order."""
    return [(str(p), part) for p, part in calls[usable].groupby("provider", sort=True)]


def episodes_fit(part: pd.DataFrame, residual: pd.Series, provider: str) -> ExtraFit:
    """Bad spells of one provider (`sim.calibration.episodes`)."""
    start = part["start_s"].to_numpy(float)
    fit = fit_spells(start, residual.to_numpy(float))
    block = {"every_s": fit.every_s, "last_s": fit.last_s, "slowdown": fit.slowdown}
    detail = pd.Series(spell_probability(start, residual.to_numpy(float), fit), index=part.index)
    return ExtraFit(
        "episodes",
        fit.supported,
        block,
        fit.standard_errors,
        fit.evidence,
        f"providers.{provider}.episodes",
        detail,
    )


def load_fit(
    part: pd.DataFrame, residual: pd.Series, provider: str, concurrency: float | None
) -> ExtraFit:
    """The load curve of one provider (`sim.calibration.load`)."""
    fit = fit_load(
        part["start_s"].to_numpy(float),
        part["latency_s"].to_numpy(float),
        residual.to_numpy(float),
        concurrency,
    )
    return ExtraFit(
        "slowdown",
        fit.supported,
        {"a": fit.a, "k": fit.k},
        fit.standard_errors,
        fit.evidence,
        f"providers.{provider}.slowdown",
    )


def overhead_fit(part: pd.DataFrame, provider: str) -> ExtraFit | None:
    """The client overhead of one provider's calls (`sim.calibration.overhead`), if logged."""
    fit = fit_overhead(part["latency_s"].to_numpy(float), part["server_latency_s"].to_numpy(float))
    if fit is None:
        return None
    return ExtraFit(
        "overhead_s",
        fit.n > 0,
        fit.block,
        fit.standard_errors,
        fit.evidence,
        f"providers.{provider}.overhead_s",
    )


def difficulty_extra(fit: HardnessFit) -> ExtraFit:
    """The per-request difficulty (`sim.calibration.hardness`) as an extra."""
    return ExtraFit(
        "difficulty",
        fit.supported,
        {"median": 1.0, "p99": fit.p99},
        {"p99": fit.p99_se, "share": fit.share_se},
        fit.evidence,
        "difficulty",
    )


def arrivals_fit(calls: pd.DataFrame) -> ExtraFit:
    """Arrivals from the first call of each request (every call without request ids)."""
    if "request_id" in calls and calls["request_id"].notna().all():
        start = calls.groupby("request_id")["start_s"].min().to_numpy(float)
    else:
        start = calls["start_s"].to_numpy(float)
    return fit_arrivals(start)


def fit_arrivals(start_s: np.ndarray) -> ExtraFit:
    """Poisson or bursty arrivals from start timestamps (`sim.calibration.arrivals`)."""
    fit = _fit_arrivals(np.asarray(start_s, float))
    return ExtraFit(
        "arrivals", fit.supported, fit.block, fit.standard_errors, fit.evidence, "arrivals"
    )


def nan_free(block: dict) -> bool:
    """True if no value of the block is NaN (a block fit to paste)."""
    return not any(isinstance(v, float) and math.isnan(v) for v in block.values())
