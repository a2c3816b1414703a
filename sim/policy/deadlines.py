"""One deadline through every step: the rules a policy runs under and the arithmetic of budgets.

A request's time is split into budgets kept apart: queue wait (per call), attempt (per call),
step (queue waits and retries together) and the workflow's deadline, of which `reserve_s` is
kept back for validation and delivery. `DeadlineRules` holds one policy's choices (propagate the
deadline or not, admission by expected attempt time); `attempt_limit` says how long an attempt
may run and which budget binds; `admits` is the deadline-aware admission rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# What ended a call early (the `ended_by` column); "" when it ended on its own.
BY_QUEUE = "queue"  # waited past its step's queue_budget_s for a slot
BY_ATTEMPT = "attempt"  # cut at its attempt budget (the policy's cut or attempt_budget_s)
BY_STEP = "step"  # cut when its step's budget_s ran out
BY_DEADLINE = "deadline"  # cut or cancelled by the request's deadline (less reserve_s)
BY_ADMISSION = "admission"  # picked up with too little time left to finish: never served
BY_LOSER = "loser"  # a race or hedge attempt cancelled because another answered
BY_RUN = "run"  # cancelled because its run failed elsewhere (a required step)
BY_DISCONNECT = "disconnect"  # cancelled because the caller hung up
BY_SDK = "sdk"  # cut by the provider client's own per-attempt timeout (sdk.timeout_s)
BY_TTFT = "first_token"  # no first token by the attempt's first_token_timeout_s
BY_IDLE = "idle"  # no token for the attempt's idle_timeout_s (a mid-stream stall)
ENDED_BY = (
    "", BY_QUEUE, BY_ATTEMPT, BY_STEP, BY_DEADLINE, BY_ADMISSION, BY_LOSER, BY_RUN, BY_DISCONNECT,
    BY_SDK, BY_TTFT, BY_IDLE,
)  # fmt: skip
#: The budgets the summary's breach_* columns count, in order.
BUDGETS = (BY_QUEUE, BY_ATTEMPT, BY_STEP, BY_DEADLINE)


@dataclass(frozen=True)
class DeadlineRules:
    """How one policy's work sees its request's deadline.

    `propagate`: the deadline reaches every call (cancelled at it; attempts get the time left
    minus `reserve_s`); without it, nothing below the edge knows the deadline and the work runs
    on. `expected[step]`: the expected attempt time admission uses (None: admission off).
    """

    propagate: bool = True
    reserve_s: float = 0.0
    expected: dict[str, float] | None = field(default=None)

    @property
    def admission(self) -> bool:
        """True when attempts are admitted by the time left."""
        return self.expected is not None

    @property
    def caps_attempts(self) -> bool:
        """True when attempts are cut at the deadline less the reserve (rather than being
        cancelled by the deadline itself, which is the same instant when the reserve is 0)."""
        return self.propagate and (self.reserve_s > 0 or self.expected is not None)


def attempt_limit(
    now: float,
    own: float | None,
    attempt_budget: float | None,
    step_end: float,
    work_end: float,
) -> tuple[float | None, str]:
    """(seconds an attempt starting `now` may run, the budget that binds): the least of its
    own cut `own` (the policy's), the step's `attempt_budget`, what is left of the step's
    budget (until `step_end`) and of the request's time (until `work_end`: the deadline less the
    reserve, inf when the attempt is not capped by it). None: no limit."""
    limit, by = own, BY_ATTEMPT
    if attempt_budget is not None and (limit is None or attempt_budget < limit):
        limit = attempt_budget
    if step_end < math.inf and (limit is None or step_end - now < limit):
        limit, by = step_end - now, BY_STEP
    if work_end < math.inf and (limit is None or work_end - now <= limit):
        limit, by = work_end - now, BY_DEADLINE
    return limit, by


def admits(time_left: float, wait: float, expected: float) -> bool:
    """The admission rule: an attempt after `wait` seconds, expected to take `expected`, starts
    only if the time left (already less the reserve) exceeds both."""
    return time_left > wait + expected
