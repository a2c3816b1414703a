"""A sweep folder has one writer; lost workers and a killed sweep end cleanly; resuming with
other requests reuses no part; a script without a main guard gets one line naming it.

No test here asserts a wall time: each waits for an event (a part stored, a pipe at end of file)
and `SAFETY_S` only bounds a hang, so a loaded machine is slower but never fails them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.model.scenario import load_scenario
from sim.output.store import PARTS, SweepStore, fingerprint
from sim.plan import compile_scenario
from sim.study import executors
from sim.study.sweep import expand, run_point

#: Generous bound on waiting for an event; reached only if something hangs.
SAFETY_S = 240.0
TABLES = ("summary.csv", "replications.csv")


@pytest.fixture
def tiny(scenario_file: Any) -> Path:
    """The contract cut to a quick sweep: 2 slot counts x 2 replications, a small pilot."""
    return scenario_file(
        {
            "requests": 40,
            "pilot": {"requests": 40},
            "sweep": {"grid": {"providers.direct.concurrency": [24, 64]}, "replications": 2},
        }
    )


def sweep_command(scenario: Path, out: Path, *extra: str) -> list[str]:
    """`tailsim sweep` as a separate Python process (this worktree's code)."""
    return [
        sys.executable,
        "-m",
        "sim.cli",
        "sweep",
        str(scenario),
        "--out",
        str(out),
        "-q",
        "--no-plot",
        "-p",
        "wait,cut",
        *extra,
    ]


def stored(out: Path) -> list[Path]:
    """The finished parts of a sweep folder (never the hidden staging ones)."""
    parts = out / PARTS
    return sorted(parts.glob("[!.]*")) if parts.is_dir() else []


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones included) and its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[Any] | None = None) -> None:
    """Poll until `condition()`; fail if `proc` ends first or SAFETY_S pass (a hang)."""
    deadline = time.monotonic() + SAFETY_S
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the process ended (exit {proc.returncode}) before the awaited event")
        if time.monotonic() > deadline:
            pytest.fail(f"no progress in {SAFETY_S:.0f} s: hung")
        time.sleep(0.02)


