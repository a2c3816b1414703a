"""A provider's shared state in one simulation: its slots, quotas, client rules and conditions.

What every call on a provider shares lives here: its `concurrency` slots (`sim.engine.kernel.
Slots`), its quotas and the provider's and its models' admission with the Retry-After a 429
carries, its client's rules (the SDK's retries and timeout, overhead), and what stretches a
call served now (load slowdown, bad spells). A call's life on it is `sim.engine.event_calls`
(`serve`): apart from this state because, together, the two pass the 600-line limit, and because
this is what the provider is, whoever calls it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from sim.engine.kernel import Slots
from sim.model.conditions import Episodes
from sim.model.config import ProviderSpec, ServingSpec
from sim.model.latency import CallLatency, Distribution, build_distribution
from sim.model.ratelimit import Quota, retry_after_header
from sim.model.rows import OUTCOME_ERROR, OUTCOME_RATE_LIMITED, OUTCOME_TIMEOUT, Call


@dataclass(frozen=True, slots=True)
class Serving:
    """A model as this provider serves it: latency law and prices (USD per token)."""

    latency: CallLatency
    price_input: float
    price_output: float


class Provider:
    """A serving path's shared state in one simulation: slots, quotas, load and bad spells.

    `episodes_rng` is the provider's own bad-spell stream (needed only with `episodes`).
    """

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        spec: ProviderSpec,
        serving: dict[str, Serving],
        billing: str,
        episodes_rng: np.random.Generator | None = None,
    ) -> None:
        self.env = env
        self.name = name
        self.slots = Slots(env, spec.concurrency)
        self.quota = _quota(spec, spec)
        self.model_quotas = {
            model: q
            for model, serves in spec.serves.items()
            if not (q := _quota(serves, spec)).unlimited
        }
        #: Admission checks any quota at all (off: no cost on the hot path).
        self.limited = not self.quota.unlimited or bool(self.model_quotas)
        self.reserve = spec.charge == "max_tokens"
        self.retry_after_mode = spec.retry_after
        self.sdk = spec.sdk
        self.sdk_retries = spec.sdk.retries
        #: The client's per-attempt timeout (None: none), restarted on each SDK retry.
        self.sdk_timeout = spec.sdk.timeout_s
        #: Its read timeout on a streamed step: `stream_timeout_s` (LiteLLM's `stream_timeout`),
        #: else `timeout_s` (None: none); `client_cuts` turns it into the stream's cuts.
        stream_timeout = spec.sdk.stream_timeout_s
        self.sdk_stream_timeout = stream_timeout if stream_timeout is not None else self.sdk_timeout
        #: Either timeout set: the call's cuts go through `client_cuts` (off the fast path).
        self.sdk_times = self.sdk_timeout is not None or self.sdk_stream_timeout is not None
        #: The call outcomes the client retries (its `retry_on`; timeouts: its own only).
        self.sdk_retried = frozenset(
            outcome
            for outcome, kind in (
                (OUTCOME_RATE_LIMITED, "429"),
                (OUTCOME_ERROR, "5xx"),
                (OUTCOME_TIMEOUT, "timeout"),
            )
            if kind in spec.sdk.retry_on
        )
        #: A 429 also carries retry-after-ms (the exact wait, rounded up to the millisecond).
        self.sends_retry_after_ms = spec.retry_after_ms
        #: Per-call overhead law (None: off) and the share of it that holds the slot.
        self.overhead: Distribution | None = None
        if spec.overhead_s is not None:
            self.overhead = build_distribution(spec.overhead_s)
        self.overhead_held = spec.overhead_held
        self.slowdown = spec.slowdown
        self.episodes: Episodes | None = None
        self.spell_slowdown, self.spell_error_rate = 1.0, 0.0
        if spec.episodes is not None:
            if episodes_rng is None:
                raise ValueError(f"provider {name}: episodes need their random stream")
            self.episodes = Episodes(spec.episodes, episodes_rng)
            self.spell_slowdown = spec.episodes.slowdown
            self.spell_error_rate = spec.episodes.error_rate
        #: Service is stretched by load or bad spells (off: no cost on the hot path).
        self.shaped = self.slowdown is not None or self.episodes is not None
        self.serving = serving
        self.billing = billing

    def admit(self, call: Call, charge_output: int) -> bool:
        """Charge a call to the provider's quotas and its model's (all or nothing); on a 429 set
        the Retry-After the provider sends. Failed and cancelled calls keep their charge."""
        now = self.env.now
        tokens = call.input_tokens + charge_output
        scoped = self.model_quotas.get(call.model)
        if scoped is None:
            if self.quota.admit(now, tokens, call.input_tokens):
                call.quota_tokens = tokens
                return True
        elif self.quota.fits(now, tokens, call.input_tokens) and scoped.fits(
            now, tokens, call.input_tokens
        ):
            self.quota.take(now, tokens, call.input_tokens)
            scoped.take(now, tokens, call.input_tokens)
            call.quota_tokens = tokens
            return True
        quotas = [self.quota] if scoped is None else [self.quota, scoped]
        exact = max(q.retry_after(now, tokens, call.input_tokens) for q in quotas)
        reset = max(q.reset_after(now) for q in quotas) if self.retry_after_mode == "window" else 0
        call.retry_after = retry_after_header(self.retry_after_mode, exact, reset)
        if self.sends_retry_after_ms:
            call.retry_after_ms = math.ceil(exact * 1000) / 1000 if math.isfinite(exact) else exact
        return False

    def stretch(self) -> tuple[float, bool]:
        """(factor on first token and generation, bad spell on?) for a call served now."""
        factor = 1.0
        if self.slowdown is not None:
            slots = self.slots
            factor = 1.0 + self.slowdown.a * (slots.count / slots.capacity) ** self.slowdown.k
        spell = self.episodes is not None and self.episodes.active(self.env.now)
        if spell:
            factor *= self.spell_slowdown
        return factor, spell


def _quota(limits: ProviderSpec | ServingSpec, provider: ProviderSpec) -> Quota:
    """The quota of one scope (the provider, or one model on it), with the provider's window
    and start rules."""
    return Quota(
        limits.tpm,
        limits.rpm,
        input_tpm=limits.input_tpm,
        output_tpm=limits.output_tpm,
        window=provider.window,
        start=provider.start,
    )
