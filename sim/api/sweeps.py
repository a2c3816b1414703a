"""`sweep`: a scenario's grid x replications, in memory (`sweep`) or stored in a folder point by
point and resumable (`sweep_stored`, what `tailsim sweep` does).

The wiring of the layers: the study layer runs the points (`sim.study.sweep.run_points`) and
hands each finished one here, the output layer's store writes it (`sim.output.store`), so a
killed sweep resumes where it stopped; the folder is locked while it fills."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from sim.api.inputs import ScenarioLike, optional_path, plan_of, source_of
from sim.api.options import check_executor, label, policy_list
from sim.api.results import SweepResult
from sim.api.run import chosen_policies
from sim.model.errors import ScenarioError
from sim.model.version import __version__
from sim.model.words import plural
from sim.output.store import SweepStore, default_sweep_folder
from sim.plan import Plan, recompile
from sim.study.executors import Executor, WorkersLostError
from sim.study.points import PointResult, SweepPoint
from sim.study.sweep import expand, run_points, run_sweep, with_engine

#: progress(points done, points in all, the point just done or None at the start).
SweepProgress = Callable[[int, int, SweepPoint | None], None]


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a stored sweep: what is stored stays; the same call again resumes."""

    def __init__(self, folder: Path, stored: int, total: int) -> None:
        self.folder, self.stored, self.total = folder, stored, total
        super().__init__(
            f"interrupted: {stored} of {plural(total, 'point')} stored in {folder}; run the same "
            "command again to resume"
        )


def sweep_plan(scenario: ScenarioLike, seed: int | None = None, engine: str | None = None) -> Plan:
    """The plan to sweep with `seed` and `engine` in it (so every point runs them and a stored
    sweep is keyed by them), its points checked; refused without a `sweep:` grid."""
    source = source_of(scenario)
    plan = plan_of(scenario)
    if seed is not None:
        plan = recompile(plan, {"seed": seed}, source=source)
    if engine is not None:
        plan = with_engine(plan, engine, source)
    if plan.sweep is None or not (plan.sweep.grid or plan.sweep.zip):
        raise ScenarioError(
            source,
            [("sweep", "missing: add `sweep: {grid: {key.path: [values]}, replications: N}`")],
        )
    expand(plan)  # checks every swept key and value
    return plan


def sweep(
    scenario: ScenarioLike = None,
    *,
    requests: int | None = None,
    seed: int | None = None,
    policies: Sequence[str] | None = None,
    executor: str = "inline",
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int, SweepPoint], None] | None = None,
    engine: str | None = None,
) -> SweepResult:
    """Run a scenario's sweep (a YAML path, a Scenario, a Plan or None for the bundled default)
    in memory and return the stacked tables; `.aggregate`, `.save(dir)` and `.plot()` on the
    result. `engine` overrides the scenario's `engine:` at every point. See `sweep_stored` for
    a sweep kept in a folder as it runs."""
    check_executor(executor, workers, scheduler)
    plan = plan_of(scenario)
    if seed is not None:
        plan = recompile(plan, {"seed": seed})
    if engine is not None:
        plan = with_engine(plan, engine)
    result = run_sweep(
        plan,
        requests=requests,
        policies=policy_list(policies),
        executor=executor,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
    )
    return SweepResult.of(result)


def sweep_stored(
    scenario: ScenarioLike = None,
    out: str | Path | None = None,
    *,
    requests: int | None = None,
    seed: int | None = None,
    policies: Sequence[str] | None = None,
    engine: str | None = None,
    executor: str = "inline",
    workers: int | None = None,
    scheduler: str | None = None,
    figures: bool = True,
    progress: SweepProgress | None = None,
    notice: Callable[[str], None] | None = None,
    resume_hint: Callable[[Path], str] | None = None,
) -> tuple[SweepResult, Path]:
    """Run a scenario's sweep as `tailsim sweep` does: each point stored in `out` (default
    results/<name>/sweep-<fingerprint>/) as it finishes, the folder locked while it fills, and
    the points already stored skipped, so the same call again resumes a killed sweep. Returns
    the pooled result and the folder. `notice(text)` hears that a sweep resumes; Ctrl-C raises
    `SweepInterrupted`; lost workers a ScenarioError ending with `resume_hint(folder)`."""
    check_executor(executor, workers, scheduler)
    plan = sweep_plan(scenario, seed, engine)
    chosen = policy_list(policies)
    chosen_policies(plan, chosen)  # unknown names stop here, before any work
    points = expand(plan)
    given = optional_path(out, label("out"))
    folder = given if given is not None else default_sweep_folder(plan, requests, chosen)
    result = _store_points(
        folder,
        plan,
        points,
        source_of(scenario),
        requests=requests,
        policies=chosen,
        pool=Executor(executor, workers, scheduler),
        figures=figures,
        progress=progress,
        notice=notice,
        resume_hint=resume_hint,
    )
    return result, folder


def _store_points(
    folder: Path,
    plan: Plan,
    points: list[SweepPoint],
    source: str,
    *,
    requests: int | None,
    policies: Sequence[str] | None,
    pool: Executor,
    figures: bool,
    progress: SweepProgress | None,
    notice: Callable[[str], None] | None,
    resume_hint: Callable[[Path], str] | None,
) -> SweepResult:
    """Run the points not yet stored in `folder` on `pool` and store each as it finishes, then
    the pooled tables.

    One piece, longer than most: the pool, the folder's lock and what Ctrl-C, lost workers or
    any failure leave behind (a new folder with nothing stored is removed) belong together."""
    created = not folder.exists()
    with (
        pool,  # reaches a scheduler first
        SweepStore.open(  # locks the folder: a second writer is refused, naming this one
            folder, plan, points, requests=requests, policies=policies, source=source,
            version=__version__,
        ) as store,
    ):  # fmt: skip
        pending = store.pending()
        total, already = len(points), len(points) - len(pending)
        if already and notice is not None:  # it changes what runs
            notice(
                f"resuming {folder}: {already} of {plural(total, 'point')} already finished, "
                f"skipping them; running {len(pending)}"
            )
        if progress is not None:
            progress(already, total, None)
        finished = [already]

        def done(result: PointResult) -> None:
            store.write_part(result)
            finished[0] += 1
            if progress is not None:
                progress(finished[0], total, result.point)

        try:
            run_points(
                pool, plan, pending, store.keys, requests=requests, policies=policies,
                on_done=done,
            )  # fmt: skip
        except KeyboardInterrupt:
            raise SweepInterrupted(folder, store.stored(), total) from None
        except WorkersLostError as exc:
            stored = store.stored()
            if created and not stored:
                shutil.rmtree(folder, ignore_errors=True)
            hint = (
                resume_hint(folder) if resume_hint is not None else f"the same call, out={folder}"
            )
            line = f"{exc.what}; {stored} of {plural(total, 'point')} stored; resume with: {hint}"
            raise ScenarioError(str(folder), [("", line)]) from None
        except BaseException:
            if created and not store.done():
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return store.finish(figures=figures)
