"""`tailsim drive` as a library call: a team's own async handler run in simulated time.

`drive(scenario, handler)` runs `handler(request, clients)` for every arrival of the scenario
against its simulated providers (`sim.harness`), beside the scenario's policies named in
`compare`, and returns the run's tables; `drive_to_folder` writes them as `tailsim run` does.
`load_handler` turns `package.module:function` or `path/to/file.py:function` into the function.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.api.inputs import ScenarioLike, optional_path, plan_of, source_of
from sim.api.options import check_force, label
from sim.api.results import RunResult
from sim.api.run import chosen_policies
from sim.model.errors import ScenarioError
from sim.model.version import __version__
from sim.output.results import check_writable, default_folder, write_results
from sim.plan import Plan, with_seed

#: What a handler spec looks like, for messages.
SPEC_FORM = "package.module:function or path/to/file.py:function"


def load_handler(spec: str) -> Callable[..., Any]:
    """The async function `spec` names: `package.module:function` (imported from the current
    folder too, as `python -m` would) or `path/to/file.py:function`."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise ScenarioError(spec, [("", f"expected {SPEC_FORM}")])
    try:
        if where.endswith(".py") or "/" in where:
            path = Path(where)
            if not path.is_file():
                raise ScenarioError(spec, [("", f"file not found: {path}")])
            module_name = f"tailsim_handler_{path.stem}"
            found = importlib.util.spec_from_file_location(module_name, path)
            if found is None or found.loader is None:
                raise ScenarioError(spec, [("", f"not a Python file: {path}")])
            module = importlib.util.module_from_spec(found)
            sys.modules[module_name] = module
            found.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(where)
    except ScenarioError:
        raise
    except Exception as error:  # the user's module failed to import: say why, no traceback
        raise ScenarioError(spec, [("", f"cannot import {where}: "
                                        f"{type(error).__name__}: {error}")]) from None  # fmt: skip
    handler = getattr(module, name, None)
    if handler is None:
        names = [n for n, v in vars(module).items()
                 if inspect.iscoroutinefunction(v) and not n.startswith("_")]  # fmt: skip
        raise ScenarioError(spec, [("", f"{where} has no {name!r}; its async functions: "
                                        f"{', '.join(names) or 'none'}")])  # fmt: skip
    _check_handler(handler, spec)
    return handler


def _check_handler(handler: Any, spec: str) -> None:
    if not inspect.iscoroutinefunction(handler):
        raise ScenarioError(spec, [("", "expected an async function "
                                        "`async def handle(request, clients)`")])  # fmt: skip


def drive(
    scenario: ScenarioLike = None,
    handler: Callable[..., Any] | str | None = None,
    *,
    name: str | None = None,
    requests: int | None = None,
    seed: int | None = None,
    compare: Sequence[str] | bool = (),
    progress: Callable[[str, int], None] | None = None,
) -> RunResult:
    """Run `handler` (an async function, or its spec) over `scenario`'s arrivals on its
    simulated providers, as policy `name` (default: the function's name); `compare` names
    scenario policies run beside it on the same arrivals and draws (True: all of them)."""
    if handler is None:
        raise ScenarioError("handler", [("", f"expected an async function or {SPEC_FORM}")])
    function = load_handler(handler) if isinstance(handler, str) else handler
    _check_handler(function, getattr(function, "__name__", repr(function)))
    from sim.harness.runner import drive as drive_run  # noqa: PLC0415 - the SDKs on demand

    plan = _sized(plan_of(scenario), requests, seed)
    names = _compared(plan, compare)
    policy_name = name or function.__name__
    result = drive_run(plan, function, policy_name, compare=names, progress=progress)
    return RunResult.of(result)


def drive_to_folder(
    scenario: ScenarioLike,
    handler: Callable[..., Any] | str,
    out: str | Path | None = None,
    *,
    force: bool = False,
    figures: bool = True,
    name: str | None = None,
    requests: int | None = None,
    seed: int | None = None,
    compare: Sequence[str] | bool = (),
    progress: Callable[[list[str], int], Callable[[str, int], None] | None] | None = None,
) -> tuple[RunResult, Path]:
    """`drive`, its tables written to `out` (results/<name>/<time>/ without it) as `tailsim
    run` writes them; everything is checked before any work. Returns the result and folder."""
    check_force(force, out)
    folder_given = optional_path(out, label("out"))
    plan = plan_of(scenario)
    function = load_handler(handler) if isinstance(handler, str) else handler
    folder = folder_given if folder_given is not None else default_folder(plan.name)
    check_writable(folder, overwrite=force or folder_given is None)
    sized = _sized(plan, requests, seed)
    policy_name = name or function.__name__
    names = _compared(sized, compare)
    tick = progress([policy_name, *names], sized.requests) if progress is not None else None
    result = drive(sized, function, name=policy_name, compare=names, progress=tick)
    written = write_results(result, folder, source_of(scenario), __version__, figures=figures,
                            overwrite=force, unique=folder_given is None)  # fmt: skip
    return result, written


def _sized(plan: Plan, requests: int | None, seed: int | None) -> Plan:
    """`plan` at the run's size and seed; a scenario whose customers re-send or hang up is
    refused (the harness runs each arrival once through the handler)."""
    customers = plan.customers
    if customers.retry.max > 0 and customers.retry.probability > 0:
        raise ScenarioError(plan.source, [("customers.retry", "re-sends are not driven yet: "
                                           "tailsim drive runs each arrival once; set "
                                           "probability: 0 (or max: 0)")])  # fmt: skip
    if customers.disconnect is not None:
        why = "hang-ups are not driven yet: leave the key out for tailsim drive"
        raise ScenarioError(plan.source, [("customers.disconnect", why)])
    if requests is not None:
        if requests < 1:
            raise ScenarioError(plan.source, [("requests", f"must be >= 1, got {requests}")])
        plan = replace(plan, requests=requests)
    return with_seed(plan, plan.seed if seed is None else seed)


def _compared(plan: Plan, compare: Sequence[str] | bool) -> list[str]:
    if compare is True:
        return chosen_policies(plan, None)
    if compare is False or not compare:
        return []
    return chosen_policies(plan, list(compare))  # type: ignore[arg-type]
