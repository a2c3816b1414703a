"""Worker processes that end when the process that started them dies (even by `kill -9`).

A pool's workers block waiting for work and hold the pipes of the forkserver and the resource
tracker; if the sweep is killed they would wait forever, and with them the forkserver, the
tracker and whatever they inherited (the sweep's stdout and stderr, which a wrapper may be
reading to EOF). So the parent keeps the write end of a pipe that no other process holds, each
worker a thread reading its other end: end of file means the parent is gone, and the worker
exits at once. A pipe works on every Unix and needs no polling (the parent's pid could be reused,
and a killed parent stays a zombie until reaped).
"""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from multiprocessing.connection import Connection
from typing import Any

#: Exit code of a worker whose parent died (what a shell reports for SIGKILL, 128 + 9).
ORPHANED = 137


class ParentLifeline:
    """The parent's end of the pipe: hand `child_end` to each worker's initializer
    (`watch_parent`), keep this object until the workers are done, then `close()` it."""

    def __init__(self, context: Any) -> None:
        self.child_end, self._parent_end = context.Pipe(duplex=False)

    def close(self) -> None:
        """Drop both ends (workers still alive see end of file and exit)."""
        self._parent_end.close()
        self.child_end.close()

    def __enter__(self) -> ParentLifeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watch_parent(lifeline: Connection) -> None:
    """Pool initializer: a daemon thread ends this worker when the parent's end closes."""

    def wait() -> None:
        with suppress(EOFError, OSError):
            lifeline.recv_bytes()  # the parent never sends: this returns only at end of file
        os._exit(ORPHANED)

    threading.Thread(target=wait, name="tailsim-parent-watch", daemon=True).start()
