"""Importance sampling of a call's uniforms: a tilted proposal and its likelihood ratios.

A `Tilt` moves the primitive inputs of chosen call slots (step, attempt) towards a rare event:
the lognormal columns (first token, generation speed, stall length) by a mean shift of
z = Phi^-1(u) (z ~ N(theta, 1) instead of N(0, 1)); stall occurrence and call failure by
raising the mass of [0, cut) (the columns are compared with a probability: u < p stalls). The
stall length is shifted only in rows that stalled. Each map from the plain uniform to the
tilted one is monotone, so tilted and plain runs stay coupled.

`TiltedDrawBank` is a `CallDrawBank` whose tilted slots are drawn, for every request, from a
mixture of tilts (the nominal law among them, for a bounded weight) the moment the bank is
made, so every request's weight p(x)/q(x) covers all tilted slots whatever a policy reads:
every policy of a run sees the same inputs and the same weights (common random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import logsumexp, ndtr, ndtri

from sim.model.latency import (
    U_OUTCOME,
    U_SPEED,
    U_STALL,
    U_STALL_EXTRA,
    U_TTFT,
    UNIFORMS_PER_CALL,
)
from sim.model.streams import CallDrawBank, Streams

#: Columns tilted by a normal-scale mean shift, and by raising the mass below a cut.
SHIFTED = (U_TTFT, U_SPEED, U_STALL_EXTRA)
RAISED = (U_STALL, U_OUTCOME)
#: The largest uniform handed to an engine (Phi(z) rounds to 1 past z ~ 8.3).
_TOP = float(np.nextafter(1.0, 0.0))


@dataclass(frozen=True)
class SlotTilt:
    """The proposal of one call slot: normal shifts `theta` (by column of SHIFTED) and, per
    column of RAISED, the cut and the proposal's mass below it (`mass == cut`: untilted)."""

    theta: tuple[float, float, float] = (0.0, 0.0, 0.0)
    cut: tuple[float, float] = (0.0, 0.0)
    mass: tuple[float, float] = (0.0, 0.0)

    @property
    def identity(self) -> bool:
        """True if this slot is drawn as the plain bank draws it."""
        return not any(self.theta) and self.cut == self.mass


@dataclass(frozen=True)
class Tilt:
    """Per call slot (step, attempt), its `SlotTilt`; slots not named are drawn plainly."""

    slots: dict[tuple[str, int], SlotTilt] = field(default_factory=dict)

    @property
    def identity(self) -> bool:
        """True if nothing is tilted (plain Monte Carlo)."""
        return all(s.identity for s in self.slots.values())

    def describe(self) -> str:
        """The tilt in one line per slot with a move: shifts in standard deviations, raised
        probabilities as from -> to."""
        names = ("ttft", "speed", "stall_len")
        lines = []
        for (step, attempt), s in self.slots.items():
            parts = [f"{n} {t:+.2f}sd" for n, t in zip(names, s.theta, strict=True) if t]
            for n, c, m in zip(("stall", "fail"), s.cut, s.mass, strict=True):
                if c != m:
                    parts.append(f"{n} {c:.3g}->{m:.3g}")
            if parts:
                lines.append(f"{step}#{attempt}: " + ", ".join(parts))
        return "; ".join(lines) if lines else "none (plain sampling)"


@dataclass
class SlotSample:
    """One tilted slot's draws: the uniforms the engines read and the normal scores behind the
    shifted columns (kept for the cross-entropy update)."""

    uniforms: np.ndarray  # (n, 5)
    z: np.ndarray  # (n, 3): Phi^-1 of the SHIFTED columns, before rounding


def log_ratio(s: SlotTilt, sample: SlotSample) -> np.ndarray:
    """log q(x)/p(x) of slot tilt `s` at the drawn slot `sample` (per request)."""
    u, z = sample.uniforms, sample.z
    out = np.zeros(len(u))
    stalled = u[:, U_STALL] < s.cut[0]
    for k, theta in enumerate(s.theta):
        if theta:
            term = theta * z[:, k] - theta * theta / 2
            out += np.where(stalled, term, 0.0) if SHIFTED[k] == U_STALL_EXTRA else term
    for k, column in enumerate(RAISED):
        c, m = s.cut[k], s.mass[k]
        if c != m:
            below = u[:, column] < c
            out += np.where(below, np.log(m / c), np.log((1 - m) / (1 - c)))
    return out


def _draw(s: SlotTilt, plain: np.ndarray) -> SlotSample:
    """Rows of uniforms `plain` moved by slot tilt `s` (monotone maps, one per column)."""
    u = plain.copy()
    for k, column in enumerate(RAISED):
        c, m = s.cut[k], s.mass[k]
        if c != m:
            v = plain[:, column]
            u[:, column] = np.where(v < m, v / m * c, c + (v - m) / (1 - m) * (1 - c))
    stalled = u[:, U_STALL] < s.cut[0]
    z = np.empty((len(u), len(SHIFTED)))
    for k, column in enumerate(SHIFTED):
        z[:, k] = ndtri(plain[:, column])
        theta = s.theta[k]
        if theta:
            moved = z[:, k] + theta
            if column == U_STALL_EXTRA:
                moved = np.where(stalled, moved, z[:, k])
            z[:, k] = moved
            u[:, column] = np.clip(ndtr(moved), np.finfo(float).tiny, _TOP)
    return SlotSample(u, z)


