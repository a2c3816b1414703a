"""Side-effect steps (`kind: tool`): an external action, its record, and the remote's memory.

An action is recorded before it is sent (planned), then submitted; the remote commits it after
its own latency whatever happens to the workflow (cancellation cannot undo accepted work), and
its confirmation reaches the workflow later. If the workflow stops waiting first (its deadline,
a budget, a disconnect) the outcome is unknown: it is reconciled, not re-submitted blindly. A
non-idempotent action submitted again (a customer re-send, an orphaned run finishing late)
commits again: a duplicate; with an idempotency key the remote recognises the second submit.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
import simpy

from sim.model.latency import Distribution, build_distribution
from sim.model.rows import CONFIRMED, FAILED, SUBMITTED, UNKNOWN, Action
from sim.policy.deadlines import admits

if TYPE_CHECKING:
    from sim.model.rows import Records, Run
    from sim.model.streams import CallDrawBank
    from sim.model.workflow import Step
    from sim.policy.deadlines import DeadlineRules


class ToolStepRun(Protocol):
    """What a tool step needs of the engine's handle on it (the engine's step run provides it)."""

    step: Step
    run: Run
    last_outcome: str

    @property
    def time_left(self) -> float:
        """Seconds until the request's deadline."""
        ...

    def limit(self, own: float | None, attempt_budget: float | None) -> tuple[float | None, str]:
        """Seconds this attempt may last and the budget that binds (None: no limit)."""
        ...

    def refuse(self, attempt: int, sdk: int = 0) -> None:
        """Count an attempt refused for lack of time."""
        ...


ACTION_COLUMNS = (
    "policy", "request_id", "resend", "step", "attempt", "idempotency_key", "planned_s",
    "submitted_s", "committed_s", "answered_s", "state", "recognised", "duplicate", "late",
    "ended_by",
)  # fmt: skip


class ToolDesk:
    """The tool steps of one simulation and the remote systems behind them: which idempotency
    keys each remote has seen and how many effects each request's step has had."""

    def __init__(
        self,
        env: simpy.Environment,
        bank: CallDrawBank,
        rules: DeadlineRules,
        steps: tuple[Step, ...] | list[Step],
        actions: list[Action],
    ) -> None:
        # what it needs of the simulation, not the simulation itself: no reference cycle, so
        # a finished simulation and its records are freed at once, not by the cycle collector
        self.env = env
        self.bank = bank
        self.rules = rules
        self.steps = steps
        self.actions = actions
        self.keys: set[str] = set()
        self.effects: dict[tuple[int, str], int] = {}
        self.laws: dict[str, tuple[Distribution, Distribution]] = {}

    def _law(self, step_id: str) -> tuple[Distribution, Distribution]:
        law = self.laws.get(step_id)
        if law is None:
            tool = next(s.tool for s in self.steps if s.id == step_id)
            assert tool is not None
            law = (build_distribution(tool.commit_s), build_distribution(tool.confirm_s))
            self.laws[step_id] = law
        return law

    def execute(self, handle: ToolStepRun) -> Generator[simpy.Event, Any, bool]:
        """Run a tool step: submit, wait for the answer within the step's limits, re-submit
        only after a refusal (transient) or, when idempotent, after an unknown outcome."""
        step, run, env = handle.step, handle.run, self.env
        tool = step.tool
        assert tool is not None
        bank = self.bank
        commit_law, confirm_law = self._law(step.id)
        key = f"{run.index}:{step.id}" if tool.idempotent else ""
        expected = self.rules.expected
        for attempt in range(tool.retries + 1):
            if run.closed:
                return False
            action = Action(run, step.id, attempt, key, env.now)
            self.actions.append(action)
            limit, by = handle.limit(None, step.attempt_budget_s)
            if limit is not None and limit <= 0:
                handle.refuse(attempt)
                return False
            if expected is not None and not admits(handle.time_left, 0.0, expected[step.id]):
                handle.refuse(attempt)
                return False
            u = [bank.uniform(run.index, name, step.id, attempt, run.resend) for name in _DRAWS]
            commit_s = float(commit_law.from_uniform(np.asarray([u[0]]))[0])
            refused = u[2] < tool.error_rate
            answer_s = commit_s + (
                0.0 if refused else float(confirm_law.from_uniform(np.asarray([u[1]]))[0])
            )
            action.submitted, action.state = env.now, SUBMITTED
            self._remote(action, commit_s, refused)
            process = env.active_process
            run.active.add(process)
            try:
                if limit is None or answer_s <= limit:
                    yield env.timeout(answer_s)
                    action.answered = env.now
                    action.state = FAILED if refused else CONFIRMED
                else:
                    yield env.timeout(limit)
                    action.state, action.ended_by = UNKNOWN, by
            except simpy.Interrupt as stop:  # deadline, disconnect: stop waiting, not the remote
                action.state, action.ended_by = UNKNOWN, str(stop.cause)
                handle.last_outcome = UNKNOWN
                return False
            finally:
                run.active.discard(process)
            handle.last_outcome = action.state
            if action.state == CONFIRMED:
                return True
            if action.state == UNKNOWN and not tool.idempotent:
                return False  # reconcile: a blind re-submit could do it twice
        return False

    def _remote(self, action: Action, commit_s: float, refused: bool) -> None:
        """The remote receives a submit: it refuses it, recognises its key, or commits it
        `commit_s` later whatever the workflow does meanwhile."""
        if refused:
            return
        if action.key:
            if action.key in self.keys:
                action.recognised = True
                return
            self.keys.add(action.key)
        effect = (action.run.index, action.step)

        def commit(_: simpy.Event) -> None:
            action.committed = self.env.now
            count = self.effects.get(effect, 0) + 1
            self.effects[effect] = count
            action.duplicate = count > 1
            action.late = self.env.now > action.run.deadline_at

        self.env.timeout(commit_s).callbacks.append(commit)


