"""The README's whole-study script (fit -> include -> run -> tune -> nines -> a stored,
resumable sweep -> report, with `import sim` alone) runs as the README shows it: the code block
is taken from README.md and run in an empty folder, in a process of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT

MARK = "A whole study with `import sim` alone"


def readme_script() -> str:
    """The first python block after the README's MARK."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"```python\n(.*?)```", text[text.index(MARK) :], re.S)
    assert found is not None, "no python block after the README's whole-study paragraph"
    return found.group(1)


def test_the_readmes_whole_study_runs_and_writes_what_it_says(tmp_path: Path) -> None:
    script = readme_script()
    assert "from sim." not in script  # `import sim` only
    for step in ("sim.fit(", "include: fitted.yaml", "sim.run(", "sim.tune(", "sim.nines("):
        assert step in script
    assert script.count("sim.sweep_stored(") == 2  # stored, then resumed
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for name in ("calls.csv", "fitted.yaml", "mine.yaml", "tuned.yaml"):
        assert (tmp_path / name).is_file(), name
    assert (tmp_path / "results" / "mine-sweep" / "report.html").is_file()
    assert "tuned" in (tmp_path / "tuned.yaml").read_text(encoding="utf-8")
    assert "results/mine-sweep/report.html" in done.stdout
