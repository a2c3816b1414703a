"""The README's sample output is what its quickstart command prints (issue 25, item 17).

The block between the `readme-sample` marker comments in README.md is compared with a real
`tailsim run` (the quickstart's command, exactly, in a fresh folder so its results folder is
new), after normalising what moves run to run: the results folder's UTC time and trailing
spaces. When the output changes on purpose, regenerate the block with

    python -m tests.integration.test_readme_sample --update
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers import HANG_S, REPO_ROOT, tailsim_command

README = REPO_ROOT / "README.md"
#: The quickstart's command, as the README shows it.
COMMAND = ("run",)
BEGIN = "<!-- readme-sample: the output of `tailsim run`"
END = "<!-- /readme-sample -->"
#: The width the sample is printed at (a pipe's tables follow COLUMNS).
COLUMNS = "160"
#: A results folder's UTC time (and the `-k` a same-second run adds).
FOLDER_TIME = re.compile(r"\d{8}T\d{6}Z(-\d+)?")


def normalised(text: str) -> list[str]:
    """The lines of an output with its folder time replaced and trailing spaces dropped."""
    return [FOLDER_TIME.sub("<UTC time>", line).rstrip() for line in text.strip("\n").splitlines()]


def real_output(cwd: Path) -> str:
    """Stdout of the quickstart's `tailsim run` in the folder `cwd`, without colours."""
    env = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "TTY_COMPATIBLE"}}
    env |= {"NO_COLOR": "1", "COLUMNS": COLUMNS, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [*tailsim_command(), *COMMAND],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=True,
    )
    return done.stdout


def sample_block(readme: str) -> tuple[int, int, list[str]]:
    """The sample's code block in the README: where its lines start and end, and the lines
    after its `$ tailsim run` prompt."""
    begin = readme.index(BEGIN)
    fence = readme.index("```\n", begin) + len("```\n")
    close = readme.index("\n```", fence)
    assert readme.index(END, close) > close, "the sample's end marker follows its block"
    lines = readme[fence:close].splitlines()
    assert lines[0] == "$ tailsim " + " ".join(COMMAND), "the block starts with the command"
    return fence, close, lines[1:]


def test_the_readme_sample_is_what_the_quickstart_prints(tmp_path: Path) -> None:
    _, _, sample = sample_block(README.read_text(encoding="utf-8"))
    real = normalised(real_output(tmp_path))
    assert normalised("\n".join(sample)) == real, (
        "README.md's sample output is stale: python -m tests.integration.test_readme_sample "
        "--update"
    )


def update() -> None:
    """Rewrite the README's sample block from a real run."""
    readme = README.read_text(encoding="utf-8")
    fence, close, _ = sample_block(readme)
    with tempfile.TemporaryDirectory() as tmp:
        output = real_output(Path(tmp))
    lines = ["$ tailsim " + " ".join(COMMAND)] + [line.rstrip() for line in output.splitlines()]
    README.write_text(readme[:fence] + "\n".join(lines) + readme[close:], encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        raise SystemExit("usage: python -m tests.integration.test_readme_sample --update")
    update()