def test_a_second_writer_is_refused_and_changes_nothing(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    spec = load_scenario(tiny)
    points = expand(compile_scenario(spec))
    policies = ["wait", "cut"]
    # this test process is the first writer, holding the folder with one point stored and a
    # second point half-written (as if it were writing it right now)
    with SweepStore.open(
        out,
        compile_scenario(spec),
        points,
        requests=None,
        policies=policies,
        source=str(tiny),
        version="t",
    ) as store:
        store.write_part(run_point(compile_scenario(spec), points[0], store.keys, None, policies))
        half = out / PARTS / f".{store.part_name(points[1])}-inflight"
        half.mkdir()
        (half / "summary.parquet").write_bytes(b"half-written")
        before = snapshot(out)
        same = sweep_command(tiny, out)
        second = subprocess.run(same, check=False, capture_output=True, text=True, timeout=SAFETY_S)
        assert second.returncode == 2, second.stderr
        assert "Traceback" not in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert second.stderr.startswith(
            f"error: {out}: another tailsim process is writing this folder (pid {os.getpid()}: "
        )
        assert snapshot(out) == before  # nothing of the first writer deleted or changed
        other = CliRunner().invoke(main, sweep_command(tiny, out, "-n", "60")[3:])
        assert other.exit_code == 2
        assert other.stderr.startswith(f"error: {out}: holds a different sweep")
        assert snapshot(out) == before
        for point in store.pending():  # the first writer goes on and finishes
            store.write_part(run_point(compile_scenario(spec), point, store.keys, None, policies))
        store.finish(figures=False)
    # the folder let go, the same sweep from the command line reuses every point (and clears
    # the staging folder its dead writer left) and agrees with a sweep run in one go
    again = CliRunner().invoke(main, same[3:])
    assert again.exit_code == 0, again.output
    assert "4 of 4 points already finished" in again.stderr
    assert not list((out / PARTS).glob(".*"))
    fresh = tmp_path / "fresh"
    assert CliRunner().invoke(main, sweep_command(tiny, fresh)[3:]).exit_code == 0
    for name in TABLES:
        assert (out / name).read_bytes() == (fresh / name).read_bytes()


@pytest.mark.slow
def test_two_sweeps_started_together_never_corrupt_the_folder(tiny: Path, tmp_path: Path) -> None:
    """The issue's `for i in 1 2; do tailsim sweep --out X & done`: however the two interleave,
    each ends with 0 (ran, or found every point done) or 2 (refused, one clear line), never a
    crash, and the folder holds exactly what one sweep alone writes."""
    out = tmp_path / "sw"
    command = sweep_command(tiny, out, "-n", "200")
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    ends = [(p.communicate(timeout=SAFETY_S)[1], p.returncode) for p in procs]
    assert sorted(code for _, code in ends)[0] == 0, ends
    for text, code in ends:
        assert code in (0, 2), text
        assert "Traceback" not in text
        if code == 2:
            assert "another tailsim process is writing this folder (pid" in text
    alone = tmp_path / "alone"
    assert CliRunner().invoke(main, sweep_command(tiny, alone, "-n", "200")[3:]).exit_code == 0
    for name in TABLES:
        assert (out / name).read_bytes() == (alone / name).read_bytes()
    assert [p.name for p in stored(out)] == [p.name for p in stored(alone)]


def test_resuming_with_other_requests_reuses_no_part(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    first = CliRunner().invoke(main, sweep_command(tiny, out, "-n", "40")[3:])
    assert first.exit_code == 0, first.output
    before = snapshot(out)
    again = CliRunner().invoke(main, sweep_command(tiny, out, "-n", "60")[3:])
    assert again.exit_code == 2
    assert "holds a different sweep" in again.stderr
    assert snapshot(out) == before
    # and had the folder check been fooled, no part of the -n 40 sweep names a -n 60 point
    spec = load_scenario(tiny)
    sixty = fingerprint(compile_scenario(spec), 60, ["wait", "cut"])
    assert not {p.key(sixty) for p in expand(compile_scenario(spec))} & {
        p.name for p in stored(out)
    }


@pytest.fixture
def scheduler() -> Iterator[str]:
    """A dask scheduler on a free port with no workers of its own."""
    from dask.distributed import LocalCluster  # noqa: PLC0415

    cluster = LocalCluster(
        n_workers=0, processes=True, host="127.0.0.1", scheduler_port=0, dashboard_address=None
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def test_losing_every_dask_worker_ends_in_one_line_and_keeps_the_points(
    tiny: Path, tmp_path: Path, scheduler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dask.distributed import Client  # noqa: PLC0415

    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "distributed.cli.dask_worker", scheduler),
            *("--nthreads", "1", "--no-nanny", "--no-dashboard"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Client(scheduler, timeout=SAFETY_S) as client:
            client.wait_for_workers(1, timeout=SAFETY_S)
        out = tmp_path / "sw"
        write_part = SweepStore.write_part

        def write_then_kill_the_worker(store: SweepStore, result: Any) -> None:
            write_part(store, result)
            if worker.poll() is None:  # after the first point is stored: every worker dies
                worker.kill()
                worker.wait()

        monkeypatch.setattr(SweepStore, "write_part", write_then_kill_the_worker)
        args = sweep_command(tiny, out, "-e", "dask", "--scheduler", scheduler)[3:]
        lost = CliRunner().invoke(main, args)
        assert lost.exit_code == 2, lost.output + repr(lost.exception)
        line = lost.stderr.strip().splitlines()[-1]
        assert "Traceback" not in lost.stderr
        found = re.search(
            r"lost its workers .*; (\d+) of 4 points stored; resume with: (.*)$", line
        )
        assert found, line
        kept = snapshot(out / PARTS)
        assert int(found[1]) == len(stored(out)) >= 1
        assert found[2].startswith("tailsim sweep ")
        assert f"--scheduler {scheduler}" in found[2]
        assert f"--out {out}" in found[2]
        # again, with no worker at all: the same kind of line, the points still there
        monkeypatch.setattr(executors, "WAIT_FOR_WORKERS_S", 0.5)
        none = CliRunner().invoke(main, args)
        assert none.exit_code == 2, none.output + repr(none.exception)
        assert "Traceback" not in none.stderr
        assert re.search(
            rf"has no workers .*; {found[1]} of 4 points stored; resume with: tailsim sweep ",
            none.stderr.strip().splitlines()[-1],
        ), none.stderr
        assert snapshot(out / PARTS) == kept
        assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_a_script_without_a_main_guard_gets_one_line_naming_the_guard(
    tmp_path: Path, tiny: Path
) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sim\n"
        f"sim.sweep({str(tiny)!r}, policies=['wait'], executor='processes', workers=2)\n",
        encoding="utf-8",
    )
    ended = subprocess.run(
        [sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=SAFETY_S
    )
    assert ended.returncode == 1
    last = ended.stderr.strip().splitlines()[-1]
    assert last.startswith("sim.study.executors.WorkersLostError: executor 'processes': ")
    assert f"re-ran {script}" in last
    assert 'if __name__ == "__main__":' in last
    assert ended.stderr.count("Traceback") == 1  # the script's own; the workers leave quietly


def _live_in_group(pgid: int) -> list[int]:
    """Processes of process group `pgid` that still run (zombies, already dead, left out)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_kill_9_of_a_process_sweep_leaves_no_process_holding_its_pipes(
    scenario_file: Any, tmp_path: Path
) -> None:
    many = scenario_file(
        {
            "pilot": {"requests": 40},
            "sweep": {
                "grid": {"providers.direct.concurrency": [24, 32, 48, 64]},
                "replications": 2,
            },
        }
    )
    out = tmp_path / "sw"
    proc = subprocess.Popen(
        sweep_command(many, out, "-n", "1500", "-e", "processes", "-w", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the forkserver, workers and tracker too
    )
    try:
        wait_for(lambda: bool(stored(out)), proc)
        os.kill(proc.pid, signal.SIGKILL)  # the sweep alone; its children are left to themselves
        assert len(stored(out)) < 8  # killed mid-sweep, the pool still working
        # every process that inherited stdout and stderr has let go: a wrapper sees the end
        proc.communicate(timeout=SAFETY_S)
        wait_for(lambda: not _live_in_group(proc.pid))
    finally:
        if _live_in_group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
