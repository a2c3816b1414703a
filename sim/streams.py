"""Named random streams: common random numbers across policies, never global random state.

A stream is keyed by what it belongs to (`("arrivals",)`, `("call", step, attempt, resend)`), not
by creation order, so adding a step or a policy never shifts anyone else's draws. Per-call
uniforms are drawn in one block per (step, attempt, resend) over all requests: request i always
gets row i, whatever the number of requests, and every policy sees the same rows.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable

import numpy as np

from sim.latency import UNIFORMS_PER_CALL, CallDraws, CallLatency


def _word(part: str | int) -> int:
    """A stable 32-bit integer for one key part (ints pass through, strings are CRC-32'd)."""
    if isinstance(part, int):
        if part < 0:
            raise ValueError(f"stream key parts must be >= 0, got {part}")
        return part
    return zlib.crc32(part.encode("utf-8"))


class Streams:
    """The root of a simulation's randomness: `seed` plus a namespace (main run, pilot, ...)."""

    def __init__(self, seed: int, *namespace: str | int) -> None:
        self.seed = seed
        self.namespace = tuple(_word(p) for p in namespace)

    def generator(self, *key: str | int) -> np.random.Generator:
        """An independent generator for the stream named `key`."""
        sequence = np.random.SeedSequence(
            self.seed, spawn_key=self.namespace + tuple(_word(p) for p in key)
        )
        return np.random.Generator(np.random.PCG64(sequence))

    def child(self, *namespace: str | int) -> Streams:
        """A sub-namespace (e.g. the pilot run) whose streams never meet this one's."""
        child = Streams(self.seed)
        child.namespace = self.namespace + tuple(_word(p) for p in namespace)
        return child


class CallDrawBank:
    """Per-call latency draws, shared by every policy of one simulation point.

    `draws(step, attempt, resend, path, latency, output_tokens)` gives the first-token,
    generation, stall and outcome draws of that call for every request index. Uniforms depend
    only on (step, attempt, resend); the serving path only changes how they are transformed.

    `first` > 0 makes a bank of requests `first` .. `first + n_requests - 1` of the same streams
    (row 0 is request `first`): each stream is advanced past the earlier requests' draws, so a
    run done in chunks of requests draws exactly what one bank over all of them would.
    """

    def __init__(self, streams: Streams, n_requests: int, first: int = 0) -> None:
        if first < 0:
            raise ValueError(f"first must be >= 0, got {first}")
        self.streams = streams
        self.n_requests = n_requests
        self.first = first
        self._uniforms: dict[tuple[str, int, int, int], np.ndarray] = {}
        self._draws: dict[Hashable, CallDraws] = {}
        self._columns: dict[tuple[str | int, ...], list[float]] = {}
        self._lengths: dict[tuple[str, int, int], list[float]] = {}

    def uniforms(self, step: str, attempt: int, resend: int, sdk: int = 0) -> np.ndarray:
        """The (n_requests, 5) block of uniforms of this call slot (`sdk` > 0: the SDK's
        retry number `sdk` inside that policy attempt, on a stream of its own)."""
        key = (step, attempt, resend, sdk)
        block = self._uniforms.get(key)
        if block is None:
            extra = ("sdk", sdk) if sdk else ()
            rng = self._skipped(UNIFORMS_PER_CALL, "call", step, attempt, resend, *extra)
            block = rng.random((self.n_requests, UNIFORMS_PER_CALL))
            self._uniforms[key] = block
        return block

    def _skipped(self, per_request: int, *key: str | int) -> np.random.Generator:
        """The generator of stream `key`, past the `first` earlier requests' `per_request`
        uniforms each (PCG64 draws one 64-bit word per double, so advancing is exact)."""
        rng = self.streams.generator(*key)
        if self.first:
            rng.bit_generator.advance(self.first * per_request)
        return rng

    def uniform(self, index: int, *key: str | int) -> float:
        """Request `index`'s uniform of the named per-request stream `key` (backoff jitter,
        bad-spell errors, ...): one column over all requests, the same for every policy."""
        column = self._columns.get(key)
        if column is None:
            column = self._skipped(1, "extra", *key).random(self.n_requests).tolist()
            self._columns[key] = column
        return column[index]

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
        """The transformed draws of this call slot on serving path `path` = (provider, model)."""
        key = (step, attempt, resend, path, output_tokens, sdk)
        found = self._draws.get(key)
        if found is None:
            found = latency.draw(self.uniforms(step, attempt, resend, sdk), output_tokens)
            self._draws[key] = found
        return found

    def length_uniforms(self, step: str, attempt: int, resend: int) -> list[float]:
        """Per-request uniforms of this call slot's answer length (a stream of its own, so
        steps with a fixed length draw exactly what they drew before lengths could vary)."""
        key = (step, attempt, resend)
        found = self._lengths.get(key)
        if found is None:
            rng = self._skipped(1, "length", step, attempt, resend)
            found = rng.random(self.n_requests).tolist()
            self._lengths[key] = found
        return found
