"""The module tables of docs/architecture.md, generated from the code: each module's lines and
the first paragraph of its docstring, a table per package.

`python tests/project/architecture_tables.py --write` rewrites the part of the page between
`## Modules` and the next `## ` heading; `tests/project/test_architecture.py` fails when the
page lists a module that is gone, misses one, or puts it under another package.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
START = "## Modules\n"


def job(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line ('' without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = doc.strip().split("\n\n")[0]
    return " ".join(first.split()).replace("|", "\\|")


def packages() -> dict[str, list[Path]]:
    """Every package of sim/ (a folder with an __init__.py) and its modules, in name order."""
    found: dict[str, list[Path]] = {}
    for init in sorted((ROOT / "sim").rglob("__init__.py")):
        folder = init.parent
        modules = sorted(p for p in folder.glob("*.py"))
        found[folder.relative_to(ROOT).as_posix() + "/"] = modules
    return found


def tables() -> str:
    """The generated section: a heading and a table per package."""
    lines = [
        START,
        "Generated from the code by `python tests/project/architecture_tables.py "
        "--write` (lines, and the first paragraph of each module's docstring).",
        "",
    ]
    for folder, modules in packages().items():
        lines += [f"### `{folder}`", "", "| module | lines | job |", "| --- | ---: | --- |"]
        for path in modules:
            count = len(path.read_text(encoding="utf-8").splitlines())
            lines.append(f"| `{path.relative_to(ROOT).as_posix()}` | {count} | {job(path)} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def listed(text: str) -> dict[str, str]:
    """The modules the page's tables list, each with the package heading it sits under."""
    section = text.split(START, 1)[1].split("\n## ", 1)[0]
    where: dict[str, str] = {}
    heading = ""
    for line in section.splitlines():
        if line.startswith("### `"):
            heading = line.split("`")[1]
        elif line.startswith("| `sim/"):
            where[line.split("`")[1]] = heading
    return where


def rewrite() -> None:
    """Replace the page's module tables by freshly generated ones."""
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    tail = rest.split("\n## ", 1)[1]
    DOC.write_text(head + tables() + "## " + tail, encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/project/architecture_tables.py --write")
    rewrite()
