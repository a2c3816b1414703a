"""The sweep result store: one part per point, written atomically as it finishes, plus a manifest.

A sweep folder holds `manifest.json` (what is swept, the plan of points, a fingerprint of the
scenario and options), `parts/<point key>/` (that point's `summary.parquet` and
`requests.parquet`, renamed into place whole), and once every point is in: `summary.csv`
(replications pooled, with confidence intervals), `replications.csv` (one row per point and
policy), `requests.parquet` (every run) and `scenario.resolved.yaml`. Running the same sweep
into the same folder again skips the points whose parts exist, so a sweep killed halfway
resumes where it stopped; a folder holding a different sweep is refused. One process at a time
writes a folder (`sim.output.lock.FolderLock`): a second is refused, naming the first, before it
touches anything. A point's part is named by a hash of everything that makes its numbers (the
resolved scenario and the content of the files it reads, --requests, --policy, the engine, the
point's overrides, replication and seed), so a part is never reused for other inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.analysis.capacity import REQUESTS
from sim.model.errors import ScenarioError
from sim.model.words import plural
from sim.output.lock import LOCK, LOCK_FILES, FolderLock
from sim.plan import Plan, resolved_data
from sim.study.points import PointResult, SweepPoint
from sim.study.result import SweepResult
from sim.study.runner import chosen_policies
from sim.study.sweep import stack, swept_keys

MANIFEST = "manifest.json"
PARTS = "parts"
#: 2: parts named by a hash of every input (format 1 hashed the point's coordinates only).
FORMAT = 2
SWEEP_FIGURES = ("figures/sweep.png", "figures/pareto.png")


def fingerprint(
    plan: Plan,
    requests: int | None,
    policies: Sequence[str] | None,
    engine: str | None = None,
) -> str:
    """What makes two sweeps the same: everything that can change a point's numbers, resolved
    (so `-n 300` equals a scenario's own `requests: 300`): the scenario with every default
    explicit (seed, sweep grid and replications included), the bytes of the files it reads,
    the requests, the policies in order, the engine override and which tables a point keeps.
    Not the `slo`: it changes no number, only how the pooled tables are read."""
    data = {
        "format": FORMAT,
        "scenario": {k: v for k, v in resolved_data(plan).items() if k != "slo"},
        "files": _file_hashes(plan),
        "requests": requests if requests is not None else plan.requests,
        "policies": chosen_policies(plan, policies),
        "engine": engine,
        "records": REQUESTS,
    }
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_sweep_folder(
    plan: Plan,
    requests: int | None,
    policies: Sequence[str] | None,
    root: Path = Path("results"),
    engine: str | None = None,
) -> Path:
    """results/<name>/sweep-<fingerprint>/: the same command always names the same folder, so
    running it again after an interruption resumes instead of starting over."""
    print_ = fingerprint(plan, requests, policies, engine)
    return root / plan.name / f"sweep-{print_[:10]}"


def _file_hashes(plan: Plan) -> dict[str, str | None]:
    """sha256 of every file the scenario reads (`file:` keys: samples, traces), by absolute
    path: editing a trace changes the numbers without changing the scenario's text."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "file" and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(resolved_data(plan))
    hashes: dict[str, str | None] = {}
    for name in sorted(set(found)):
        try:
            hashes[name] = hashlib.sha256(Path(name).read_bytes()).hexdigest()
        except OSError:
            hashes[name] = None
    return hashes


def is_sweep_folder(folder: Path) -> bool:
    """Whether `folder` holds a tailsim sweep (finished or not)."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return False
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("kind") == "sweep"
    except (OSError, ValueError):
        return False


@dataclass
class SweepStore:
    """A sweep folder being filled, held by this process alone: which points are done, and
    writing the rest. A context manager: leaving it lets the folder go (`close`)."""

    folder: Path
    plan: Plan
    points: list[SweepPoint]
    keys: list[str]
    manifest: dict[str, Any] = field(default_factory=dict)
    lock: FolderLock | None = None

    @classmethod
    def open(
        cls,
        folder: Path,
        plan: Plan,
        points: list[SweepPoint],
        *,
        requests: int | None,
        policies: Sequence[str] | None,
        source: str,
        version: str,
        engine: str | None = None,
    ) -> SweepStore:
        """Create the folder (or reopen the same sweep's), lock it and write the manifest;
        refuses, before touching anything, a foreign folder, one holding another sweep, or one
        another process is writing."""
        print_ = fingerprint(plan, requests, policies, engine)
        _check_target(folder, print_, locked=False)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ScenarioError(str(folder), [("", f"cannot write results: {exc}")]) from None
        lock = FolderLock(folder).acquire()
        try:
            _check_target(folder, print_, locked=True)  # again: no one else can change it now
            manifest = {
                "kind": "sweep",
                "format": FORMAT,
                "fingerprint": print_,
                "scenario": plan.name,
                "source": source,
                "tailsim_version": version,
                "seed": plan.seed,
                "requests": requests if requests is not None else plan.requests,
                "policies": chosen_policies(plan, policies),
                "engine": engine,
                "swept_keys": swept_keys(plan),
                "points": [
                    {
                        "key": p.key(print_),
                        "overrides": p.overrides,
                        "replication": p.replication,
                        "seed": p.seed,
                    }
                    for p in points
                ],
                "status": "running",
                "python": platform.python_version(),
            }
            try:  # the manifest first: a folder with parts/ always says what it holds
                write_atomic(folder / MANIFEST, json.dumps(manifest, indent=2, default=str) + "\n")
                (folder / PARTS).mkdir(exist_ok=True)
            except OSError as exc:
                raise ScenarioError(str(folder), [("", f"cannot write results: {exc}")]) from None
            _clean_staging(folder / PARTS)  # a dead writer's: the lock says none is alive
        except BaseException:
            lock.release()
            raise
        return cls(folder, plan, points, swept_keys(plan), manifest, lock)

    def close(self) -> None:
        """Let the folder go: another process may write it from now on."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def part_name(self, point: SweepPoint) -> str:
        """The folder name of `point`'s part: its index and a hash of all its inputs."""
        return point.key(self.manifest["fingerprint"])

    def done(self) -> set[str]:
        """Names of the parts in the folder."""
        parts = self.folder / PARTS
        return {p.name for p in parts.iterdir() if p.is_dir() and not p.name.startswith(".")}

    def pending(self) -> list[SweepPoint]:
        """The points still to run, in plan order."""
        finished = self.done()
        return [p for p in self.points if self.part_name(p) not in finished]

    def stored(self) -> int:
        """How many of this sweep's points have their part in the folder."""
        return len(self.points) - len(self.pending())

    def write_part(self, result: PointResult) -> None:
        """Write one point's tables into a hidden folder and rename it into place whole."""
        parts = self.folder / PARTS
        name = self.part_name(result.point)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=parts))
        try:
            result.summary.to_parquet(staging / "summary.parquet", index=False)
            result.requests.to_parquet(staging / "requests.parquet", index=False)
            staging.chmod(0o777 & ~_umask())
            os.replace(staging, parts / name)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def load(self) -> SweepResult:
        """Every point's part read back into one SweepResult (all points must be done)."""
        results = []
        for point in self.points:
            part = self.folder / PARTS / self.part_name(point)
            results.append(
                PointResult(
                    point=point,
                    summary=pd.read_parquet(part / "summary.parquet"),
                    requests=pd.read_parquet(part / "requests.parquet"),
                )
            )
        return stack(self.plan, self.points, self.keys, results)

    def finish(self, figures: bool = True) -> SweepResult:
        """Write the pooled tables (and figures) from the parts on disk, mark the sweep
        complete and return it: the same bytes whatever ran the points, interrupted or not."""
        result = self.load()
        write_atomic(self.folder / "summary.csv", result.aggregate.to_csv(index=False))
        write_atomic(self.folder / "replications.csv", result.summary.to_csv(index=False))
        tmp = self.folder / ".requests.parquet.partial"
        result.requests.to_parquet(tmp, index=False)
        os.replace(tmp, self.folder / "requests.parquet")
        header = (
            "# The scenario as swept: every default explicit; the points are in manifest.json.\n"
        )
        body = yaml.safe_dump(resolved_data(self.plan), sort_keys=False, allow_unicode=True)
        write_atomic(self.folder / "scenario.resolved.yaml", header + body)
        self.manifest["status"] = "complete"
        self.manifest["finished_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
        write_atomic(
            self.folder / MANIFEST, json.dumps(self.manifest, indent=2, default=str) + "\n"
        )
        if figures:
            from sim.output.plots import write_figures  # noqa: PLC0415 - slow import, on demand

            write_figures(self.folder)
        return result


def save_sweep(result: SweepResult, folder: Path, figures: bool = True) -> Path:
    """Store a SweepResult computed in memory (the Python API's `result.save(dir)`)."""
    from sim.model.version import __version__  # noqa: PLC0415

    assert result.plan is not None
    policies = sorted(set(result.summary["policy"]), key=list(result.summary["policy"]).index)
    requests = int(result.summary["requests"].iloc[0])
    with SweepStore.open(
        folder,
        result.plan,
        result.points,
        requests=requests,
        policies=policies,
        source=result.plan.name,
        version=__version__,
    ) as store:
        for point in store.pending():
            mask_s = _point_mask(result.summary, point, result.keys)
            mask_r = _point_mask(result.requests, point, result.keys)
            store.write_part(
                PointResult(
                    point,
                    result.summary[mask_s].reset_index(drop=True),
                    result.requests[mask_r].reset_index(drop=True),
                )
            )
        store.finish(figures=figures)
    return folder


def _point_mask(table: pd.DataFrame, point: SweepPoint, keys: list[str]) -> pd.Series:
    """Rows of a stacked table that belong to `point`."""
    mask = table["replication"] == point.replication
    for key in keys:
        mask &= table[key] == point.overrides[key]
    return mask


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path` and rename it into place (with the
    user's normal permissions, not the temporary file's private ones)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_target(folder: Path, print_: str, *, locked: bool) -> None:
    """Refuse a file, a foreign non-empty folder, or a folder holding a different sweep.

    Before the lock is taken (`locked=False`), a folder with a lock file but no manifest yet is
    let through: another writer may be creating it, and the lock will say so."""
    for parent in folder.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ScenarioError(str(folder), [("", f"cannot be created: {parent} is a file")])
            break
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ScenarioError(str(folder), [("", "is a file; choose another --out")])
    if all(entry.name in LOCK_FILES for entry in folder.iterdir()):
        return
    if not locked and not (folder / MANIFEST).exists() and (folder / LOCK).exists():
        return
    if not is_sweep_folder(folder):
        raise ScenarioError(
            str(folder), [("", "exists and is not a tailsim sweep folder; choose another --out")]
        )
    held = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("fingerprint")
    if held != print_:
        raise ScenarioError(
            str(folder),
            [
                (
                    "",
                    "holds a different sweep (the scenario or a file it reads, --requests, "
                    "--policy, --seed or the engine differ); choose another --out",
                )
            ],
        )


def _clean_staging(parts: Path) -> None:
    """Remove staging folders a killed run left behind (never a finished part)."""
    for entry in parts.iterdir():
        if entry.name.startswith(".") and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)


def read_sweep(folder: Path) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """The manifest, pooled summary and per-replication table of a finished sweep folder."""
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("status") != "complete":
        done = len(list((folder / PARTS).glob("[!.]*")))
        raise ScenarioError(
            str(folder),
            [
                (
                    "",
                    f"sweep not finished ({done} of {plural(len(manifest['points']), 'point')}); "
                    "run the same `tailsim sweep` command again to finish it",
                )
            ],
        )
    return (
        manifest,
        pd.read_csv(folder / "summary.csv"),
        pd.read_csv(folder / "replications.csv"),
    )