#: Named per-request streams of a submit: commit time, confirmation time, refusal.
_DRAWS = ("tool-commit", "tool-confirm", "tool-error")


def actions_frame(records: Records) -> pd.DataFrame:
    """One row per action record (seconds from the simulation start)."""
    return _frame(records.policy, records.actions)


def no_actions() -> pd.DataFrame:
    """An actions table with no rows (its columns typed as `actions_frame`'s)."""
    return _frame("", [])


def _frame(policy: str, actions: list[Action]) -> pd.DataFrame:
    actions = sorted(
        actions, key=lambda a: (a.run.index, a.run.resend, a.planned, a.step, a.attempt)
    )
    n = len(actions)
    return pd.DataFrame(
        {
            "policy": pd.Series([policy] * n, dtype="string"),
            "request_id": np.fromiter((a.run.index for a in actions), np.int64, n),
            "resend": np.fromiter((a.run.resend for a in actions), np.int64, n),
            "step": pd.Series([a.step for a in actions], dtype="string"),
            "attempt": np.fromiter((a.attempt for a in actions), np.int64, n),
            "idempotency_key": pd.Series([a.key for a in actions], dtype="string"),
            "planned_s": np.fromiter((a.planned for a in actions), float, n),
            "submitted_s": np.fromiter((a.submitted for a in actions), float, n),
            "committed_s": np.fromiter((a.committed for a in actions), float, n),
            "answered_s": np.fromiter((a.answered for a in actions), float, n),
            "state": pd.Series([a.state for a in actions], dtype="string"),
            "recognised": np.fromiter((a.recognised for a in actions), bool, n),
            "duplicate": np.fromiter((a.duplicate for a in actions), bool, n),
            "late": np.fromiter((a.late for a in actions), bool, n),
            "ended_by": pd.Series([a.ended_by for a in actions], dtype="string"),
        },
        columns=list(ACTION_COLUMNS),
    )


def action_counts(actions: pd.DataFrame) -> dict[str, int]:
    """The summary's action counts of one policy's actions table."""
    return {
        "duplicate_actions": int(actions["duplicate"].sum()),
        "late_actions": int(actions["late"].sum()),
        "unknown_actions": int((actions["state"] == UNKNOWN).sum()),
    }
