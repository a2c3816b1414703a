"""The row types the engines write and the analysis reads: a run, its calls, a tool's actions.

A `Run` is one send of one customer request (re-sends are new runs) and becomes one row of
requests.parquet; a `Call` (its outcome one of `OUTCOMES`) one row of calls.parquet; an
`Action` one row of actions.parquet. `Records` is what one simulation of one policy produced.
They live at the floor so that the engines (which fill them), the policies (which read a
call's outcome) and the analysis (which turns them into tables) all import them from below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from sim.model.workflow import Workflow

# Outcomes of a call (the `outcome` column).
OUTCOME_OK = "ok"
OUTCOME_INVALID = "invalid"
OUTCOME_ERROR = "error"
OUTCOME_TIMEOUT = "timeout"
OUTCOME_CANCELLED = "cancelled"
OUTCOME_RATE_LIMITED = "rate_limited"
OUTCOME_TRUNCATED = "truncated"  # cut at the step's max_tokens: invalid, caught for free
OUTCOME_BROKEN = "broken"  # the answer's stream broke mid-way (`mid_stream_error_rate`)
OUTCOMES = (
    OUTCOME_OK,
    OUTCOME_INVALID,
    OUTCOME_ERROR,
    OUTCOME_TIMEOUT,
    OUTCOME_CANCELLED,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TRUNCATED,
    OUTCOME_BROKEN,  # appended: the codes before it do not move
)

#: `fail_reason` of a run still going at its deadline.
FAIL_DEADLINE = "deadline"
#: `fail_reason` of a step that failed without making a call (its request closed first).
FAIL_NO_CALL = "no_call"
#: `fail_reason` of a run whose caller disconnected (`customers.disconnect`).
FAIL_DISCONNECT = "disconnect"
#: `fail_reason` of a step whose only attempt was refused: the time left could not fund it.
FAIL_REFUSED = "refused"


# States of an action record (the `state` column of actions.parquet).
PLANNED = "planned"  # recorded, never sent (refused for lack of time, or the run closed)
SUBMITTED = "submitted"  # sent, the workflow is waiting for the answer
CONFIRMED = "confirmed"  # the remote's confirmation reached the workflow
FAILED = "failed"  # the remote refused it (transient error): nothing was committed
UNKNOWN = "unknown"  # the workflow stopped waiting after the submit: to be reconciled
STATES = (PLANNED, SUBMITTED, CONFIRMED, FAILED, UNKNOWN)


@dataclass(slots=True)
class Call:
    """One LLM call, filled in as it lives; becomes one row of calls.parquet."""

    run: Any  # the engine's Run this call belongs to
    step: str
    attempt: int
    provider: str
    model: str
    start: float
    input_tokens: int  # tokens asked for; the billed counts are set when the call ends
    output_tokens: int
    queue: float = math.nan
    ttft: float = math.nan
    end: float = math.nan
    outcome: str = ""
    billed_input: int = 0
    billed_output: int = 0
    cost: float = 0.0
    retry_after: float = math.nan  # a 429's Retry-After as the provider sends it, seconds
    retry_after_ms: float = math.nan  # a 429's retry-after-ms (if the provider sends it), s
    overhead: float = 0.0  # client, HTTP and event-loop seconds of this call (overhead_s)
    quota_tokens: int = 0  # tokens the provider's TPM quota took at admission (0 for a 429)
    sdk_retry: int = 0  # 0: the policy's call; j: the SDK's j-th retry of it
    reserved: int = 0  # the answer's token cap (what a `charge: max_tokens` quota takes)
    spell_u: float = 1.0  # the call's uniform for a bad spell's extra hard error
    valid: bool = True  # False: an invalid answer the step's validator let through (outcome ok)
    ended_by: str = ""  # the budget or event that ended it early ("" if it ended on its own)
    tokens_streamed: int = 0  # output tokens of its answer received before it ended
    onset: float = math.nan  # a mid-stream stall's onset, as a share of the output tokens
    broken_at: float = math.nan  # the share of the output tokens after which its stream breaks
    iteration: int = 0  # loop iteration, map copy or repeat ask k of its step (0 without them)


class Clock(Protocol):
    """What a run reads of the engine's clock when it starts: the simulated time."""

    now: float


@dataclass(slots=True)
class Action:
    """One submit (or planned submit) of a tool step; becomes one row of actions.parquet."""

    run: Any  # the engine's Run
    step: str
    attempt: int
    key: str  # idempotency key ("" when the tool is not idempotent)
    planned: float
    submitted: float = math.nan
    committed: float = math.nan  # when the remote committed this submit's effect (NaN: none)
    answered: float = math.nan  # when its confirmation or refusal reached the workflow
    state: str = PLANNED
    recognised: bool = False  # the remote knew the key: no new effect, the first one stands
    duplicate: bool = False  # a second (or later) effect of the same request's step
    late: bool = False  # committed after its run's deadline
    ended_by: str = ""  # what stopped the workflow waiting (a budget, the deadline, ...)


class Run:
    """One send of one customer request through the workflow (re-sends are new runs)."""

    __slots__ = (
        "active",
        "answered",
        "arrival",
        "calls",
        "closed",
        "cost",
        "deadline_at",
        "drafts_kept",
        "drafts_upgraded",
        "edge_done",
        "end",
        "fail_reason",
        "fail_step",
        "failed",
        "first_signal",
        "given_up_at",
        "index",
        "ok",
        "quality",
        "quality_sum",
        "refused_retries",
        "refused_starts",
        "remaining",
        "resend",
        "running",
        "tokens",
        "unresolved",
        "valid",
        "valid_hit",
        "valid_steps",
    )

    def __init__(
        self, env: Clock, workflow: Workflow, index: int, resend: int, deadline_s: float
    ) -> None:
        self.index = index
        self.resend = resend
        self.arrival = env.now
        self.deadline_at = env.now + deadline_s
        self.closed = False
        self.ok = False
        self.failed = False
        self.end = math.nan
        self.fail_reason = ""  # deadline, or the outcome of the failing step's last call
        self.fail_step = ""  # the step that failed the run (at the deadline: one still running)
        self.running = ""  # the step started last (what the deadline interrupts)
        self.cost = 0.0
        self.tokens = 0
        self.calls = 0
        #: The engine's processes of this run's calls in flight (what its end cancels).
        self.active: set[Any] = set()
        self.edge_done = False  # the edge answered (failed) while its work runs on (orphan)
        self.given_up_at = math.inf  # when the edge gave up (deadline, disconnect)
        self.first_signal = math.nan  # arrival to the first token of a first step's answer
        self.refused_retries = 0  # attempts after a step's first refused for lack of time
        self.refused_starts = 0  # steps' first attempts refused for lack of time
        self.remaining = list(workflow.waiting_for)
        self.unresolved = len(self.remaining)
        # answers: is each step's answer valid (its own and everything it was built on)
        self.valid_steps = [True] * self.unresolved
        self.answered = 0  # steps with an accepted answer
        self.quality_sum = 0.0  # sum of the answering models' quality
        self.valid = False  # set at the end: every required answer valid
        self.quality = math.nan  # set at the end of a delivered run
        self.valid_hit = False  # on time, every required answer valid, quality >= the floor
        self.drafts_kept = 0
        self.drafts_upgraded = 0


@dataclass
class Records:
    """What one simulation produced: every run and every call, as objects (tables come later)."""

    policy: str
    runs: list[Run]
    calls: list[Call]
    #: Seconds any provider's breaker was open (0 without a breaker).
    breaker_open_s: float = 0.0
    #: Tool steps' action records (empty without tool steps).
    actions: list[Action] = field(default_factory=list)
