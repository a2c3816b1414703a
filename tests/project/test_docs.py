"""The docs a user reads hold together: the README's performance figures are a verbatim quote of
docs/performance.md's current table (the README once kept an older table than the docs), the
docs point at nothing a user's clone lacks, and every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import REPO_ROOT


def _section(text: str, heading: str) -> str:
    """The text of the `## ` section whose heading starts with `heading`, up to the next one."""
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _fenced(section: str) -> list[str]:
    """The bodies of the ``` code blocks of `section`, in order."""
    return section.split("```")[1::2]


def test_the_readme_quotes_the_current_performance_table() -> None:
    docs = (REPO_ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    current = [block for block in _fenced(_section(docs, "The table")) if "\nmeasure " in block]
    quoted = _fenced(_section(readme, "Performance"))
    assert len(current) == 1, "docs/performance.md: one measured table under '## The table'"
    assert quoted == [current[0]], "README.md's Performance table differs from the docs' table"


#: What a user of a clone does not have: another repository's files and tracker numbers.
FOREIGN = re.compile(r"\.\./shared|contract/|ARCHITECTURE\.md|\b[Ii]ssues? \d")
#: Where a user reads: the README, the docs, and the comments and messages of code and scenarios.
READ = ["README.md", "docs", "sim", "experiments", "benchmarks", "scenarios"]


def _read_files() -> list[Path]:
    files = []
    for name in READ:
        root = REPO_ROOT / name
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        files += [f for f in candidates if f.suffix in {".md", ".py", ".yaml"} and f.is_file()]
    return files


def test_docs_point_at_nothing_a_user_lacks() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
        for path in _read_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FOREIGN.search(line)
    ]
    assert found == []


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for doc in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.name}: {target}")
    assert broken == []


#: A test file or folder named in the docs, with the test it names if any.
TEST_PATH = re.compile(r"\btests/[\w/]+?(?:\.py(?:::(\w+))?|/)(?=[\s`),.;:]|$)")


def test_every_test_the_docs_name_exists() -> None:
    """The README, the docs and the code's comments name test files (and tests) as evidence:
    each must be there, so a move of the tests cannot leave them pointing at nothing."""
    missing = []
    for path in _read_files():
        for m in TEST_PATH.finditer(path.read_text(encoding="utf-8")):
            target, test = m.group(0).split("::")[0], m.group(1)
            file = REPO_ROOT / target
            if not file.exists() or (test and f"def {test}(" not in file.read_text()):
                missing.append(f"{path.relative_to(REPO_ROOT)}: {m.group(0)}")
    assert missing == []
