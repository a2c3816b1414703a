"""Where sweep points run: inline, in local processes, or on dask.distributed.

Every executor calls the same pure, module-level function on each item (a sweep's points:
`sim.study.sweep.run_point`; a run's policies: `sim.study.policy_pool.policy_job`) and hands each
result back to the caller's `on_done` in this process as it finishes (the caller stores it);
results never depend on which executor or how many workers ran them, because a point's seed is
fixed by its coordinates (see `sim.study.sweep`). This module names no caller, so the sweep and
the policy pool import it, never the other way round.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.model.errors import ScenarioError
from sim.study.parent_watch import ParentLifeline, watch_parent

if TYPE_CHECKING:
    from sim.study.points import PointResult, SweepPoint

EXECUTORS = ("inline", "processes", "dask")
#: The module the forkserver imports once, before it forks the workers: what a point needs (the
#: engines, the plan, the study layer; pandas for the tables), never the figures or the CLI.
WORKER_MODULE = "sim.study.sweep"
#: Seconds to wait for an existing dask scheduler before giving up with a clear message.
CONNECT_TIMEOUT_S = 10
#: Seconds a dask sweep waits for at least one worker before saying the cluster has none.
WAIT_FOR_WORKERS_S = 10


class WorkersLostError(ScenarioError):
    """The executor's workers died or left mid-sweep (killed, out of memory, a dask cluster
    gone): `what` says which, `hint` what may have caused it; the points finished before are
    stored, so the caller can say how to resume."""

    def __init__(self, executor: str, what: str, hint: str = "") -> None:
        self.what = what
        super().__init__(f"executor {executor!r}", [("", f"{what}; {hint}" if hint else what)])


def check_executor(executor: str, workers: int | None, scheduler: str | None) -> None:
    """Refuse, before any work, an unknown executor or options that do not go with it."""
    if executor not in EXECUTORS:
        raise ScenarioError(
            "--executor", [("", f"unknown executor {executor!r} (allowed: {', '.join(EXECUTORS)})")]
        )
    if scheduler is not None and executor != "dask":
        raise ScenarioError("--scheduler", [("", "needs --executor dask")])
    if workers is not None and workers < 1:
        raise ScenarioError("--workers", [("", f"must be >= 1, got {workers}")])


def default_workers() -> int:
    """The processes to use when --workers is not given: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


