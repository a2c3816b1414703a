"""One writer per results folder: an OS file lock held while a sweep fills the folder.

The lock (`.lock`, via the `filelock` library: `flock` on Unix) is released by the operating
system when its holder dies, even by `kill -9`, so a killed sweep never leaves a stale lock. The
holder writes who it is (pid, command, start time) beside it in `.lock.owner`, so a second
writer is refused with a message naming the process in the way.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from sim.model.errors import ScenarioError

LOCK = ".lock"
OWNER = ".lock.owner"
#: Names the lock keeps in a folder (not results: a folder holding only these is empty).
LOCK_FILES = (LOCK, OWNER)


class FolderLock:
    """Exclusive, non-blocking hold on `folder` for one writer; a context manager."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = FileLock(str(folder / LOCK), timeout=0)

    def acquire(self) -> FolderLock:
        """Take the lock at once or refuse (ScenarioError naming the holder); the folder must
        exist."""
        try:
            self._lock.acquire()
        except Timeout:
            raise ScenarioError(
                str(self.folder),
                [
                    (
                        "",
                        f"another tailsim process is writing this folder ({holder(self.folder)}); "
                        "wait for it to end (the same command then resumes from its points), "
                        "or choose another --out",
                    )
                ],
            ) from None
        except OSError as exc:
            raise ScenarioError(str(self.folder), [("", f"cannot lock: {exc}")]) from None
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "",
            "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        with suppress(OSError):  # the note is a courtesy; the lock is what protects the folder
            (self.folder / OWNER).write_text(json.dumps(owner) + "\n", encoding="utf-8")
        return self

    def release(self) -> None:
        """Let the folder go (the OS does the same if this process dies)."""
        if self._lock.is_locked:
            (self.folder / OWNER).unlink(missing_ok=True)
            self._lock.release()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


#: How long a refused writer waits for the holder's note (written right after it takes the lock).
NOTE_WAIT_S = 5.0


def holder(folder: Path, wait_s: float = NOTE_WAIT_S) -> str:
    """`pid N on HOST: COMMAND, since TIME` for the process holding `folder`, as far as known.

    A writer that lost the race for the lock can look before the winner has written its note
    (or while the note of an earlier, dead holder is still there): it reads again for up to
    `wait_s` seconds, so under load the message still names the process in the way."""
    give_up = time.monotonic() + wait_s
    while True:
        owner = _live_owner(folder)
        if owner is not None or time.monotonic() >= give_up:
            break
        time.sleep(0.05)
    if owner is None:
        return "its pid is not written yet"
    pid = int(owner["pid"])
    text = f"pid {pid}"
    if owner.get("host") and owner["host"] != socket.gethostname():
        text += f" on {owner['host']}"
    if owner.get("command"):
        text += f": {owner['command']}"
    if owner.get("started_utc"):
        text += f", since {owner['started_utc']}"
    return text


def _live_owner(folder: Path) -> dict[str, Any] | None:
    """The holder's note if it names a live process (or one on another host), else None."""
    try:
        owner: dict[str, Any] = json.loads((folder / OWNER).read_text(encoding="utf-8"))
        pid = int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not written yet, or half-written
    if owner.get("host") == socket.gethostname() and not _alive(pid):
        return None  # a dead writer's note; the holder is about to write its own
    return owner


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
