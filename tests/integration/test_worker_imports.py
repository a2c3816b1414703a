"""Sweep workers import only what a point needs (`sim/study/executors.py`, issue 24 item 5):
never the figures' libraries or the CLI, even when the sweep was started by the `tailsim`
console script, whose module multiprocessing would otherwise re-import in every worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT

#: What a point never needs: the figures' libraries, the terminal's, the CLI and the output layer.
HEAVY = ("matplotlib", "seaborn", "rich", "click", "sim.cli", "sim.output.plots", "sim.api")

#: A main script like the `tailsim` console script (`from sim.cli import main`), which then runs
#: one item on a pool of one worker process and prints the modules that worker holds.
CONSOLE_LIKE = """\
import json, sys
from sim.cli import main
from sim.study.executors import Executor, imported_modules
if __name__ == "__main__":
    found = []
    with Executor("processes", 1) as pool:
        pool.each(imported_modules, None, [0], (), found.append)
    print(json.dumps({"worker": found[0], "parent_has_cli": "sim.cli" in sys.modules}))
"""


def python(*args: str, cwd: Path) -> str:
    """Stdout of `python ARGS` in a fresh process using this worktree's `sim`."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_the_worker_module_imports_no_figures_and_no_cli(tmp_path: Path) -> None:
    """`import sim.study.sweep` (what the forkserver preloads) leaves the heavy modules out."""
    code = "import json, sys, sim.study.executors as e; __import__(e.WORKER_MODULE); "
    code += "print(json.dumps(sorted(sys.modules)))"
    modules = set(json.loads(python("-c", code, cwd=tmp_path)))
    assert "sim.study.sweep" in modules
    assert "pandas" in modules  # a point's tables: needed
    assert [m for m in HEAVY if m in modules] == []


def test_a_worker_started_from_the_console_script_skips_its_imports(tmp_path: Path) -> None:
    """The parent imported sim.cli (and matplotlib with it); its worker did not."""
    script = tmp_path / "console_like.py"
    script.write_text(CONSOLE_LIKE, encoding="utf-8")
    answer = json.loads(python(str(script), cwd=tmp_path))
    assert answer["parent_has_cli"]
    worker = set(answer["worker"])
    assert "sim.study.sweep" in worker  # the preloaded worker module
    assert [m for m in HEAVY if m in worker] == []  # the console script was not re-run there
