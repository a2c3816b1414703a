"""Named random streams: common random numbers across policies, never global random state.

A stream is keyed by what it belongs to (`("arrivals",)`, `("call", step, attempt, resend)`), not
by creation order, so adding a step or a policy never shifts anyone else's draws. Per-call
uniforms are drawn in one block per (step, attempt, resend) over all requests: request i always
gets row i, whatever the number of requests, and every policy sees the same rows.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from sim.model.latency import UNIFORMS_PER_CALL, CallDraws, CallLatency


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

    def uniform_column(self, key: tuple[str | int, ...]) -> list[float]:
        """The per-request stream `key` of `uniform`, every request's value."""
        column = self._columns.get(key)
        if column is None:
            column = self._skipped(1, "extra", *key).random(self.n_requests).tolist()
            self._columns[key] = column
        return column

    def uniform(self, index: int, *key: str | int) -> float:
        """Request `index`'s uniform of the named per-request stream `key` (backoff jitter,
        bad-spell errors, ...): one column over all requests, the same for every policy."""
        return self.uniform_column(key)[index]

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


#: Requests per block of a `WindowedDrawBank`.
WINDOW_ROWS = 4096


class WindowedDrawBank(CallDrawBank):
    """A `CallDrawBank` that holds only blocks of `rows` requests near the ones in use, for an
    event-engine run too big to hold every request's draws (`records: none`).

    Every accessor returns what the plain bank returns, indexed by request as there; a block is
    drawn on first use (its rows of the same streams, as `first` does) and dropped once the
    simulation has moved `keep` blocks past it, to be drawn again, identically, if ever needed.
    Arrivals come in index order, so the requests in flight span a few neighbouring blocks; an
    older block (a late re-send) is kept only until the next one is needed."""

    def __init__(
        self, streams: Streams, n_requests: int, rows: int | None = None, keep: int = 4
    ) -> None:
        super().__init__(streams, n_requests)
        self.rows, self.keep = rows or WINDOW_ROWS, keep
        self._newest = 0  # the highest block drawn so far, for eviction
        self._blocks: dict[tuple[Hashable, int], Any] = {}

    def _block(self, key: Hashable, block: int, make: Callable[[CallDrawBank], Any]) -> Any:
        """Block `block` of the accessor result `make(bank)` named `key` (cached)."""
        found = self._blocks.get((key, block))
        if found is None:
            first = block * self.rows
            part = CallDrawBank(self.streams, min(self.rows, self.n_requests - first), first)
            found = make(part)
            if block > self._newest:
                self._newest = block
                self._evict()
            elif block < self._newest - self.keep:  # an old request (a re-send): one at a time
                self._evict()
            self._blocks[(key, block)] = found
        return found

    def _evict(self) -> None:
        oldest = self._newest - self.keep
        for key in [k for k in self._blocks if k[1] < oldest]:
            del self._blocks[key]

    def uniforms(self, step: str, attempt: int, resend: int, sdk: int = 0) -> np.ndarray:
        return _Rows(self, ("u", step, attempt, resend, sdk),
                     lambda bank: bank.uniforms(step, attempt, resend, sdk))  # fmt: skip

    def uniform(self, index: int, *key: str | int) -> float:
        block = self._block(("x", *key), index // self.rows, lambda bank: bank.uniform_column(key))
        return block[index % self.rows]

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
        key = ("d", step, attempt, resend, path, output_tokens, sdk)
        found = self._draws.get(key)
        if found is None:

            def make(bank: CallDrawBank) -> tuple[list[float], ...]:
                drawn = bank.draws(step, attempt, resend, path, latency, output_tokens, sdk)
                return (drawn.ttft, drawn.generation, drawn.stall, drawn.outcome)

            found = CallDraws(*(_Rows(self, key, make, field) for field in range(4)))
            self._draws[key] = found
        return found

    def length_uniforms(self, step: str, attempt: int, resend: int) -> list[float]:
        return _Rows(self, ("l", step, attempt, resend),
                     lambda bank: bank.length_uniforms(step, attempt, resend))  # fmt: skip


class _Rows:
    """Rows of a windowed bank's accessor, indexed by request (`x[i]`, or `x[i, column]` for a
    block of uniforms); `field` picks one of a CallDraws' four lists."""

    __slots__ = ("bank", "field", "key", "make")

    def __init__(
        self,
        bank: WindowedDrawBank,
        key: Hashable,
        make: Callable[[CallDrawBank], Any],
        field: int | None = None,
    ) -> None:
        self.bank, self.key, self.make, self.field = bank, key, make, field

    def __getitem__(self, index: Any) -> Any:
        row, column = index if isinstance(index, tuple) else (index, None)
        rows = self.bank.rows
        block = self.bank._block(self.key, row // rows, self.make)
        if self.field is not None:
            block = block[self.field]
        found = block[row % rows]
        return found if column is None else found[column]
