"""Which engine runs a policy: the vectorized one where it gives the event engine's numbers.

`vectorized_tables` is the runner's hook: under `engine: auto` it returns the vectorized tables
when the policy run qualifies (`sim.qualify.qualifies`) and no provider limit would have bound
on the computed calls, else None with the reason (the event engine then runs it); under
`engine: vectorized` a run that does not qualify is a `ScenarioError` naming why.
"""

from __future__ import annotations

import numpy as np

from sim.config import Scenario
from sim.errors import ScenarioError
from sim.latency import CallLatency
from sim.policies import Hedge, PerStep, Policy, Race, Sequential
from sim.qualify import limit_that_binds, qualifies
from sim.streams import CallDrawBank
from sim.vectorized import UnsupportedError, VectorTables, simulate, tables

ENGINES = ("auto", "des", "vectorized")
#: Names of the engines as reported (RunResult.engines, run.json, the printed line).
DES, VECTORIZED = "des", "vectorized"


def vectorized_tables(
    scenario: Scenario,
    policy: Policy,
    bank: CallDrawBank,
    arrivals: np.ndarray,
    engine: str,
    latencies: dict[tuple[str, str], CallLatency] | None = None,
) -> tuple[VectorTables | None, str]:
    """(tables, "") from the vectorized engine, or (None, why it did not run)."""
    if engine not in ENGINES:
        raise ScenarioError(scenario.name, [("engine", f"got {engine!r}, allowed: {ENGINES}")])
    if engine == DES:
        return None, "engine: des"
    policy = single_policy(policy)
    usable, reason = qualifies(scenario, policy)
    if usable:
        try:
            runs, calls = simulate(scenario, policy, bank, arrivals, latencies=latencies)
        except UnsupportedError as exc:
            reason = str(exc)
        else:
            binds = limit_that_binds(
                scenario, calls.provider, calls.start, calls.end, calls.quota_tokens
            )
            if binds is None:
                return tables(scenario, policy.name, runs, calls), ""
            reason = binds
    if engine == VECTORIZED:
        raise ScenarioError(
            scenario.name,
            [("engine", f"the vectorized engine cannot run policy '{policy.name}': {reason}")],
        )
    return None, reason


def single_policy(policy: Policy) -> Policy:
    """A per-step policy whose steps all run the same class with the same settings (a cutoff
    resolved to different seconds per step makes one) as one policy of that class with every
    step's plans; anything else as it is."""
    if not isinstance(policy, PerStep):
        return policy
    flat = _merged(policy)
    if flat is not policy:
        flat.controls = policy.controls
    return flat


def _merged(policy: PerStep) -> Policy:
    """`single_policy` of a PerStep (without its controls)."""
    members = list(dict.fromkeys(policy.by_step.values()))
    kinds = {type(m) for m in members}
    if len(kinds) != 1:
        return policy
    kind, first = kinds.pop(), members[0]
    if kind is Sequential and all(m.backoff == first.backoff for m in members):  # type: ignore[attr-defined]
        plans = {s: m.plans[s] for s, m in policy.by_step.items()}  # type: ignore[attr-defined]
        return Sequential(policy.name, plans, first.backoff)  # type: ignore[attr-defined]
    if kind is Race and all(m.backoff == first.backoff for m in members):  # type: ignore[attr-defined]
        rounds = {s: m.rounds[s] for s, m in policy.by_step.items()}  # type: ignore[attr-defined]
        return Race(policy.name, rounds, first.backoff)  # type: ignore[attr-defined]
    if kind is Hedge:
        plans = {s: m.plans[s] for s, m in policy.by_step.items()}  # type: ignore[attr-defined]
        after = {s: m.after[s] for s, m in policy.by_step.items()}  # type: ignore[attr-defined]
        return Hedge(policy.name, plans, after)
    return policy
