"""The vectorized engine's client rules: a policy attempt's SDK retries and overhead, over arrays.

`VectorClient` is the part of `sim.engine.vectorized.VectorizedSimulation` that lives a policy
attempt on a provider whose client acts on its own (`providers.P.sdk`: hidden retries, its
per-attempt `timeout_s`; `overhead_s`: client time around each call) as the event engine does
with a free slot (`CallMaker.call` and its SDK retries, `event_calls.serve`):
each call from its own draws (SDK retry j reads its own block) and its own overhead (the
'overhead' stream; the held share before the first token, the rest after the slot is freed),
cut at the policy's cut or, sooner, the client's timeout (`ended_by` sdk); after a hard error or
its own timeout the client waits (`backoff_wait`, jitter from the 'sdk-backoff' stream) and calls
again, cut at its timeout or what is left of the policy's cut; a wait past that cut ends the
attempt (after sleeping to it, unless the client `honours_deadline`), a wait past the deadline
too (a client that honours it gives up; one that does not sleeps into the deadline's
cancellation). Without shared state no call is rate-limited, so only hard errors and the
client's own timeouts are retried; a cut by the policy is the caller's and never retried.

The attempt is lived uninterrupted (`ClientLife`); `_client_log` then applies its cancellation
(the deadline, a race or hedge winner) call by call: calls the client would have sent after it
never exist; the call in flight is cancelled in its service (billed per `billing.cancelled`) or
in its overhead's after part (billed as served). A deadline comes before every other event at
its instant, a winner after every event scheduled before its instant (so a call ending then
completes, and a call sent then is made and cancelled at once). The few requests whose order
of events only simpy can tell (a zero-length wait inside a call) are replayed on the event
engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.engine.kernel import SAME_INSTANT as _SAME_INSTANT
from sim.engine.vector_calls import (
    DRAWN_OUTCOME,
    K_CUT,
    K_LATE,
    K_NATURAL,
    K_UNSERVED,
    O_ERROR,
    O_TIMEOUT,
    CallLog,
    ClientChunk,
    UnsupportedError,
)
from sim.engine.vector_streams import K_FIRST, broken_services, stream_cut
from sim.model.backoff import sdk_wait
from sim.model.config import BackoffSpec, ProviderSpec, SdkSpec
from sim.model.hardness import Hardness
from sim.model.latency import OK, Distribution, build_distribution
from sim.model.streams import CallDrawBank
from sim.model.workflow import Step
from sim.policy.plans import Attempt

#: Rows checked against the event engine's own per-call arithmetic (overhead, SDK waits).
_PROBE_ROWS = 16


@dataclass(frozen=True)
class Client:
    """What one provider's client does on its own, as the vectorized engine reads it."""

    sdk: SdkSpec
    timeout: float | None  # its per-attempt timeout (restarted on each of its retries)
    retried: tuple[int, ...]  # outcome codes it retries: hard errors, its own timeouts
    overhead: Distribution | None  # per-call overhead law (None: off)
    held: float  # the share of it that holds the slot before service

    @classmethod
    def of(cls, spec: ProviderSpec) -> Client | None:
        """The client of a provider, or None when it does nothing of its own (no retries, no
        timeout, no overhead): then the plain engine runs its calls, exactly as before."""
        sdk = spec.sdk
        if not sdk.retries and sdk.timeout_s is None and spec.overhead_s is None:
            return None
        retried = tuple(
            code
            for code, kind in ((O_ERROR, "5xx"), (O_TIMEOUT, "timeout"))
            if kind in sdk.retry_on
        )
        overhead = None if spec.overhead_s is None else build_distribution(spec.overhead_s)
        return cls(sdk, sdk.timeout_s, retried, overhead, spec.overhead_held)


