"""The folder lock's holder note (sim.output.lock): who is writing a folder, as a refused writer
is told it. Two writers racing for a real folder are in tests/integration/test_sweep_safety.py."""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

import pytest

from sim.output import lock
from sim.output.lock import OWNER, holder

#: A pid the tests pretend is another user's process (os.kill is replaced: no signal is sent).
OTHER_USERS_PID = 4_000_000


def _note(folder: Path, pid: int) -> None:
    """The holder's note, as `FolderLock.acquire` writes it, for `pid` on this machine."""
    owner = {"pid": pid, "host": socket.gethostname(), "command": "tailsim sweep s.yaml",
             "started_utc": "2025-01-01T00:00:00+00:00"}  # fmt: skip
    (folder / OWNER).write_text(json.dumps(owner) + "\n", encoding="utf-8")


def _kill_raising(error: OSError) -> object:
    def kill(pid: int, signal: int) -> None:
        assert (pid, signal) == (OTHER_USERS_PID, 0)  # only ever asked whether it exists
        raise error

    return kill


def test_a_holder_signals_cannot_reach_is_alive_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: `_alive` taking a PermissionError from `os.kill(pid, 0)` as a dead holder. The
    error means the process exists but belongs to another user (a sweep started under another
    account, or in a container): the refused writer must still be told who holds the folder,
    not 'its pid is not written yet' (what a dead holder's note gives)."""
    _note(tmp_path, OTHER_USERS_PID)
    monkeypatch.setattr(lock.os, "kill", _kill_raising(PermissionError(errno.EPERM, "EPERM")))
    assert holder(tmp_path, wait_s=0.0) == (
        f"pid {OTHER_USERS_PID}: tailsim sweep s.yaml, since 2025-01-01T00:00:00+00:00"
    )


def test_a_dead_holders_note_names_no_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: no such process (ProcessLookupError) is a dead writer's note."""
    _note(tmp_path, OTHER_USERS_PID)
    monkeypatch.setattr(lock.os, "kill", _kill_raising(ProcessLookupError(errno.ESRCH, "ESRCH")))
    assert holder(tmp_path, wait_s=0.0) == "its pid is not written yet"


def test_a_live_holder_is_named(tmp_path: Path) -> None:
    """This very process, which signal 0 reaches, is alive and named by its note."""
    _note(tmp_path, os.getpid())
    assert holder(tmp_path, wait_s=0.0).startswith(f"pid {os.getpid()}: tailsim sweep s.yaml")
