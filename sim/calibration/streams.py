"""Where a serving path's stalls sit in the stream, and how often its answers break mid-stream.

A log with first-token and total times tells the two places apart: a stall before the first
token makes a long first token (the first-token time is a lognormal plus, with probability
p_before, a lognormal stall), a stall mid-stream a long generation at a normal first token (the
generation mixture `sim.calibration.marginals.fit_stall_mixture` already fits, p_mid). Each place
is tested on its own with the generation fit's own test, BIC: the stall component at that place
is claimed only where 2 dlogL > 3 ln(n) (3 parameters more than the plain lognormal). Both
claimed: a mixture, `{before_first_token: S}` with S = p_before / (p_before + p_mid) and its
delta-method SE; only the first token's: `before_first_token`; otherwise the default,
`mid_stream`, and nothing is written (so fits of logs without such stalls do not change by a
byte). The BIC threshold grows with n (at n = 2,000 it is 2 dlogL > 22.8), where a fixed-level
test would claim a stall in every large log whose first token is slightly heavier-tailed than
a lognormal; a first-token stall is also claimed only on `MIN_CALLS` first tokens and where it
is a lump beyond the body (`MIN_STALLED`). Its false-positive rate on plain lognormal first
tokens is measured in tests/calibration/test_fit_streams.py (at most 1 claim in 20 seeded logs
of 1,000 first tokens).

`mid_stream_error_rate` is the share of answers that broke after their first token (status
`broken`) among those that were served a stream to the end or broke: broken / (ok + broken),
binomial SE; written only where a log holds a broken call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from sim.calibration.marginals import (
    LogNormalFit,
    MarginalFit,
    StallMixture,
    _round,
    fit_stall_mixture,
)

#: A first-token stall is tested on at least this many first-token times: below it a stall
#: component cannot be told from a heavier-tailed first token (the bundled thefastest.ai log's
#: groups, 23 to 95 calls each, would all claim one), so nothing is claimed.
MIN_CALLS = 200
#: ... and claimed only where it is a lump beyond the body, as tailsim's stall is: its median at
#: or above the first token's p99, and at least this many calls expected to hold one (p * n).
MIN_STALLED = 5


@dataclass(frozen=True)
class StallPlacement:
    """The two places' stall components, each with its test, and what they say together."""

    before: StallMixture  # the first-token time's mixture (speed: 1 / first token)
    mid: StallMixture  # the generation mixture of the fit
    where: str  # "mid_stream", "before_first_token" or "mixed"
    share: float  # S: the share of stalls before the first token
    se_share: float

    def key(self) -> str | dict[str, float]:
        """`stall.where` as the scenario takes it."""
        if self.where == "mixed":
            return {"before_first_token": _round(self.share)}
        return self.where

    def evidence(self) -> str:
        """The tests, as the fit's header and table state them."""
        claim = {"mixed": "a mixture", "before_first_token": "before the first token"}
        said = claim.get(self.where, "mid-stream (the default)")
        text = (
            f"placement: before first token {self.before.evidence}; mid-stream "
            f"{self.mid.evidence}; each claimed where 2*dlogL > 3*ln(n): {said}"
        )
        if self.where == "mixed":
            text += f", share before S {self.share:.3g} (SE {self.se_share:.2g})"
        return text


def first_token_times(calls: pd.DataFrame) -> np.ndarray:
    """The first-token times the placement test reads: ok, error, invalid and broken calls'
    `ttft_s` (an error's or junk's latency where it has none), as `fit_group` takes them."""
    status = calls["status"].fillna("ok").astype(str)
    first = calls.loc[status.isin(["ok", "invalid", "error"]), ["ttft_s", "latency_s"]]
    times = first["ttft_s"].fillna(first["latency_s"]).to_numpy(float)
    broken = calls.loc[status == "broken", "ttft_s"].to_numpy(float)
    times = np.concatenate([times, broken])
    return times[np.isfinite(times) & (times > 0)]


def _share(before: StallMixture, mid: StallMixture) -> tuple[float, float]:
    """S = p_b / (p_b + p_m) and its delta-method SE (the two fits on disjoint data)."""
    total = before.probability + mid.probability
    if total <= 0:
        return 0.0, 0.0
    share = before.probability / total
    grad_b, grad_m = mid.probability / total**2, -before.probability / total**2
    se = math.hypot(grad_b * before.se_probability, grad_m * mid.se_probability)
    return share, se


def place_stalls(times: np.ndarray, mid: StallMixture) -> StallPlacement:
    """Test a stall component in the first-token `times` (BIC, as the generation mixture
    `mid` was tested) and say where the stalls sit."""
    n = len(times)
    if n >= MIN_CALLS:
        before = fit_stall_mixture(times, np.ones(n))
    else:
        why = f"n={n} < {MIN_CALLS}"
        before = StallMixture(mid.speed, 0.0, 0.0, None, 0.0, 0.0, why, False)
    b = before.supported and before.extra is not None
    if b and before.extra is not None:
        body_p99 = _first_token_body(before).p99
        lump = before.extra.median >= body_p99 and before.probability * n >= MIN_STALLED
        if not lump:
            b = False
            before = replace(
                before,
                evidence=f"{before.evidence}; not a lump beyond the body (stall median "
                f"{before.extra.median:.3g} s vs first-token p99 {body_p99:.3g} s, "
                f"{before.probability * n:.1f} calls stalled; needs >= p99 and >= {MIN_STALLED})",
            )
    m = mid.supported and mid.extra is not None
    where = "mixed" if b and m else "before_first_token" if b else "mid_stream"
    share, se = _share(before, mid) if where == "mixed" else (float(b), 0.0)
    return StallPlacement(before, mid, where, share, se)


