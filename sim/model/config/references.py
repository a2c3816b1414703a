"""Cross-references of a scenario: names that must point at something that exists.

Steps' models and providers, dependencies between steps (and their cycles), policies' providers
and models, and token quotas too small for any call. It works on plain, possibly invalid data,
so a typo elsewhere in the file does not hide a reference problem (`sim.model.scenario` reports
both together); `Scenario` runs it again on valid data.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

from sim.model.config.policies import MODEL_FIELDS
from sim.model.config.router import router_problems
from sim.model.errors import Path


def reference_problems(data: Any) -> list[tuple[Path, str]]:
    """Every cross-reference problem of scenario data, each with its key path.

    Works on plain (possibly invalid) data, so a typo elsewhere in the file does not hide a
    reference problem: parts of the wrong shape are skipped here (field validation names them).
    """
    data = _mapping(data)
    models = set(_mapping(data.get("models")))
    providers = {k: _mapping(v) for k, v in _mapping(data.get("providers")).items()}
    serves = {p: set(_mapping(spec.get("serves"))) for p, spec in providers.items()}
    problems: list[tuple[Path, str]] = []
    for pname, served in serves.items():
        for mname in served:
            if models and mname not in models:
                where = ("providers", pname, "serves", mname)
                problems.append((where, f"unknown model '{mname}'{_choices(mname, models)}"))
    steps = [_mapping(s) for s in _sequence(_mapping(data.get("workflow")).get("steps"))]
    problems += _step_problems(steps, models, serves)
    problems += _policy_problems(_mapping(data.get("policies")), models, serves, steps)
    problems += _quota_problems(providers, steps)
    return problems


def _step_problems(
    steps: list[dict[str, Any]], models: set[str], serves: dict[str, set[str]]
) -> list[tuple[Path, str]]:
    problems: list[tuple[Path, str]] = []
    ids = [s.get("id") for s in steps]
    seen: dict[Any, int] = {}
    for i, step in enumerate(steps):
        base: Path = ("workflow", "steps", i)
        sid, model, provider = step.get("id"), step.get("model"), step.get("provider")
        if isinstance(sid, str) and sid in seen:
            problems.append(((*base, "id"), f"duplicate step id '{sid}' (also steps[{seen[sid]}])"))
        seen.setdefault(sid, i)
        if not isinstance(model, str) or not models:
            pass
        elif model not in models:
            problems.append(((*base, "model"), f"unknown model '{model}'{_choices(model, models)}"))
        elif isinstance(provider, str):
            if provider not in serves:
                problems.append(
                    (
                        (*base, "provider"),
                        f"unknown provider '{provider}'{_choices(provider, serves)}",
                    )
                )
            elif model not in serves[provider]:
                problems.append(
                    ((*base, "provider"), f"provider '{provider}' does not serve model '{model}'")
                )
        elif serves and not any(model in served for served in serves.values()):
            problems.append(((*base, "model"), f"no provider serves model '{model}'"))
        for j, dep in enumerate(_sequence(step.get("after"))):
            if not isinstance(dep, str):
                continue
            if dep not in ids:
                where = ("workflow", "steps", i, "after", j)
                known = [x for x in ids if isinstance(x, str)]
                problems.append((where, f"unknown step '{dep}'{_choices(dep, known)}"))
            elif dep == sid:
                problems.append(
                    (("workflow", "steps", i, "after", j), "a step cannot come after itself")
                )
    if len(seen) == len(steps):  # with duplicate ids a "cycle" would be an artefact
        graph = {
            str(s.get("id")): [
                d for d in _sequence(s.get("after")) if d in ids and d != s.get("id")
            ]
            for s in steps
        }
        cycle = _find_cycle(graph)
        if cycle:
            problems.append((("workflow", "steps"), "dependency cycle: " + " -> ".join(cycle)))
    return problems


def _policy_problems(
    policies: dict[str, Any],
    models: set[str],
    serves: dict[str, set[str]],
    steps: list[dict[str, Any]],
) -> list[tuple[Path, str]]:
    problems: list[tuple[Path, str]] = []
    for name, raw in policies.items():
        policy = _mapping(raw)
        for j, pname in enumerate(_sequence(policy.get("providers"))):
            if isinstance(pname, str) and serves and pname not in serves:
                problems.append(
                    (
                        ("policies", name, "providers", j),
                        f"unknown provider '{pname}'{_choices(pname, serves)}",
                    )
                )
        for field in MODEL_FIELDS.get(str(policy.get("kind")), ()):
            target = policy.get(field)
            if not isinstance(target, str) or not models:
                continue
            if target not in models:
                problems.append(
                    (
                        ("policies", name, field),
                        f"unknown model '{target}'{_choices(target, models)}",
                    )
                )
            elif serves and not any(target in served for served in serves.values()):
                problems.append((("policies", name, field), f"no provider serves model '{target}'"))
        if policy.get("kind") == "router":
            problems += router_problems(name, policy, models, serves)
    return problems


def _quota_problems(
    providers: dict[str, dict[str, Any]], steps: list[dict[str, Any]]
) -> list[tuple[Path, str]]:
    """Token quotas (provider-wide or per model) too small to ever admit one call."""

    def number(value: Any, default: int) -> int | None:
        if value is None:
            return default
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    problems: list[tuple[Path, str]] = []
    for pname, spec in providers.items():
        reserve = spec.get("charge") == "max_tokens"
        needs: dict[str, list[tuple[str, int, int]]] = {}
        for s in steps:
            inp, out = number(s.get("input_tokens"), 1000), number(s.get("output_tokens"), 200)
            if inp is None or out is None:
                continue
            if reserve:
                out = number(s.get("max_tokens"), out) or out
            needs.setdefault(str(s.get("model")), []).append((str(s.get("model")), inp, out))
        served = _mapping(spec.get("serves"))
        scopes: list[tuple[Path, dict[str, Any], list[tuple[str, int, int]]]] = [
            (("providers", pname), spec, [n for m in served for n in needs.get(m, [])])
        ]
        scopes += [
            (("providers", pname, "serves", m), _mapping(served[m]), needs.get(m, []))
            for m in served
        ]
        for where, limits, calls in scopes:
            for key, size in (
                ("tpm", lambda c: c[1] + c[2]),
                ("input_tpm", lambda c: c[1]),
                ("output_tpm", lambda c: c[2]),
            ):
                limit = limits.get(key)
                biggest = max((size(c) for c in calls), default=0)
                if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < biggest:
                    problems.append(
                        (
                            (*where, key),
                            f"must be at least one call's tokens ({biggest}), "
                            "or no call is ever admitted",
                        )
                    )
    return problems


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sequence(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One dependency cycle in `graph` (node -> prerequisites), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state and (found := visit(node)):
            return found
    return None


def _choices(value: str, allowed: Any) -> str:
    """' (did you mean ...? known: ...)' for an unknown name."""
    names = sorted(allowed)
    close = get_close_matches(value, names, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f" ({hint}known: {', '.join(names)})"
