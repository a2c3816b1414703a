"""What tests in every folder share: the repository's paths, scenario dicts built in a line,
scripted call draws, one-policy simulations, and the `tailsim` command run in-process or as a
process. Import as `from tests.helpers import ...` (pytest runs from the repository root).

Scenario dicts use constant latencies by default so that timelines are exact. `ScriptedBank`
replaces the random per-call draws with scripted ones (first token, generation, stall, outcome per
(step, attempt)), so a policy's timeline can be checked to the exact second.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from click.testing import Result as CliResult

from sim.analysis.metrics import calls_frame, requests_frame
from sim.cli import main
from sim.engine.simulation import Simulation
from sim.model.config import Scenario
from sim.model.latency import ERROR, INVALID, OK, CallDraws, CallLatency
from sim.model.rows import Records
from sim.model.scenario import scenario_from_dict
from sim.model.streams import CallDrawBank, Streams
from sim.plan import Measured, Plan, compile_scenario, resolve, with_seed
from sim.policy.build import build_policy
from sim.policy.plans import Policy
from sim.study.pilot import measure, prepare

# ---------------------------------------------------------------- paths and key paths

#: The repository (the folder holding `sim/` and `tests/`).
REPO_ROOT = Path(__file__).resolve().parents[1]
#: The public contract example, bundled as the default scenario (a user's clone has nothing beside
#: it, so tests never read outside the repository).
CONTRACT_PATH = REPO_ROOT / "scenarios" / "default.yaml"

_KEY_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")

#: An edit mapping a key path to this value deletes the key instead of setting it.
DELETE: Any = ...

WriteYaml = Callable[..., Path]
ScenarioFile = Callable[..., Path]


def key_path_parts(path: str) -> list[str | int]:
    """'workflow.steps[3].after[0]' -> ['workflow', 'steps', 3, 'after', 0], as in messages."""
    parts: list[str | int] = []
    for name, index in _KEY_PART.findall(path):
        parts.append(int(index) if index else name)
    if not parts:
        raise ValueError(f"empty key path {path!r}")
    return parts


def edit_key_path(data: Any, path: str, value: Any) -> None:
    """Set (or, with `...` as value, delete) `path` in nested dicts and lists, in place.

    A list index equal to the list's length appends; missing mapping keys on the way are created.
    """
    *head, last = key_path_parts(path)
    node = data
    for part in head:
        node = node[part] if isinstance(part, int) else node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    elif isinstance(last, int) and last == len(node):
        node.append(value)
    else:
        node[last] = value


# ---------------------------------------------------------------- the command line

#: Wall-time bound on a child process: only a hang reaches it, never a loaded machine.
HANG_S = 900


def tailsim_command() -> list[str]:
    """The installed `tailsim` script beside this Python, else `python -m sim.cli`."""
    script = Path(sys.executable).with_name("tailsim")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sim.cli"]


def run_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `tailsim ARGS` in a fresh process in `cwd`, without colours, capturing its output."""
    env = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "TTY_COMPATIBLE"}}
    env["NO_COLOR"] = "1"
    return subprocess.run(
        [*tailsim_command(), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )


def cli(*args: str | Path) -> CliResult:
    """Invoke the CLI in this process (click's CliRunner); stdout and stderr kept apart."""
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_exit(result: CliResult, code: int) -> None:
    """`result` exited with `code` on purpose: no exception escaped the command."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        pytest.fail(f"the command raised instead of exiting {code}:\n{trace}")
    assert result.exit_code == code, (result.stdout, result.stderr)


# ---------------------------------------------------------------- scenarios and scripted draws

#: Prices of the default models, USD per token.
BIG_IN, BIG_OUT = 1e-6, 2e-6
SMALL_IN, SMALL_OUT = 0.1e-6, 0.2e-6


def const(value: float) -> dict[str, Any]:
    """A constant distribution spec."""
    return {"dist": "constant", "value": value}


def serving(ttft: float = 1.0, tokens_per_s: float = 100.0, **extra: Any) -> dict[str, Any]:
    """A serving spec with constant first-token time and generation speed."""
    return {"ttft_s": const(ttft), "tokens_per_s": const(tokens_per_s), **extra}


def step(step_id: str, *after: str, model: str = "big", **extra: Any) -> dict[str, Any]:
    """A step spec of 1000 input and 100 output tokens, after the named steps."""
    spec: dict[str, Any] = {
        "id": step_id,
        "model": model,
        "input_tokens": 1000,
        "output_tokens": 100,
        **extra,
    }
    if after:
        spec["after"] = list(after)
    return spec


def scenario_dict(
    steps: Sequence[Mapping[str, Any]] | None = None,
    policies: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A small valid scenario: models big/small, providers p1/p2 serving both, one step.

    With the defaults a call of a step takes 1 s to first token plus 100 tokens at 100 tok/s:
    2 s in all, and costs 1000 * 1e-6 + 100 * 2e-6 = 0.0012 USD on `big`.
    """
    data: dict[str, Any] = {
        "name": "unit",
        "seed": 3,
        "deadline_s": 100.0,
        "requests": 10,
        "arrivals": {"kind": "poisson", "rate_per_s": 0.001},
        "models": {
            "big": {"price_per_mtok": {"input": BIG_IN * 1e6, "output": BIG_OUT * 1e6}},
            "small": {"price_per_mtok": {"input": SMALL_IN * 1e6, "output": SMALL_OUT * 1e6}},
        },
        "providers": {
            "p1": {"serves": {"big": serving(), "small": serving()}},
            "p2": {"serves": {"big": serving(), "small": serving()}},
        },
        "workflow": {"steps": [dict(s) for s in (steps or [step("s1")])]},
        "policies": dict(policies or {"wait": {"kind": "wait"}}),
        "pilot": {"requests": 20},
    }
    for key, value in overrides.items():
        data[key] = copy.deepcopy(value)
    return data


def build(
    steps: Sequence[Mapping[str, Any]] | None = None,
    policies: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> Scenario:
    """`scenario_dict(...)` validated into a Scenario."""
    return scenario_from_dict(scenario_dict(steps, policies, **overrides))


@dataclass(frozen=True)
class Draw:
    """One scripted call: first token, generation and stall seconds, drawn outcome."""

    ttft: float = 1.0
    generation: float = 1.0
    stall: float = 0.0
    outcome: int = OK

    @property
    def service(self) -> float:
        """Seconds the call holds its slot when not cut (errors and junk end at first token)."""
        return self.ttft if self.outcome != OK else self.ttft + self.generation + self.stall


def ok(ttft: float = 1.0, generation: float = 1.0, stall: float = 0.0) -> Draw:
    """A call that answers validly."""
    return Draw(ttft, generation, stall, OK)


def error(ttft: float = 1.0) -> Draw:
    """A call that fails with a hard error at first-token time."""
    return Draw(ttft, 1.0, 0.0, ERROR)


def invalid(ttft: float = 1.0) -> Draw:
    """A call that returns junk at first-token time."""
    return Draw(ttft, 1.0, 0.0, INVALID)


Script = Mapping[tuple[str, int], Draw] | Callable[[str, int, int], Draw]


class ScriptedBank(CallDrawBank):
    """A draw bank whose calls are scripted per (step, attempt) instead of drawn.

    `script` maps (step, attempt) to a `Draw` (every request gets the same), or is a function
    (step, attempt, request index) -> Draw. Unscripted calls get `default`.
    """

    def __init__(self, script: Script, n_requests: int = 1, default: Draw | None = None) -> None:
        super().__init__(Streams(0, "scripted"), n_requests)
        self.script = script
        self.default = default or ok()

    def _draw(self, step_id: str, attempt: int, index: int) -> Draw:
        if callable(self.script):
            return self.script(step_id, attempt, index)
        return self.script.get((step_id, attempt), self.default)

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
        """The scripted draws of this call slot for every request index (SDK retries of a
        policy attempt get the same script as the attempt)."""
        rows = [self._draw(step, attempt, i) for i in range(self.n_requests)]
        return CallDraws(
            [d.ttft for d in rows],
            [d.generation for d in rows],
            [d.stall for d in rows],
            [d.outcome for d in rows],
        )


@dataclass
class Result:
    """Tables of one simulated policy (plus the raw records)."""

    records: Records
    requests: pd.DataFrame
    calls: pd.DataFrame


def simulate(
    scenario: Scenario,
    policy: str,
    bank: CallDrawBank | None = None,
    arrivals: Sequence[float] = (0.0,),
    thresholds: Mapping[str, float] | None = None,
    seed: int = 0,
) -> Result:
    """Run one policy of `scenario` on the given arrival times and draws (no pilot run)."""
    plan = compile_scenario(scenario)
    runtime = build_policy(
        policy, scenario.policies[policy], plan.routes, plan.workflow.steps, dict(thresholds or {})
    )
    streams = Streams(seed, "main")
    if bank is None:
        bank = CallDrawBank(streams.child("calls"), len(arrivals))
    sim = Simulation(plan, runtime, bank, streams)
    records = sim.run(np.asarray(arrivals, dtype=float))
    return Result(records, requests_frame(records), calls_frame(records))


def timeline(calls: pd.DataFrame) -> list[tuple[str, int, str, str, float, float, str]]:
    """(step, attempt, provider, model, start_s, end_s, outcome) of each call, by start time."""
    ordered = calls.sort_values(["start_s", "step", "attempt"], kind="stable")
    return [
        (
            str(r.step),
            int(r.attempt),
            str(r.provider),
            str(r.model),
            round(float(r.start_s), 9),
            round(float(r.end_s), 9),
            str(r.outcome),
        )
        for r in ordered.itertuples()
    ]


def scenario_dict_with(edit: dict[str, Any]) -> dict[str, Any]:
    """A one-step, one-policy ('p': wait) scenario dict with `edit` merged into the workflow,
    its first step or the policy."""
    data = scenario_dict([step("s1")], {"p": {"kind": "wait"}})
    data["workflow"] |= edit.get("workflow", {})
    data["workflow"]["steps"][0] |= edit.get("step", {})
    data["policies"]["p"] |= edit.get("policy", {})
    return data


def plan_of(scenario: Scenario) -> Plan:
    """The compiled plan of a scenario (resolved at once when nothing needs the pilot)."""
    return compile_scenario(scenario)


def resolved_plan(scenario: Scenario, seed: int | None = None) -> Plan:
    """The plan of `scenario` on `seed` (default: its own), the pilot run where needed."""
    plan = compile_scenario(scenario)
    return prepare(with_seed(plan, plan.seed if seed is None else seed))[0]


def thresholds(
    scenario: Scenario, seed: int | None = None, latencies: Measured | None = None
) -> dict[str, dict[str, float]]:
    """Per policy and LLM step, the main threshold in seconds (the pilot's on `seed`, or
    resolved from `latencies` when given)."""
    plan = compile_scenario(scenario)
    if latencies is not None:
        plan = resolve(plan, latencies)
    else:
        plan = prepare(with_seed(plan, plan.seed if seed is None else seed))[0]
    return {name: dict(p.thresholds) for name, p in plan.policies.items()}


def pilot_samples(scenario: Scenario, seed: int | None = None) -> Measured:
    """The pilot's samples of `scenario` on `seed` (default: its own)."""
    return measure(compile_scenario(scenario), seed)


def runtime_of(scenario: Scenario, name: str, seed: int | None = None) -> Policy:
    """Policy `name`'s runtime with its thresholds resolved by the pilot on `seed`."""
    return resolved_plan(scenario, seed).runtime(name)