@dataclass
class ClientCall:
    """One call of a client's attempt (its SDK retry `sdk`) for the attempt's rows `pos`, lived
    uninterrupted: sent at `start`, the provider done with it at `served` (its slot freed),
    seen by the caller at `natural` (after the overhead's after part)."""

    pos: np.ndarray  # positions into the attempt's rows
    sdk: int
    start: np.ndarray
    served: np.ndarray
    natural: np.ndarray
    kind: np.ndarray  # K_NATURAL / K_CUT / K_UNSERVED / K_LATE
    outcome: np.ndarray  # outcome code as the caller sees it uninterrupted
    drawn: np.ndarray
    ttft: np.ndarray  # drawn first token plus the held overhead
    generating: np.ndarray  # drawn generation plus stall
    overhead: np.ndarray
    by_sdk: np.ndarray  # its cut is the client's timeout (else the policy's)
    zero: np.ndarray  # a zero-length wait inside it (simpy's order decides what comes first)


@dataclass
class ClientLife:
    """A client's policy attempt for its rows, lived uninterrupted: its calls (SDK retry by
    SDK retry), the SDK retry of each row's last call, and where the client slept past that
    call to the policy's cut, when the attempt ends (NaN otherwise)."""

    calls: list[ClientCall]
    last: np.ndarray
    tail: np.ndarray


def read_cuts(
    client: Client, step: Step, plan: Attempt, cut: np.ndarray
) -> tuple[float | None, float | None, np.ndarray | None]:
    """A call's stream cuts with its client's read timeout folded in (`event_calls.client_cuts`
    over arrays, `cut` its total cut per row, inf: none): (first-token cut, idle cut, per row
    whether a first-token cut is the client's own, so `ended_by` sdk and retried by it; None:
    it never is). On a step that streams the client's `timeout_s` bounds the wait for the first
    token and for each next token; otherwise the policy's stream cuts as they are."""
    first, idle, timeout = plan.first_token_after, plan.idle_after, client.timeout
    if not step.stream or timeout is None:
        return first, idle, None
    own = first is None or timeout < first
    if own:
        first = timeout
    if idle is None or timeout < idle:
        idle = timeout
    return first, idle, own & ~(cut <= first)


def backoff_waits(spec: BackoffSpec, retry: int, u: np.ndarray) -> np.ndarray:
    """`sim.model.backoff.backoff_wait` over uniforms `u` (the same operations per element)."""
    wait = min(spec.max_s, spec.base_s * spec.multiplier ** max(0, retry - 1))
    if spec.jitter == "full":
        return wait * u
    if spec.jitter == "equal":
        return wait / 2 + wait / 2 * u
    if spec.jitter == "sdk":
        return wait * (1 - 0.25 * u)
    if spec.jitter == "additive":
        return wait + spec.jitter_s * u
    return np.full(len(u), wait)