def _first_token_body(before: StallMixture) -> LogNormalFit:
    """The first token without its stalls: LN(-mu, sigma) of the mixture's 1 / time."""
    body = before.speed
    (a, b), (_, d) = body.cov
    return LogNormalFit(-body.mu, body.sigma, ((a, -b), (-b, d)), body.n)


def _placed(fit: MarginalFit, placement: StallPlacement) -> MarginalFit:
    """`fit` with the first token's stalls taken out of its first token and into its stall."""
    before, mid = placement.before, placement.mid
    assert before.extra is not None
    both = placement.where == "mixed"
    p = before.probability + (mid.probability if both else 0.0)
    se = math.hypot(before.se_probability, mid.se_probability if both else 0.0)
    # one stall law at both places: the one of the place with more stalls
    extra = mid.extra if both and mid.probability > before.probability else before.extra
    stall = StallMixture(
        mid.speed,
        p,
        se,
        extra,
        mid.loglik + before.loglik,
        mid.loglik_no_stall + before.loglik_no_stall,
        placement.evidence(),
        True,
    )
    note = (
        f"stalls placed {placement.where.replace('_', ' ')}: first token fitted as a "
        f"lognormal plus a stall (p {before.probability:.3g}, SE {before.se_probability:.2g})"
    )
    if both:
        note += (
            f", generation's stall p {mid.probability:.3g} (SE {mid.se_probability:.2g}); one "
            "stall law for both places, the one of the place with more stalls"
        )
    return replace(fit, ttft=_first_token_body(before), stall=stall, notes=[*fit.notes, note])


def mid_stream_errors(calls: pd.DataFrame) -> tuple[int, float, float]:
    """(broken calls, broken / (ok + broken), its binomial SE)."""
    status = calls["status"].fillna("ok").astype(str)
    broken, ok = int((status == "broken").sum()), int((status == "ok").sum())
    if broken == 0:
        return 0, 0.0, 0.0
    rate = broken / (ok + broken)
    return broken, rate, math.sqrt(rate * (1 - rate) / (ok + broken))


def fit_streams(fit: MarginalFit, calls: pd.DataFrame) -> MarginalFit:
    """`fit` (of `calls`) with its stalls placed and its mid-stream error rate, kept in
    `fit.stream` (`{block, se}`) only where they differ from the defaults."""
    block: dict[str, Any] = {}
    se: dict[str, Any] = {}
    if fit.mode == "first_token":
        placement = place_stalls(first_token_times(calls), fit.stall)
        if placement.where != "mid_stream":
            fit = _placed(fit, placement)
            block["stall"] = {"where": placement.key()}
            if placement.where == "mixed":
                se["stall"] = {"where.before_first_token": _round(placement.se_share)}
    broken, rate, se_rate = mid_stream_errors(calls)
    if broken:
        block["mid_stream_error_rate"] = _round(rate)
        se["mid_stream_error_rate"] = _round(se_rate)
        note = (
            f"{broken} broken calls (a stream that ended after its first token): "
            f"mid_stream_error_rate = broken / (ok + broken) {rate:.3g} (SE {se_rate:.2g})"
        )
        fit = replace(fit, notes=[*fit.notes, note])
    return replace(fit, stream={"block": block, "se": se}) if block else fit


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


def stream_block(fit: MarginalFit, block: dict[str, Any]) -> dict[str, Any]:
    """The serving `block` with `fit`'s stream keys (`stall.where`, `mid_stream_error_rate`)
    where it has any; `block` itself otherwise."""
    if not fit.stream:
        return block
    extra = fit.stream["block"]
    if "stall" not in block:  # no stall left to place (an empirical fit replays the calls)
        extra = {k: v for k, v in extra.items() if k != "stall"}
    return _merged(block, extra)


def placement_label(fit: MarginalFit) -> str:
    """`, before first token` / `, S before first token` for the report table's stall
    column where the stalls were placed ('' at the default)."""
    where = fit.stream.get("block", {}).get("stall", {}).get("where") if fit.stream else None
    if where is None or not fit.stall.supported:
        return ""
    if isinstance(where, dict):
        return f", {where['before_first_token']:.2f} before first token"
    return ", before first token"


def stream_errors(fit: MarginalFit, ses: dict[str, Any]) -> dict[str, Any]:
    """The standard errors `ses` with those of `fit`'s stream keys."""
    return _merged(ses, fit.stream["se"]) if fit.stream else ses