class TiltedDrawBank(CallDrawBank):
    """A draw bank whose slots in `tilts[*].slots` come from the mixture sum_k share_k q_k
    (the tilts' slots must be the same; an identity tilt among them is the plain law): each
    request picks its component on a stream of its own, then every tilted slot is drawn at
    once, and `log_weight[i]` = log p(x_i)/q(x_i) over all of them. Other slots are plain."""

    def __init__(
        self,
        streams: Streams,
        n_requests: int,
        tilts: list[Tilt],
        shares: list[float],
    ) -> None:
        super().__init__(streams, n_requests)
        if len(tilts) != len(shares) or not tilts:
            raise ValueError("one share per tilt, at least one tilt")
        keys = list(tilts[0].slots)
        if any(list(t.slots) != keys for t in tilts):
            raise ValueError("every tilt of a mixture must name the same slots, in order")
        share = np.asarray(shares, dtype=float) / float(np.sum(shares))
        picks = streams.generator("tilt-component").random(n_requests)
        self.component = np.minimum(
            np.searchsorted(np.cumsum(share), picks, side="right"), len(tilts) - 1
        )
        self.samples: dict[tuple[str, int], SlotSample] = {}
        log_q = np.tile(np.log(share)[:, None], (1, n_requests))  # (components, n)
        for key in keys:
            plain = super().uniforms(key[0], key[1], 0)
            sample = SlotSample(np.empty_like(plain), np.empty((n_requests, len(SHIFTED))))
            for k, tilt in enumerate(tilts):
                rows = self.component == k
                if rows.any():
                    part = _draw(tilt.slots[key], plain[rows])
                    sample.uniforms[rows], sample.z[rows] = part.uniforms, part.z
            self._uniforms[(key[0], key[1], 0, 0)] = sample.uniforms
            self.samples[key] = sample
            known: dict[SlotTilt, np.ndarray] = {}  # components share slot tilts: once each
            for k, tilt in enumerate(tilts):
                slot = tilt.slots[key]
                if slot not in known:
                    known[slot] = log_ratio(slot, sample)
                log_q[k] += known[slot]
        self.log_weight = -logsumexp(log_q, axis=0) if keys else np.zeros(n_requests)

    @property
    def weight(self) -> np.ndarray:
        """p(x)/q(x) per request (1 everywhere for a bank of identity tilts)."""
        return np.exp(self.log_weight)


def slot_keys(steps: list[str], attempts: int) -> list[tuple[str, int]]:
    """The slots a run tilts: attempts 0 .. `attempts`-1 of every step (first send only)."""
    return [(step, a) for step in steps for a in range(attempts)]


def identity_tilt(keys: list[tuple[str, int]], cuts: dict[str, tuple[float, float]]) -> Tilt:
    """The plain law over slots `keys`, with each step's cuts (stall probability, failure
    probability) in place for a later raise."""
    return Tilt({k: SlotTilt(cut=cuts[k[0]], mass=cuts[k[0]]) for k in keys})


def scaled(tilt: Tilt, scale: float) -> Tilt:
    """`tilt` at `scale` of its strength: shifts times `scale`, raised masses moved that share
    of the way from their cuts (1: `tilt` itself; 0: the plain law)."""
    slots = {
        key: SlotTilt(
            tuple(scale * t for t in s.theta),  # type: ignore[arg-type]
            s.cut,
            tuple(c + scale * (m - c) for c, m in zip(s.cut, s.mass, strict=True)),  # type: ignore[arg-type]
        )
        for key, s in tilt.slots.items()
    }
    return Tilt(slots)


def jump_components(background: Tilt, jump: Tilt) -> list[Tilt]:
    """The one-big-jump family: the background tilt everywhere, then for each step the same
    with that step's slots (all attempts) drawn from `jump` (a chain's overrun is mostly one
    step's: one component per step that may carry it)."""
    steps = list(dict.fromkeys(step for step, _ in background.slots))
    out = [background]
    for step in steps:
        slots = {k: (jump.slots[k] if k[0] == step else s) for k, s in background.slots.items()}
        out.append(Tilt(slots))
    return out


__all__ = [
    "RAISED",
    "SHIFTED",
    "UNIFORMS_PER_CALL",
    "SlotSample",
    "SlotTilt",
    "Tilt",
    "TiltedDrawBank",
    "identity_tilt",
    "jump_components",
    "log_ratio",
    "scaled",
    "slot_keys",
]
