"""A policy kind is one module: outside the format (`sim/model`) and the registry, each kind's
name appears as code only in its own module of `sim/policy/kinds/`.

"As code" means what dispatches on a kind: its name compared, matched, looked up or passed as
`kind=`; its spec class or runtime class under `isinstance`/`issubclass` or compared (`type(x)
is ...`); its runtime class named at all. A scenario written as data (`{"kind": "race", ...}`,
the format's own text) and policy *names* that happen to be kind names ("wait" as a baseline)
are not dispatch and are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sim.model.config as config
from sim.policy.kinds import KINDS
from sim.policy.plans import Policy
from tests.helpers import REPO_ROOT

SIM = REPO_ROOT / "sim"
REGISTRY = SIM / "policy" / "kinds" / "__init__.py"


def _home(kind: str) -> Path:
    """The module a kind lives in (the module of its `build`)."""
    module = KINDS[kind].build.__module__
    return REPO_ROOT / (module.replace(".", "/") + ".py")


def _runtime_classes() -> dict[str, str]:
    """Runtime policy class name -> its kind (each `Policy` subclass of a kind's module)."""
    found: dict[str, str] = {}
    for name in KINDS:
        tree = ast.parse(_home(name).read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == Policy.__name__ for b in node.bases
            ):
                found.setdefault(node.name, name)
    return found


def _owners() -> tuple[dict[str, set[Path]], dict[str, set[Path]]]:
    """(kind name -> modules allowed to name it, class name -> modules allowed to name it)."""
    names = {name: {_home(name)} for name in KINDS}
    classes = {kind.spec.__name__: {_home(name)} for name, kind in KINDS.items()}
    for cls, name in _runtime_classes().items():
        classes[cls] = {_home(name)}
    return names, classes


def _strings(node: ast.AST) -> list[str]:
    """String constants of `node` itself or of a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
    return []


def _class_names(node: ast.AST) -> list[str]:
    """Class names `node` is made of: `WaitPolicy`, `kinds.Race`, `A | B`, `(A, B)` (not what
    a call returns: comparing two specs is no dispatch)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.BinOp):
        return _class_names(node.left) + _class_names(node.right)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [n for e in node.elts for n in _class_names(e)]
    return []


def uses(tree: ast.AST, kinds: set[str], classes: set[str]) -> list[tuple[int, str]]:
    """(line, what) for every place `tree` dispatches on a kind name or class as code."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += [(node.lineno, f"compares {s!r}") for s in _strings(side) if s in kinds]
                found += [(node.lineno, f"compares {c}") for c in _class_names(side)
                          if c in classes]  # fmt: skip
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, f"matches {s!r}") for s in _strings(node.value) if s in kinds]
        elif isinstance(node, ast.Subscript):
            found += [(node.lineno, f"looks up {s!r}") for s in _strings(node.slice) if s in kinds]
        elif isinstance(node, ast.keyword) and node.arg == "kind":
            found += [(node.lineno, f"kind={s!r}") for s in _strings(node.value) if s in kinds]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            found += [(node.lineno, f"isinstance {c}") for c in _class_names(node.args[1])
                          if c in classes]  # fmt: skip
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"imports {a.name}") for a in node.names
                      if a.name in classes and not a.name.endswith("Policy")]  # fmt: skip
        elif isinstance(node, ast.Name) and node.id in classes and not node.id.endswith("Policy"):
            found.append((node.lineno, f"names {node.id}"))
    return found


def _modules() -> list[Path]:
    """Every module of `sim/` outside the format and the registry."""
    return [p for p in sorted(SIM.rglob("*.py"))
            if (SIM / "model") not in p.parents and p != REGISTRY]  # fmt: skip


def test_every_kind_of_the_format_is_registered() -> None:
    assert set(KINDS) == set(config.POLICY_KINDS)
    for name, kind in KINDS.items():
        assert kind.spec.model_fields["kind"].annotation.__args__ == (name,)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_kind_is_named_as_code_in_its_own_module_only(kind: str) -> None:
    names, classes = _owners()
    mine = {c for c, homes in classes.items() if _home(kind) in homes}
    others = []
    for path in _modules():
        if path in names[kind]:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for line, what in uses(tree, {kind}, mine):
            others.append(f"{path.relative_to(REPO_ROOT)}:{line}: {what}")
    assert not others, f"kind {kind!r} is named as code outside {_home(kind).name}:\n" + "\n".join(
        others
    )


def test_the_scan_sees_the_dispatch_it_forbids() -> None:
    """The scanner catches each form of dispatch (so the test above cannot pass by seeing
    nothing), and lets a scenario written as data through."""
    code = """
from sim.policy.kinds.race import Race
if spec.kind == "race": pass
if kind in ("race", "hedge"): pass
x = KINDS["race"]
y = RacePolicy(kind="race")
if isinstance(spec, RacePolicy | HedgePolicy): pass
if type(policy) is Race: pass
match kind:
    case "race": pass
data = {"policies": {"fast": {"kind": "race", "attempts": 2}}}
baseline = "race"
"""
    found = uses(ast.parse(code), {"race"}, {"RacePolicy", "Race"})
    lines = sorted({line for line, _ in found})
    assert lines == [2, 3, 4, 5, 6, 7, 8, 10]
