"""The tests' own layout (tests/README.md): a folder per subject, every test that drives the CLI
or runs whole simulations under tests/integration/, one way to import the shared helpers, and
files named after what they test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

TESTS = REPO_ROOT / "tests"
INTEGRATION = TESTS / "integration"
#: Folders of test data, not tests.
DATA = (TESTS / "data", INTEGRATION / "golden" / "records")
#: What drives the CLI or runs a whole simulation through the public API.
WHOLE = re.compile(
    r"\bCliRunner\b|\bassert_exit\b|\btailsim_command\b|\brun_process\b|from sim\.cli import main"
    r"|\bsim\.(run|sweep|report|nines)\(|from sim import|from sim\.study\.runner import run\b"
)
#: Ways of importing the helpers other than `from tests.helpers import ...`.
OTHER_IMPORTS = re.compile(r"^\s*(from|import) (helpers|tests\.unit|conftest|test_\w+)\b", re.M)
#: Words of an event, not a subject.
EVENT_WORDS = re.compile(r"deliberate|mutation|must_show|issue|audit|regression|bugs?\b")


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if not any(p.is_relative_to(d) for d in DATA))


def _folders() -> list[Path]:
    return sorted(
        p
        for p in [TESTS, *TESTS.rglob("*")]
        if p.is_dir() and p.name != "__pycache__" and not any(p.is_relative_to(d) for d in DATA)
    )


def test_there_are_tests_in_subject_folders_and_none_at_the_top() -> None:
    files = _test_files()
    assert len(files) > 50
    assert not [p for p in files if p.parent == TESTS], "a test file belongs in a subject folder"
    assert not (TESTS / "unit").exists()


@pytest.mark.parametrize("folder", _folders(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_folder_is_a_package(folder: Path) -> None:
    """Packages, so two folders may hold test files of the same name."""
    assert (folder / "__init__.py").is_file(), f"{folder.relative_to(REPO_ROOT)}: no __init__.py"


def test_only_integration_tests_drive_the_cli_or_run_whole_simulations() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
        for path in _test_files()
        if not path.is_relative_to(INTEGRATION) and path != Path(__file__).resolve()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if WHOLE.search(line)
    ]
    assert found == [], "move these tests to tests/integration/ (tests/README.md)"


def test_helpers_are_imported_one_way() -> None:
    files = [*TESTS.rglob("*.py")]
    found = [
        f"{path.relative_to(REPO_ROOT)}: {m.group(0).strip()}"
        for path in files
        for m in OTHER_IMPORTS.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "import shared code as `from tests.helpers import ...`"


def test_files_are_named_after_what_they_test() -> None:
    assert [p.name for p in _test_files() if EVENT_WORDS.search(p.stem)] == []


def _slow_tests(path: Path) -> list[str]:
    """The tests of `path` marked slow ("" for a whole file): by decorator, by `pytestmark`, or
    in the marks of a `pytest.param` of the list they are parametrized over."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lists = {
        t.id: ast.unparse(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    slow = ["" for name, value in lists.items() if name == "pytestmark" and "slow" in value]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            marks = " ".join(ast.unparse(d) for d in node.decorator_list)
            params = [lists.get(a.id, "") for d in node.decorator_list if isinstance(d, ast.Call)
                      for a in d.args if isinstance(a, ast.Name)]  # fmt: skip
            if "mark.slow" in marks or any("marks=SLOW" in p for p in params):
                slow.append(node.name)
    return slow


def test_every_slow_test_is_named_in_the_readme_with_what_covers_it() -> None:
    """`-m "not slow"` may leave a test out only where tests/README.md says what still covers
    its ground: every `slow` test (or file) must be in its table."""
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## `slow`") :]
    unnamed = [
        f"{path.relative_to(REPO_ROOT)}::{name}"
        for path in _test_files()
        for name in _slow_tests(path)
        if str(path.relative_to(REPO_ROOT)) not in table or (name and f"::{name}`" not in table)
    ]
    assert unnamed == []
