"""A run's policies side by side on the sweep's executors (`tailsim run -e processes -w 2`).

Each worker rebuilds the run's arrivals and draw bank from the seed (`RunJob.context`), so a
policy sees exactly the draws it sees inline (common random numbers across policies) and the
stacked tables are the same to the last bit; the pilot's thresholds travel with the plan. Progress
and Ctrl-C cross the process boundary a few times a second at most, never per request: over a
UNIX socket to local processes (no helper process that could outlive this one; a worker whose
parent has gone stops at its next look), through the scheduler's queue and event on dask.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import shutil
import signal
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import parent_process
from typing import Any

from sim.model.errors import ScenarioError
from sim.plan import Plan
from sim.study.executors import Executor
from sim.study.policy_run import PolicyOutcome, RunJob, run_policy

#: Seconds between a worker's progress messages (and its looks at the stop event).
RELAY_EVERY_S = 0.25
#: Seconds the parent waits on the progress queue before looking at `stop()` again.
POLL_S = 0.1


class _SocketChannel:
    """A local worker's end of the relay: a UNIX socket to the parent, opened on first use;
    the parent writes one byte to say halt (or closes it by dying: halt too)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._sock: socket.socket | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def _socket(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.connect(self.path)
            self._sock.setblocking(False)
        return self._sock

    def send(self, name: str, k: int) -> None:
        """Tell the parent that `k` more requests of policy `name` have arrived."""
        sock = self._socket()
        sock.setblocking(True)
        try:
            sock.sendall(f"{k} {name}\n".encode())
        except OSError:  # the parent has gone: halted() says so next
            pass
        finally:
            sock.setblocking(False)

    def halted(self) -> bool:
        """Whether the parent said halt, or has gone."""
        try:
            self._socket().recv(1)  # a byte: halt; nothing (end of stream): the parent is gone
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class _SocketHub:
    """The parent's end for local processes: a UNIX socket in a private folder of its own, the
    workers' progress lines read from it, a byte written to each to halt them."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="tailsim-run-")  # 0700: only this user connects
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(os.path.join(self.folder, "relay"))
        self.server.listen()
        self.server.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server, selectors.EVENT_READ)
        self.clients: dict[socket.socket, bytes] = {}
        self.lock = threading.Lock()
        self.halted = False
        self.channel = _SocketChannel(os.path.join(self.folder, "relay"))

    def receive(self, timeout: float) -> list[tuple[str, int]]:
        """The progress messages that came within `timeout` seconds (none if none did)."""
        found: list[tuple[str, int]] = []
        for key, _ in self.selector.select(timeout):
            sock = key.fileobj
            if sock is self.server:
                self._accept()
                continue
            try:
                data = sock.recv(65536)  # type: ignore[union-attr]
            except OSError:
                data = b""
            with self.lock:
                if not data:  # the worker closed its end
                    self.selector.unregister(sock)
                    self.clients.pop(sock, None)  # type: ignore[call-overload]
                    sock.close()  # type: ignore[union-attr]
                    continue
                *lines, rest = (self.clients[sock] + data).split(b"\n")  # type: ignore[index]
                self.clients[sock] = rest  # type: ignore[index]
            for line in lines:
                k, name = line.decode().split(" ", 1)
                found.append((name, int(k)))
        return found

    def _accept(self) -> None:
        try:
            sock, _ = self.server.accept()
        except BlockingIOError:
            return
        with self.lock:
            self.clients[sock] = b""
            self.selector.register(sock, selectors.EVENT_READ)
            if self.halted:
                _say_halt(sock)

    def halt(self) -> None:
        with self.lock:
            self.halted = True
            for sock in self.clients:
                _say_halt(sock)

    def close(self) -> None:
        with self.lock:
            for sock in self.clients:
                sock.close()
            self.clients.clear()
        self.selector.close()
        self.server.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _say_halt(sock: socket.socket) -> None:
    """One byte to a worker: halt (it may have gone already)."""
    with contextlib.suppress(OSError):
        sock.send(b"h")


class _DaskChannel:
    """A dask worker's end of the relay: the scheduler's queue and event (picklable by name)."""

    def __init__(self, messages: Any, halt: Any) -> None:
        self.messages, self.halt = messages, halt

    def send(self, name: str, k: int) -> None:
        self.messages.put((name, k))

    def halted(self) -> bool:
        return bool(self.halt.is_set())

    def close(self) -> None:
        return None


class _DaskHub:
    """The parent's end on dask: a distributed Queue and Event on the client's scheduler."""

    def __init__(self, client: Any) -> None:
        from distributed import Event, Queue  # noqa: PLC0415 - dask on demand

        self.channel = _DaskChannel(Queue(client=client), Event(client=client))

    def receive(self, timeout: float) -> list[tuple[str, int]]:
        found = self.channel.messages.get(batch=True)
        if not found:
            time.sleep(timeout)
        return [(str(name), int(k)) for name, k in found]

    def halt(self) -> None:
        self.channel.halt.set()

    def close(self) -> None:
        self.channel.messages.close()


@dataclass
class _Done:
    """What a worker hands back: the policy's outcome, or the error that ended it, or that it
    was stopped (by Ctrl-C, or because another policy failed)."""

    name: str
    outcome: PolicyOutcome | None = None
    error: BaseException | None = None
    stopped: bool = False


def run_policies(
    job: RunJob,
    executor: str,
    workers: int | None,
    scheduler: str | None,
    progress: Callable[[str, int], None] | None,
    stop: Callable[[], bool] | None,
) -> list[PolicyOutcome]:
    """Every policy of `job` on `executor`, its outcomes in the job's order. A failure stops
    the other policies and is raised here (the first in the job's order); `stop()` saying yes
    ends them all with KeyboardInterrupt."""
    outcomes: dict[str, PolicyOutcome] = {}
    failures: dict[str, BaseException] = {}
    with (
        Executor(executor, workers, scheduler) as pool,
        _relay(pool, job, progress, stop) as relay,
    ):

        def done(result: _Done) -> None:
            if result.outcome is not None:
                outcomes[result.name] = result.outcome
                relay.finished(result.name)
            elif not result.stopped:
                failures[result.name] = result.error or RuntimeError(f"{result.name} failed")
                relay.halt()  # the run has failed: the others need not finish

        try:
            order = heaviest_first(job)
            pool.each(policy_job, job.plan, order, (job, relay.channel), done)
        except BaseException:
            if relay.interrupted():
                raise KeyboardInterrupt from None
            raise
    if relay.interrupted():
        raise KeyboardInterrupt
    for name in job.names:
        if name in failures:
            raise failures[name]
    missing = [name for name in job.names if name not in outcomes]
    if missing:  # pragma: no cover - every policy either finishes, fails or is stopped
        raise RuntimeError(f"policies {missing} did not finish")
    return [outcomes[name] for name in job.names]


def heaviest_first(job: RunJob) -> list[str]:
    """The policies in the order to hand them to the workers: those that start more calls at
    once (a race's attempts, a draft beside the primary), summed over the steps, first; ties in
    the run's order. A policy cannot be split, so a long one handed out last keeps one worker
    busy while the others idle (tpm-saturation's inline policy times at 20,000 requests, 2.1,
    5.6, 4.2 and 4.5 s, finish on 2 workers after 0.62 of their sum in the run's order, after
    0.53 in this one)."""

    return sorted(job.names, key=lambda name: -job.plan.policies[name].weight)


def policy_job(plan: Plan, name: str, job: RunJob, channel: _SocketChannel | _DaskChannel) -> _Done:
    """Policy `name` of `job` in a worker (`plan` is the job's, sent once per worker by dask):
    the run's draws are made again from its seed. Errors come back as values, so the parent
    can stop the other policies at once rather than wait for them."""
    del plan  # the job holds the same plan
    if parent_process() is not None and threading.current_thread() is threading.main_thread():
        # a pool's process: Ctrl-C reaches the parent too, which relays it as a halt; a worker
        # hit directly while waiting for its next policy would die with a traceback instead
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    relay = _WorkerRelay(channel, name)
    try:
        outcome = run_policy(job.context(), name, relay.progress, relay.stop)
        relay.flush()
    except KeyboardInterrupt:
        return _Done(name, stopped=True)
    except Exception as exc:  # handed back whole, raised in the parent
        return _Done(name, error=_portable(exc))
    finally:
        channel.close()
    return _Done(name, outcome)


def _portable(exc: Exception) -> BaseException:
    """`exc` as it can cross to the parent: with the worker's traceback as a note (a
    ScenarioError, which is for people, as it is), or a RuntimeError carrying its text."""
    if not isinstance(exc, ScenarioError):
        exc.add_note("in the worker:\n" + "".join(traceback.format_exception(exc)))
    try:
        pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes
    except Exception:  # any exception that does not survive pickling
        return RuntimeError("".join(traceback.format_exception(exc)))
    return exc


class _WorkerRelay:
    """A worker's progress and stop callbacks: progress summed and sent every `RELAY_EVERY_S`,
    the halt looked at as often (once halted, always halted)."""

    def __init__(self, channel: _SocketChannel | _DaskChannel, name: str) -> None:
        self.channel, self.name = channel, name
        self.pending = 0
        self.halted = False
        self.last = time.monotonic()

    def progress(self, _policy: str, k: int) -> None:
        self.pending += k
        self._maybe_flush()

    def stop(self) -> bool:
        self._maybe_flush()
        return self.halted

    def _maybe_flush(self) -> None:
        if time.monotonic() - self.last >= RELAY_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Send the progress not yet sent and look at the halt event."""
        self.last = time.monotonic()
        if self.pending:
            self.channel.send(self.name, self.pending)
            self.pending = 0
        self.halted = self.halted or self.channel.halted()


class _ParentRelay:
    """The parent's end: a thread hands workers' progress to `progress` and turns `stop()`
    into a halt; a finished policy's count is topped up to the run's size."""

    def __init__(
        self,
        hub: _SocketHub | _DaskHub,
        n: int,
        progress: Callable[[str, int], None] | None,
        stop: Callable[[], bool] | None,
    ) -> None:
        self.hub, self.channel = hub, hub.channel
        self.n, self.progress, self.stop = n, progress, stop
        self.reported: dict[str, int] = {}
        self.closed: set[str] = set()
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._drain, name="tailsim-progress", daemon=True)

    def _drain(self) -> None:
        while not self.closing.is_set():
            for name, k in self.hub.receive(POLL_S):
                self._report(name, k)
            if self.interrupted():
                self.halt()

    def _report(self, name: str, k: int) -> None:
        with self.lock:
            if name in self.closed:
                return
            self.reported[name] = self.reported.get(name, 0) + k
            if self.progress is not None:
                self.progress(name, k)

    def finished(self, name: str) -> None:
        """Policy `name` is done: its progress reaches the run's size; later messages of it
        (sent before it finished, read after) are dropped."""
        with self.lock:
            left = self.n - self.reported.get(name, 0)
            self.closed.add(name)
            if left and self.progress is not None:
                self.progress(name, left)

    def halt(self) -> None:
        """Ask every worker to stop at its next safe point."""
        self.hub.halt()

    def interrupted(self) -> bool:
        """Whether the caller's `stop()` said yes."""
        return self.stop is not None and bool(self.stop())


@contextmanager
def _relay(
    pool: Any,
    job: RunJob,
    progress: Callable[[str, int], None] | None,
    stop: Callable[[], bool] | None,
) -> Iterator[_ParentRelay]:
    """Where the pool's workers send progress and look for a halt (a socket for local
    processes, the scheduler for dask), and the thread that reads it."""
    hub = _DaskHub(pool.client) if pool.kind == "dask" else _SocketHub()
    relay = _ParentRelay(hub, job.n, progress, stop)
    relay.thread.start()
    try:
        yield relay
    finally:
        relay.closing.set()
        relay.thread.join()
        hub.close()
