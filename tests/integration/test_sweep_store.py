"""Sweeps at scale through the CLI and the API: executors give the same bytes, the store pools
replications and resumes (after a SIGKILL too), the seed names another folder, bad input exits 2
and writes nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import pytest
from click.testing import CliRunner

import sim
from sim.cli import main
from sim.study import executors

TABLES = ("summary.csv", "replications.csv")
#: Wall-time bound on a child process: only a hang reaches it, never a loaded machine.
HANG_S = 900


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


def sweep_cli(*args: str) -> Any:
    return CliRunner().invoke(main, ["sweep", *args, "-p", "wait", "-p", "cut", "-q"])


@pytest.mark.filterwarnings("error:Port .* is already in use:UserWarning")
def test_processes_and_dask_give_the_bytes_of_inline(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    links = []  # where each local dask cluster serves HTTP: a free local port, never :8787

    def dask_client(*args: Any) -> tuple[Any, Any]:
        client, cluster = dask_client_of_main(*args)
        links.append(urlsplit(cluster.dashboard_link))
        return client, cluster

    dask_client_of_main = executors._dask_client
    monkeypatch.setattr(executors, "_dask_client", dask_client)
    outs = {}
    for executor in ("inline", "processes", "dask"):
        out = tmp_path / executor
        workers = ["-w", "2"] if executor != "inline" else []  # -w with inline: exit 2
        result = sweep_cli(str(tiny), "--out", str(out), "-e", executor, *workers, "--no-plot")
        assert result.exit_code == 0, result.output + str(result.exception)
        outs[executor] = {name: (out / name).read_bytes() for name in TABLES}
    assert outs["processes"] == outs["inline"]
    assert outs["dask"] == outs["inline"]
    assert [(link.hostname, link.port != 8787) for link in links] == [("127.0.0.1", True)]


def test_summary_pools_replications_and_writes_the_store(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    assert sweep_cli(str(tiny), "--out", str(out), "--no-plot").exit_code == 0
    summary = pd.read_csv(out / "summary.csv")
    reps = pd.read_csv(out / "replications.csv")
    assert len(summary) == 2 * 2
    assert len(reps) == 2 * 2 * 2
    assert set(summary["replications"]) == {2}
    assert (summary["hit_rate_lo"] < summary["hit_rate_hi"]).all()  # never zero-width
    assert (summary["hit_rate_lo"] <= summary["hit_rate"]).all()
    assert (summary["hit_rate"] <= summary["hit_rate_hi"]).all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert len(manifest["points"]) == 4
    assert sorted(p.name for p in (out / "parts").iterdir()) == sorted(
        p["key"] for p in manifest["points"]
    )
    assert "providers:" in (out / "scenario.resolved.yaml").read_text()


def test_seed_option_changes_the_numbers_and_names_another_folder(
    tiny: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert sweep_cli(str(tiny), "--out", str(a), "--no-plot").exit_code == 0
    assert sweep_cli(str(tiny), "--out", str(b), "--no-plot", "--seed", "99").exit_code == 0
    assert (a / "replications.csv").read_bytes() != (b / "replications.csv").read_bytes()
    # the same folder cannot take a sweep of other seed: it would mix results
    again = sweep_cli(str(tiny), "--out", str(a), "--no-plot", "--seed", "99")
    assert again.exit_code == 2
    assert "holds a different sweep" in again.stderr


def test_rerun_skips_finished_points_and_gives_the_same_bytes(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    assert sweep_cli(str(tiny), "--out", str(out), "--no-plot").exit_code == 0
    full = {name: (out / name).read_bytes() for name in TABLES}
    # as if killed after two points: the rest of the parts and the pooled tables are missing
    manifest = json.loads((out / "manifest.json").read_text())
    for point in manifest["points"][2:]:
        for file in (out / "parts" / point["key"]).iterdir():
            file.unlink()
        (out / "parts" / point["key"]).rmdir()
    for name in TABLES:
        (out / name).unlink()
    result = CliRunner().invoke(
        main, ["sweep", str(tiny), "--out", str(out), "-p", "wait", "-p", "cut", "--no-plot"]
    )
    assert result.exit_code == 0, result.output
    assert "2 of 4 points already finished, skipping them; running 2" in result.stderr
    assert {name: (out / name).read_bytes() for name in TABLES} == full


def test_a_sweep_killed_with_sigkill_resumes(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "sw"
    command = [
        sys.executable,
        "-m",
        "sim.cli",
        "sweep",
        str(tiny),
        "--out",
        str(out),
        "-q",
        "--no-plot",
        "-p",
        "wait",
        "-p",
        "cut",
        "-n",
        "400",
    ]
    proc = subprocess.Popen(command, start_new_session=True)
    hang = time.monotonic() + HANG_S  # a bound against a hang, never reached by a slow machine
    try:
        while not _stored_parts(out):
            assert proc.poll() is None, f"the sweep ended (exit {proc.returncode}) before a part"
            assert time.monotonic() < hang, f"no part stored in {HANG_S} s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = len(_stored_parts(out))
    assert 1 <= finished < 4
    assert not (out / "summary.csv").exists()
    status = CliRunner().invoke(main, ["plot", str(out)])
    assert status.exit_code == 2
    assert "not finished" in status.stderr
    result = CliRunner().invoke(main, command[3:])  # the same command again
    assert result.exit_code == 0, result.output
    assert f"{finished} of 4 points already finished, skipping them" in result.stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    assert not list((out / "parts").glob(".*"))  # no staging left behind


def _stored_parts(out: Path) -> list[Path]:
    """The finished points stored in the sweep folder `out` (staging folders start with a dot)."""
    return list((out / "parts").glob("[!.]*")) if (out / "parts").is_dir() else []


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A local TCP port where nothing listens, kept so while the test runs: a socket bound to a
    free port and never listening holds it, and a connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-e", "threads"], "'threads' is not one of 'inline', 'processes', 'dask'"),
        (["--scheduler", "tcp://127.0.0.1:9"], "--scheduler: needs --executor dask"),
    ],
)
def test_bad_executor_options_exit_2_and_write_nothing(
    tiny: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    out = tmp_path / "o"
    result = sweep_cli(str(tiny), "--out", str(out), *args)
    assert result.exit_code == 2
    assert needle in result.stderr
    assert "Traceback" not in result.output
    assert not out.exists()


def test_unreachable_scheduler_exits_2_and_writes_nothing(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT_S", 1)
    out = tmp_path / "o"
    address = f"tcp://127.0.0.1:{closed_port}"
    result = sweep_cli(str(tiny), "--out", str(out), "-e", "dask", "--scheduler", address)
    assert result.exit_code == 2, result.output
    assert f"cannot reach a dask scheduler at '{address}'" in result.stderr
    assert not out.exists()


def test_a_foreign_folder_is_refused(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = sweep_cli(str(tiny), "--out", str(out))
    assert result.exit_code == 2
    assert "not a tailsim sweep folder" in result.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_the_python_api_mirrors_the_cli(tiny: Path, tmp_path: Path) -> None:
    result = sim.sweep(tiny, policies=["wait"], requests=40)
    assert len(result.summary) == 4
    assert len(result.aggregate) == 2
    assert list(result.summary.columns[:3]) == [
        "providers.direct.concurrency",
        "replication",
        "seed",
    ]
    folder = result.save(tmp_path / "api")
    cli = tmp_path / "cli"
    assert (
        CliRunner()
        .invoke(
            main,
            ["sweep", str(tiny), "--out", str(cli), "-p", "wait", "-n", "40", "-q", "--no-plot"],
        )
        .exit_code
        == 0
    )
    assert (folder / "summary.csv").read_bytes() == (cli / "summary.csv").read_bytes()
    assert result.plot().axes
    assert sim.report(folder).is_file()
