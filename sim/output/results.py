"""Writing a run's results to a folder, all or nothing, never over another run's.

Files are written into a hidden temporary folder beside the target and renamed into place at the
end, so an interrupted or failed run never leaves a half-written results folder. A default
folder is claimed with an exclusive `mkdir` (a suffix if taken), so two runs started in the same
second get two folders; a user's `--out` that holds anything is replaced only with `--force`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.model.errors import ScenarioError
from sim.model.words import plural
from sim.plan import resolved_data
from sim.study.result import RunResult

#: Ranks per policy a summaries-only run draws its latency ECDF with (finer than the pixels).
ECDF_FIGURE_POINTS = 20_000
FIGURE = "figures/policies.png"
STORM_FIGURE = "figures/storm.png"
STRESS_FIGURE = "figures/stress.png"
RESULT_FILES = (
    "summary.csv",
    "breakdown.csv",
    "requests.parquet",
    "calls.parquet",
    "timeseries.parquet",
    "scenario.resolved.yaml",
    "run.json",
)


def run_files(records: str, figures: bool) -> list[str]:
    """The files a run with `records` none or requests writes (what `_write_run_files` does for
    them: no file depends on the data), as the notice of an automatic summaries-only run lists
    them."""
    if records not in ("none", "requests"):
        raise ValueError(f"records all also writes files that depend on the data: {records!r}")
    kept = ["requests.parquet"] if records == "requests" else []
    shown = [FIGURE] if figures else []
    return ["summary.csv", "breakdown.csv", *kept, "scenario.resolved.yaml", "run.json", *shown]


def default_folder(scenario_name: str, root: Path = Path("results"), prefix: str = "") -> Path:
    """results/<name>/<prefix><UTC timestamp>/: a name only; `claim_folder` makes it unique."""
    stamp = prefix + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return root / scenario_name / stamp


def claim_folder(folder: Path) -> Path:
    """Create `folder` (or `folder-2`, `-3`, ... if taken) with an exclusive mkdir and return
    it, empty: no other run, even one started in the same second, can claim the same one."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        candidate, suffix = folder, 1
        while True:
            try:
                candidate.mkdir(mode=0o777)
                return candidate
            except FileExistsError:
                suffix += 1
                candidate = folder.with_name(f"{folder.name}-{suffix}")
    except OSError as exc:
        raise ScenarioError(str(folder), [("", f"cannot write results: {exc}")]) from None


def check_writable(folder: Path, overwrite: bool = False) -> None:
    """Refuse, before any work, a target that cannot hold results: a file, a folder that already
    holds something (unless `overwrite`), a path below a file, or a place we may not write."""
    if folder.exists():
        if not folder.is_dir():
            raise ScenarioError(str(folder), [("", "exists and is a file; choose another --out")])
        if not overwrite and any(folder.iterdir()):
            raise ScenarioError(
                str(folder),
                [("", "exists and is not empty; choose another --out, or --force to replace it")],
            )
    for parent in [folder, *folder.absolute().parents]:
        if parent.exists():
            if not parent.is_dir():
                raise ScenarioError(str(folder), [("", f"cannot be created: {parent} is a file")])
            _probe_writable(parent, folder)
            break


def _probe_writable(existing: Path, folder: Path) -> None:
    """Create and remove a hidden folder in `existing`: the only test that also holds for root
    on a read-only file system."""
    try:
        Path(tempfile.mkdtemp(prefix=".tailsim-probe-", dir=existing)).rmdir()
    except OSError as exc:
        raise ScenarioError(str(folder), [("", f"cannot write results there: {exc}")]) from None