class VectorClient:
    """A client's policy attempts in the vectorized engine (a mixin of `VectorizedSimulation`)."""

    # The state this job reads, set by `VectorizedSimulation.__init__`.
    bank: CallDrawBank
    providers: list[str]
    models: list[str]
    log: CallLog
    hardness: Hardness | None
    _hard: np.ndarray | None
    _clients: dict[str, Client]
    _unclear: list[np.ndarray]
    _columns: dict[tuple[str | int, ...], np.ndarray]
    _probed_client: set[tuple[str | int, ...]]
    #: A call slot's draws (`VectorDraws._draws`).
    _draws: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any]]
    #: The onsets of a call slot's mid-stream stalls (`VectorDraws._onsets`).
    _onsets: Callable[..., np.ndarray]
    #: A call slot's stream (`VectorDraws._call_stream`).
    _call_stream: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, Any] | None]

    def _client_attempt(
        self,
        step: Step,
        attempt: int,
        plan: Attempt,
        rows: np.ndarray,
        start: np.ndarray,
        deadline: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, ClientLife]:
        """One policy attempt on a client's provider, uninterrupted: (when the policy sees it
        end, kind (unused: its calls carry theirs), its outcome code (its last call's), its
        life). As `CallMaker.call` and its SDK retries, with `deadline` for the time left."""
        client = self._clients[plan.provider]
        m, give_up, timeout = len(rows), plan.give_up_after, client.timeout
        read = step.stream and timeout is not None  # its timeout: a read timeout, not the total
        cut, by_sdk = (math.inf if give_up is None else give_up), False
        if not read and timeout is not None and (give_up is None or timeout < give_up):
            cut, by_sdk = timeout, True  # the client's own
        cuts = np.full(m, cut)
        call = self._client_call(
            step, attempt, plan, rows, np.arange(m), start, cuts, np.full(m, by_sdk), 0,
            read_cuts(client, step, plan, cuts),
        )  # fmt: skip
        calls = [call]
        end, outcome = call.natural.copy(), call.outcome.copy()
        last, tail = np.zeros(m, dtype=np.int64), np.full(m, np.nan)
        sdk = client.sdk
        for j in range(1, sdk.retries + 1):
            # its retry_on; a timeout only if its own (the caller's cut is never retried)
            again = np.isin(call.outcome, client.retried)
            again &= ~((call.outcome == O_TIMEOUT) & ~call.by_sdk)
            if not again.any():
                break
            pos, after = call.pos[again], call.natural[again]
            wait = self._sdk_waits(client, step, attempt, j, rows[pos])
            go = np.ones(len(pos), dtype=bool)
            left = None
            if give_up is not None:
                left = give_up - (after - start[pos]) - wait
                past = left <= 0  # the policy's cut comes first: the attempt ends there
                if not sdk.honours_deadline:  # ... once the client has slept until it
                    nap = left + wait
                    slept = past & (nap > 0)
                    end[pos[slept]] = after[slept] + nap[slept]
                    tail[pos[slept]] = end[pos[slept]]
                go &= ~past
            if sdk.honours_deadline:  # it gives up rather than sleep past the deadline
                go &= ~(wait >= deadline[pos] - after)
            if not go.any():
                break
            pos, after, wait = pos[go], after[go], wait[go]
            cuts = np.full(len(pos), math.inf) if left is None else left[go]
            by = np.zeros(len(pos), dtype=bool)
            if timeout is not None and not read:
                by = timeout < cuts
                cuts = np.where(by, timeout, cuts)
            call = self._client_call(
                step, attempt, plan, rows[pos], pos, after + wait, cuts, by, j,
                read_cuts(client, step, plan, cuts),
            )  # fmt: skip
            calls.append(call)
            end[pos], outcome[pos], last[pos] = call.natural, call.outcome, j
        return end, np.zeros(m, dtype=np.int8), outcome, ClientLife(calls, last, tail)

    def _client_call(
        self,
        step: Step,
        attempt: int,
        plan: Attempt,
        rows: np.ndarray,
        pos: np.ndarray,
        start: np.ndarray,
        cut: np.ndarray,
        by_sdk: np.ndarray,
        sdk: int,
        stream_cuts: tuple[float | None, float | None, np.ndarray | None] = (None, None, None),
    ) -> ClientCall:
        """One call of a client's attempt (its SDK retry `sdk`) sent at `start`, cut `cut`
        seconds after it (inf: never) or sooner by its `stream_cuts` (`read_cuts`), lived
        uninterrupted as `event_calls.serve` with a free slot and, for its overhead's after
        part, `event_calls._late`."""
        client = self._clients[plan.provider]
        ttft, generation, stalled, extra, drawn, broken_at = self._draws(
            step, attempt, plan, rows, sdk
        )
        overhead = np.zeros(len(rows))
        after = None
        if client.overhead is not None:  # the held part delays the first token
            overhead = self._overheads(client, step, attempt, sdk, rows)
            held = overhead * client.held
            after = overhead - held
            ttft += held
        label, broke = None, None
        first, idle, first_by_sdk = stream_cuts
        if broken_at is not None or first is not None or idle is not None:  # its stream matters
            onset = self._onsets(step, attempt, rows, stalled, sdk)
            if broken_at is not None:
                broke, at_break = broken_services(
                    ttft, generation, stalled, extra, onset, drawn, broken_at
                )
            if first is not None or idle is not None:
                stall = np.zeros(len(rows))
                stall[stalled] = extra
                cut, label = stream_cut(
                    cut, ttft, generation, stall, onset, drawn, broken_at, first, idle
                )
                if first_by_sdk is None:  # a stream cut is the caller's, never retried
                    by_sdk = by_sdk & (label == 0)
                else:  # ... but a read timeout before the first token, the client's own
                    by_sdk = np.where(label == 0, by_sdk, (label == K_FIRST) & first_by_sdk)
        # service: ttft + generation + stall (summed in that order), ttft alone if it failed
        service = ttft + generation
        generating = generation  # ours to change: generation + stall
        if len(stalled):
            service[stalled] += extra
            generating[stalled] += extra
        np.copyto(service, ttft, where=drawn != OK)
        if broke is not None:  # served to its break
            service[broke] = at_break
        served = start + service
        kind = np.zeros(len(rows), dtype=np.int8)  # K_NATURAL
        over = np.flatnonzero(~(service <= cut) | (cut <= _SAME_INSTANT))
        if len(over):  # cut at its give-up, or as it got its slot (granted at that instant)
            unserved = cut[over] <= _SAME_INSTANT
            served[over] = np.where(unserved, start[over], start[over] + cut[over])
            cut_kind = K_CUT if label is None else np.where(label[over] != 0, label[over], K_CUT)
            kind[over] = np.where(unserved, K_UNSERVED, cut_kind)
            if label is not None and (unserved & (label[over] != 0)).any():
                raise UnsupportedError("a stream cut at the instant a call is sent")
        fits = kind == K_NATURAL
        natural = served.copy()
        zero = fits & (service == 0)
        if after is not None:  # the slot is free; the caller sees the end `after` later
            later = np.flatnonzero(fits & (after > 0))
            if len(later):
                rest = cut[later] - service[later]
                seen = after[later] <= rest
                wait = np.where(seen, after[later], np.maximum(rest, 0.0))
                natural[later] = served[later] + wait
                kind[later[~seen]] = K_LATE
                zero[later] |= wait == 0
        outcome = DRAWN_OUTCOME[drawn]
        outcome[kind != K_NATURAL] = O_TIMEOUT
        return ClientCall(
            pos, sdk, start, served, natural, kind, outcome, drawn, ttft, generating, overhead,
            by_sdk, zero,
        )  # fmt: skip

    def _client_log(
        self,
        step: Step,
        attempt: int,
        plan: Attempt,
        rows: np.ndarray,
        life: ClientLife,
        cancel_at: np.ndarray,
        deadline: np.ndarray,
    ) -> None:
        """Record a client's attempt for `rows`, cancelled at `cancel_at` (inf: never; at its
        run's `deadline`: the deadline's, else a winner's) call by call."""
        provider, model = self.providers.index(plan.provider), self.models.index(plan.model)
        for call in life.calls:
            pos = call.pos
            whole = len(pos) == len(rows)  # every row (the attempt's first call): no gathers

            def mine(values: np.ndarray, whole: bool = whole, pos: np.ndarray = pos) -> np.ndarray:
                return values if whole else values[pos]

            at, dl = mine(cancel_at), mine(deadline)
            by_deadline = at == dl
            start, served, natural = call.start, call.served, call.natural
            # the deadline comes first at its instant; a winner after what was already due
            made = np.where(by_deadline, start < at, start <= at)
            going = made & np.where(by_deadline, at <= natural, at < natural)
            late = going & np.where(by_deadline, served < at, served <= at)
            tail = np.where(mine(life.last) == call.sdk, mine(life.tail), np.nan)
            if (call.zero & made).any():
                self._unclear.append(mine(rows)[call.zero & made])
            keep = np.flatnonzero(made)
            if len(keep) == len(pos):
                keep = slice(None)  # type: ignore[assignment]
            its = mine(rows)[keep]
            groups: list[tuple[np.ndarray | None, int]] = [(None, step.output_tokens)]
            if self._hard is not None and plan.model in self.hardness.effects:  # type: ignore[union-attr]
                groups = self.hardness.token_groups(  # type: ignore[union-attr]
                    plan.model, self._hard[its], step.output_tokens
                )
            fields = {
                "start": start, "natural": natural, "kind": call.kind, "drawn": call.drawn,
                "ttft": call.ttft, "generating": call.generating,
                "cancel_at": np.where(going, at, np.inf), "deadline": dl,
                "served": served, "late": late, "by_sdk": call.by_sdk,
                "overhead": call.overhead, "tail": tail,
            }  # fmt: skip
            kept = {name: values[keep] for name, values in fields.items()}
            stream = self._call_stream(step, attempt, plan, its, call.sdk)
            for which, tokens in groups:  # a hard request's calls: their own (longer) answers
                part = kept if which is None else {n: v[which] for n, v in kept.items()}
                if stream is not None:
                    part["stream"] = tuple(
                        a if which is None or a is None else a[which] for a in stream
                    )
                self.log.add(
                    ClientChunk(
                        its if which is None else its[which],
                        step.index,
                        attempt,
                        provider,
                        model,
                        input_tokens=step.input_tokens,
                        output_tokens=tokens,
                        sdk=call.sdk,
                        **part,
                    )
                )

    # ------------------------------------------------------------------ the client's streams

    def _overheads(
        self, client: Client, step: Step, attempt: int, sdk: int, rows: np.ndarray
    ) -> np.ndarray:
        """The overhead seconds of this call slot for `rows` (stream 'overhead'), transformed as
        the event engine does one call at a time (checked on the first rows)."""
        key = ("overhead", step.id, attempt, 0, sdk)
        u = self._stream(key, rows)
        law = client.overhead
        assert law is not None
        values = np.asarray(law.from_uniform(u), dtype=float)
        if key not in self._probed_client:
            probe = [float(law.from_uniform(np.asarray([x]))[0]) for x in u[:_PROBE_ROWS]]
            if values[:_PROBE_ROWS].tolist() != probe:
                raise UnsupportedError(
                    "overhead_s: the vector transform no longer matches a call's"
                )
            self._probed_client.add(key)
        return values

    def _sdk_waits(
        self, client: Client, step: Step, attempt: int, retry: int, rows: np.ndarray
    ) -> np.ndarray:
        """The client's waits before its retry `retry` for `rows` (stream 'sdk-backoff'): the
        jittered backoff, which is what `sdk_wait` gives a failure without a Retry-After
        (checked against it on the first rows)."""
        key = ("sdk-backoff", step.id, attempt, 0, retry)
        u = self._stream(key, rows)
        waits = backoff_waits(client.sdk.backoff, retry, u)
        if key not in self._probed_client:
            probe = [sdk_wait(client.sdk, retry, float(x)) for x in u[:_PROBE_ROWS]]
            if waits[:_PROBE_ROWS].tolist() != probe:
                raise UnsupportedError("the SDK's wait no longer matches sim.model.backoff")
            self._probed_client.add(key)
        return waits

    def _stream(self, key: tuple[str | int, ...], rows: np.ndarray) -> np.ndarray:
        """Rows `rows` of the bank's per-request stream `key` (`CallDrawBank.uniform`): of a
        plain bank, the whole column drawn once as an array from the same generator (checked
        against a two-row bank of the same streams); of a bank that reads these streams as the
        plain one does (a tilted bank), its column; of any other bank, row by row."""
        bank = self.bank
        column = self._columns.get(key)
        if column is not None:
            return column[rows]
        kind = type(bank)
        if kind is CallDrawBank:
            generator = bank.streams.generator("extra", *key)
            if bank.first:  # a chunk's bank starts at request `first`
                generator.bit_generator.advance(bank.first)
            column = generator.random(bank.n_requests)
            check = CallDrawBank(bank.streams, 2, bank.first).uniform_column(key)
            if column[: len(check)].tolist() != check[: bank.n_requests]:
                column = np.asarray(bank.uniform_column(key), dtype=float)
        elif (
            kind.uniform is CallDrawBank.uniform
            and kind.uniform_column is CallDrawBank.uniform_column
        ):
            column = np.asarray(bank.uniform_column(key), dtype=float)
        else:
            return np.asarray([bank.uniform(int(r), *key) for r in rows.tolist()], dtype=float)
        self._columns[key] = column
        return column[rows]
