"""Writing a run's results to a folder, all or nothing.

Files are written into a hidden temporary folder beside the target and renamed into place at the
end, so an interrupted or failed run never leaves a half-written results folder.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ScenarioError
from sim.runner import RunResult

RESULT_FILES = (
    "summary.csv",
    "requests.parquet",
    "calls.parquet",
    "scenario.resolved.yaml",
    "run.json",
)


def default_folder(scenario_name: str, root: Path = Path("results")) -> Path:
    """results/<name>/<UTC timestamp>/, with a suffix if that folder already exists."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = root / scenario_name / stamp
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = root / scenario_name / f"{stamp}-{suffix}"
    return folder


def check_writable(folder: Path) -> None:
    """Refuse a target that exists and is not an earlier tailsim result (before any work)."""
    if folder.exists() and (
        not folder.is_dir() or (any(folder.iterdir()) and not (folder / "run.json").exists())
    ):
        raise ScenarioError(
            str(folder),
            [("", "exists and is not a tailsim results folder; choose another --out")],
        )


def write_results(result: RunResult, folder: Path, source: str, version: str) -> Path:
    """Write every result file of `result` to `folder` atomically and return the folder."""
    check_writable(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    try:
        result.summary.to_csv(staging / "summary.csv", index=False)
        result.requests.to_parquet(staging / "requests.parquet", index=False)
        result.calls.to_parquet(staging / "calls.parquet", index=False)
        (staging / "scenario.resolved.yaml").write_text(resolved_yaml(result), encoding="utf-8")
        (staging / "run.json").write_text(
            json.dumps(run_metadata(result, source, version), indent=2) + "\n", encoding="utf-8"
        )
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def resolved_yaml(result: RunResult) -> str:
    """The scenario with every default made explicit, the seed and size used, the thresholds."""
    data = result.scenario.model_dump(mode="json", exclude_none=True)
    data["seed"] = result.seed
    data["requests"] = result.requests_count
    data["resolved_thresholds_s"] = {
        policy: {step: round(value, 6) for step, value in steps.items()}
        for policy, steps in result.thresholds.items()
        if steps
    }
    header = (
        "# The scenario exactly as run: defaults explicit, 'pNN' resolved per step (seconds).\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def run_metadata(result: RunResult, source: str, version: str) -> dict[str, Any]:
    """Provenance of a run: what, with which tailsim and seed, how long it took."""
    return {
        "scenario": result.scenario.name,
        "source": source,
        "tailsim_version": version,
        "seed": result.seed,
        "requests": result.requests_count,
        "policies": list(result.thresholds),
        "python": platform.python_version(),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_s": {k: round(v, 3) for k, v in result.wall_s.items()},
    }