class Executor:
    """Runs points and hands back each result as it finishes; a context manager, so a pool or
    a dask client is set up (and a scheduler reached) before any result folder is touched."""

    def __init__(
        self, kind: str = "inline", workers: int | None = None, scheduler: str | None = None
    ):
        check_executor(kind, workers, scheduler)
        self.kind, self.workers, self.scheduler = kind, workers, scheduler
        self._client: Any = None
        self._cluster: Any = None

    def __enter__(self) -> Executor:
        if self.kind == "dask":
            self._client, self._cluster = _dask_client(self.workers, self.scheduler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None

    @property
    def client(self) -> Any:
        """The dask client (None unless a dask executor is entered)."""
        return self._client

    def each(
        self,
        fn: Callable[..., Any],
        shared: Any,
        items: Sequence[Any],
        args: tuple[Any, ...],
        on_done: Callable[[Any], None],
    ) -> None:
        """Run `fn(shared, item, *args)` for every item (a sweep's points, a run's policies)
        on this executor; `on_done(result)` is called in this process as each one finishes.
        `fn` must be importable by name (a module-level function) for processes and dask."""
        if not items:
            return
        if self.kind == "inline":
            for item in items:
                on_done(fn(shared, item, *args))
        elif self.kind == "processes":
            _run_processes(fn, shared, items, args, self.workers, on_done)
        else:
            if self._client is None:
                raise RuntimeError("use the dask Executor as a context manager")
            _run_dask(self._client, fn, shared, items, args, on_done)


def _run_processes(
    fn: Callable[..., PointResult],
    shared: Any,
    points: Sequence[SweepPoint],
    args: tuple[Any, ...],
    workers: int | None,
    on_done: Callable[[PointResult], None],
) -> None:
    """A local process pool ('forkserver': safe beside threads such as a progress bar) whose
    workers end if this process dies (`sim.study.parent_watch`)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # a worker re-running an unguarded script: leave quietly, the parent says what to do
        raise SystemExit(1)
    count = min(workers or default_workers(), len(points))
    context = get_context("forkserver")
    context.set_forkserver_preload([WORKER_MODULE])
    with ParentLifeline(context) as lifeline:
        try:
            with ProcessPoolExecutor(
                max_workers=count,
                mp_context=context,
                initializer=watch_parent,
                initargs=(lifeline.child_end,),
            ) as pool:
                with _workers_skip_the_console_script():  # the workers start on submit
                    futures = [pool.submit(fn, shared, point, *args) for point in points]
                try:
                    for future in as_completed(futures):
                        on_done(future.result())
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise
        except BrokenProcessPool:
            raise WorkersLostError("processes", *_broken_pool_reason()) from None


@contextmanager
def _workers_skip_the_console_script() -> Iterator[None]:
    """While workers start, have them skip re-importing `tailsim`'s console script.

    multiprocessing makes each worker import the parent's main script (as `__mp_main__`), so a
    script's own functions can run there. The `tailsim` console script is `from sim.cli import
    main`, and sim.cli loads every command (matplotlib, seaborn, rich: seconds per worker)
    where a point needs only `WORKER_MODULE`, preloaded once in the forkserver. A main module
    named like a package's `__main__` is one multiprocessing never re-imports (as for `python
    -m sim.cli`), so that is the name the workers are given; a user's own script is re-imported
    as before (its main guard still matters, see `_broken_pool_reason`)."""
    main = sys.modules.get("__main__")
    cli = sys.modules.get("sim.cli")
    console = (
        main is not None
        and cli is not None
        and getattr(main, "__spec__", None) is None
        and getattr(main, "main", None) is getattr(cli, "main", object())
    )
    if not console:
        yield
        return
    main.__spec__ = ModuleSpec("sim.cli.__main__", None)  # type: ignore[union-attr]
    try:
        yield
    finally:
        main.__spec__ = None  # type: ignore[union-attr]


def imported_modules(_shared: object = None, _item: object = None) -> list[str]:
    """The modules loaded in this process, sorted: run as an executor's item, what a worker
    holds (the tests and benchmarks/sweep.py keep the workers' imports light with it)."""
    return sorted(sys.modules)


def _broken_pool_reason() -> tuple[str, str]:
    """Why a process pool broke and the likely fix: from a script, most often a missing
    `__main__` guard (each worker re-imports the script, which starts the sweep again)."""
    guard = 'if __name__ == "__main__":'
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    script = ""
    if path and Path(path).is_file():
        try:
            script = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            script = ""
    if script and "__main__" not in script:
        return (
            f"the worker processes re-ran {path} (each worker imports the script that started "
            f"it), which has no `{guard}` guard: put the sweep call under one",
            "",
        )
    return (
        "a worker process ended abruptly (BrokenProcessPool: killed, or out of memory?)",
        f"from a script, the sweep call must sit under `{guard}` (each worker imports the script)",
    )


def _dask_client(workers: int | None, scheduler: str | None) -> tuple[Any, Any]:
    """A client of a LocalCluster of `workers` single-threaded processes, or of the existing
    scheduler at `scheduler` (how a sweep outgrows one machine)."""
    try:
        from dask.distributed import Client, LocalCluster  # noqa: PLC0415
    except ImportError:  # pragma: no cover - dask is a dependency
        raise ScenarioError(
            "--executor", [("", "dask needs dask[distributed]: pip install 'dask[distributed]'")]
        ) from None
    if scheduler is not None:
        try:
            return Client(scheduler, timeout=CONNECT_TIMEOUT_S), None
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            raise ScenarioError(
                "--scheduler",
                [
                    (
                        "",
                        f"cannot reach a dask scheduler at {scheduler!r} ({exc}); "
                        "give an address like tcp://host:8786, or leave --scheduler out for a "
                        "local cluster",
                    )
                ],
            ) from None
    cluster = LocalCluster(
        n_workers=workers or default_workers(),
        threads_per_worker=1,
        processes=True,
        scheduler_port=0,
        # the scheduler serves HTTP even without a dashboard, on :8787 unless told: a free
        # local port instead, so two clusters on one machine never compete for a port
        dashboard_address="127.0.0.1:0",
    )
    return Client(cluster), cluster


def _run_dask(
    client: Any,
    fn: Callable[..., PointResult],
    shared: Any,
    points: Sequence[SweepPoint],
    args: tuple[Any, ...],
    on_done: Callable[[PointResult], None],
) -> None:
    """Submit every point to the dask client and hand back results as they complete."""
    from dask.distributed import as_completed as dask_completed  # noqa: PLC0415

    try:
        remote = client.scatter(shared, broadcast=True, timeout=WAIT_FOR_WORKERS_S)
    except (TimeoutError, OSError) as exc:
        raise WorkersLostError("dask", f"the dask cluster has no workers ({exc})") from None
    futures = [client.submit(fn, remote, point, *args, pure=False) for point in points]
    try:
        for future in dask_completed(futures):
            try:
                result = future.result()
            except Exception as exc:
                if not _workers_gone(exc, future):
                    raise  # the point's own error, as raised in the worker
                raise WorkersLostError(
                    "dask", f"the dask cluster lost its workers ({type(exc).__name__})"
                ) from None
            on_done(result)
    except BaseException:
        client.cancel(futures)
        raise


def _workers_gone(exc: Exception, future: Any) -> bool:
    """Whether a dask future failed because its worker (or the data scattered to it) is gone,
    not because the point itself raised."""
    from distributed import KilledWorker  # noqa: PLC0415 - dask loads only when used

    if isinstance(exc, KilledWorker | concurrent.futures.CancelledError | asyncio.CancelledError):
        return True
    return isinstance(exc, OSError) and future.status != "error"  # a connection, not the point