@contextmanager
def staged(folder: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a hidden staging folder beside `folder`; on success it becomes `folder` (replacing
    what was there only if `overwrite` or it is empty), on any failure or interrupt it is removed
    (an OSError becomes a ScenarioError naming the folder)."""
    check_writable(folder, overwrite)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
        staging.chmod(0o777 & ~_umask())  # mkdtemp makes 0700; results get normal permissions
    except OSError as exc:
        raise ScenarioError(str(folder), [("", f"cannot write results: {exc}")]) from None
    try:
        yield staging
        _swap_into_place(staging, folder)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            raise ScenarioError(str(folder), [("", f"cannot write results: {exc}")]) from None
        raise


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_results(
    result: RunResult,
    folder: Path,
    source: str,
    version: str,
    figures: bool = True,
    *,
    overwrite: bool = False,
    unique: bool = False,
) -> Path:
    """Write every result file of `result` (and, with `figures`, figures/policies.png) to
    `folder` atomically and return the folder written. With `unique`, `folder` is a default
    name: a free variant of it is claimed (see `claim_folder`)."""
    claimed = claim_folder(folder) if unique else None
    folder = claimed or folder
    try:
        _write_run_files(result, folder, source, version, figures, overwrite or unique)
    except BaseException:
        if claimed is not None and claimed.is_dir() and not any(claimed.iterdir()):
            claimed.rmdir()  # nothing of ours is left behind on failure or Ctrl-C
        raise
    return folder


def _write_run_files(
    result: RunResult, folder: Path, source: str, version: str, figures: bool, overwrite: bool
) -> None:
    with staged(folder, overwrite) as staging:
        result.summary.to_csv(staging / "summary.csv", index=False)
        result.breakdown.to_csv(staging / "breakdown.csv", index=False)
        if result.records != "none":
            result.requests.to_parquet(staging / "requests.parquet", index=False)
        series = None
        if result.records == "all":  # the calls, and what is counted from them over time
            result.calls.to_parquet(staging / "calls.parquet", index=False)
            if not result.actions.empty:  # tool steps only
                result.actions.to_parquet(staging / "actions.parquet", index=False)
            series = result.timeseries
            series.to_parquet(staging / "timeseries.parquet", index=False)
        (staging / "scenario.resolved.yaml").write_text(resolved_yaml(result), encoding="utf-8")
        _write_json(staging / "run.json", run_metadata(result, source, version))
        if figures:
            from sim.output.plots import write_policy_comparison  # noqa: PLC0415 - slow import, on demand

            write_policy_comparison(
                result.summary,
                result.latency_table(ECDF_FIGURE_POINTS),
                result.plan.deadline_s,
                staging / FIGURE,
                title=f"{result.plan.name}: {plural(result.requests_count, 'request')}, "
                f"seed {result.seed}",
            )
            if series is not None and int(series["resent"].sum() + series["rate_limited"].sum()):
                from sim.output.storm_plots import save, storm_figure  # noqa: PLC0415 - on demand

                save(storm_figure(series, f"{result.plan.name}: storm"), staging / STORM_FIGURE)


def write_stress_results(
    table: pd.DataFrame,
    best: pd.DataFrame,
    window_s: float,
    name: str,
    folder: Path,
    figures: bool = True,
) -> Path:
    """Write `tailsim stress`'s bursts (stress.csv), margins (margins.csv) and
    figures/stress.png to `folder` atomically."""
    with staged(folder, overwrite=True) as staging:
        table.to_csv(staging / "stress.csv", index=False)
        best.to_csv(staging / "margins.csv", index=False)
        if figures:
            from sim.output.storm_plots import save, stress_figure  # noqa: PLC0415 - on demand

            save(
                stress_figure(table, window_s, f"{name}: storm margin per policy"),
                staging / STRESS_FIGURE,
            )
    return folder


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def _swap_into_place(staging: Path, folder: Path) -> None:
    """Rename `staging` to `folder`; an earlier result there is moved aside first, then deleted."""
    if not folder.exists():
        os.replace(staging, folder)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
    os.replace(folder, old / "previous")
    os.replace(staging, folder)
    shutil.rmtree(old, ignore_errors=True)


def resolved_yaml(result: RunResult) -> str:
    """The scenario exactly as run, loadable as is: defaults explicit, seed and size used, file
    names absolute; the resolved 'pNN' thresholds follow as comments (they are in run.json)."""
    data = resolved_data(result.plan)
    data["seed"] = result.seed
    data["requests"] = result.requests_count
    lines = ["# The scenario exactly as run: every default explicit. Re-run it with `tailsim run`."]
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    notes = ["", "# 'pNN' thresholds resolved by the pilot run, seconds per step:"]
    for policy, steps in thresholds_table(result).items():
        notes.append(f"#   {policy}: " + ", ".join(f"{k}={v:g}" for k, v in steps.items()))
    return "\n".join(lines) + "\n" + body + ("\n".join(notes) + "\n" if len(notes) > 2 else "")


def thresholds_table(result: RunResult) -> dict[str, dict[str, float]]:
    """Per policy that has one, its threshold per step in seconds (rounded to the microsecond)."""
    return {
        policy: {step: round(value, 6) for step, value in steps.items()}
        for policy, steps in result.thresholds.items()
        if steps
    }


def run_metadata(result: RunResult, source: str, version: str) -> dict[str, Any]:
    """Provenance of a run: what, with which tailsim and seed, how long it took."""
    return {
        "scenario": result.plan.name,
        "source": source,
        "tailsim_version": version,
        "seed": result.seed,
        "requests": result.requests_count,
        "policies": list(result.thresholds),
        "resolved_thresholds_s": thresholds_table(result),
        "python": platform.python_version(),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_s": {k: round(v, 3) for k, v in result.wall_s.items()},
        "executor": result.executor,
        "workers": result.workers,
        "engines": dict(result.engines),
        "records": result.records,
    }


def _records_of(folder: Path) -> str:
    """The `records` a results folder was written with (all for folders from before it)."""
    try:
        meta = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "all"
    return str(meta.get("records", "all"))


@dataclass
class ResultTables:
    """The tables of a results folder, read back for plots and comparisons."""

    name: str
    deadline_s: float
    summary: pd.DataFrame
    requests: pd.DataFrame


def read_result_tables(folder: Path, need_requests: bool = True) -> ResultTables:
    """Read summary.csv, requests.parquet and the deadline from a `tailsim run` folder (without
    `need_requests`, a folder that kept no requests table gives an empty one)."""
    needed = ("summary.csv", "requests.parquet", "scenario.resolved.yaml")
    if not need_requests and not (folder / "requests.parquet").is_file():
        needed = ("summary.csv", "scenario.resolved.yaml")
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing == ["requests.parquet"] and _records_of(folder) == "none":
        raise ScenarioError(
            str(folder),
            [("", "was run with --records none: it keeps summary.csv and breakdown.csv, not the "
                  "requests table this needs; run again with --records requests or all")],
        )  # fmt: skip
    if missing:
        raise ScenarioError(
            str(folder), [("", f"not a tailsim results folder (missing {', '.join(missing)})")]
        )
    resolved = yaml.safe_load((folder / "scenario.resolved.yaml").read_text(encoding="utf-8"))
    return ResultTables(
        name=str(resolved.get("name", folder.name)),
        deadline_s=float(resolved["deadline_s"]),
        summary=pd.read_csv(folder / "summary.csv"),
        requests=pd.read_parquet(folder / "requests.parquet")
        if "requests.parquet" in needed
        else pd.DataFrame(),
    )
