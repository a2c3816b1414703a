"""The README's performance figures are a verbatim quote of docs/performance.md's current table,
so the two cannot drift apart (the README once kept an older table than the docs)."""

from __future__ import annotations

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
