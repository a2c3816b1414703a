"""`run`: every policy of a scenario on the same draws, as `sim.run` (tables in memory) and as
`run_to_folder` (what `tailsim run` does: the folder checked before any work, the records kept
chosen by what fits in memory, the result files written all or nothing)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from sim.analysis.capacity import ALL, NONE, check_fits, default_records, estimated_bytes
from sim.api.inputs import ScenarioLike, optional_path, plan_of, source_of
from sim.api.options import check_executor, check_force, label, policy_list
from sim.api.results import RunResult
from sim.model.version import __version__
from sim.model.words import plural
from sim.output.results import check_writable, default_folder, run_files, write_results
from sim.plan import Plan
from sim.study import runner

#: progress(policy, requests just finished) as a policy runs.
RunProgress = Callable[[str, int], None]


def run(
    scenario: ScenarioLike = None,
    *,
    requests: int | None = None,
    seed: int | None = None,
    policies: Sequence[str] | None = None,
    progress: RunProgress | None = None,
    stop: Callable[[], bool] | None = None,
    engine: str | None = None,
    records: str | None = None,
    executor: str = "inline",
    workers: int | None = None,
    scheduler: str | None = None,
) -> RunResult:
    """Simulate the chosen policies (all by default) and return their tables; `.save(dir)` and
    `.plot()` on the result. `scenario`: a YAML path, a Scenario, a Plan or None (the bundled
    default); the options are `tailsim run`'s (`sim.api.options`)."""
    check_executor(executor, workers, scheduler)
    result = runner.run(
        plan_of(scenario),
        requests=requests,
        seed=seed,
        policies=policy_list(policies),
        progress=progress,
        stop=stop,
        engine=engine,
        records=records,
        executor=executor,
        workers=workers,
        scheduler=scheduler,
    )
    return RunResult.of(result)


def chosen_policies(plan: Plan, policies: Sequence[str] | str | None) -> list[str]:
    """The policies a run of `plan` runs (all by default); an unknown name is an error."""
    return runner.chosen_policies(plan, policy_list(policies), label("policies"))


def run_to_folder(
    scenario: ScenarioLike = None,
    out: str | Path | None = None,
    *,
    force: bool = False,
    figures: bool = True,
    requests: int | None = None,
    seed: int | None = None,
    policies: Sequence[str] | None = None,
    engine: str | None = None,
    records: str | None = None,
    executor: str = "inline",
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[list[str], int], RunProgress | None] | None = None,
    stop: Callable[[], bool] | None = None,
    notice: Callable[[str], None] | None = None,
    guard: Callable[[], AbstractContextManager[Callable[[], bool]]] | None = None,
) -> tuple[RunResult, Path]:
    """Run as `tailsim run` does and write the result files to `out` (a new folder
    results/<name>/<UTC time>/ without it; `force` replaces what `out` holds). Everything is
    checked before any work; `progress(policies, requests)` makes the per-policy callback,
    `notice(text)` hears why a big run keeps summaries only; `guard()`, entered around the
    simulation alone, yields its `stop` (the command line's Ctrl-C between events). Returns the
    result and its folder."""
    check_force(force, out)
    check_executor(executor, workers, scheduler)
    folder_given = optional_path(out, label("out"))
    plan = plan_of(scenario)
    folder = folder_given if folder_given is not None else default_folder(plan.name)
    check_writable(folder, overwrite=force or folder_given is None)  # before any work
    n = requests or plan.requests
    names = chosen_policies(plan, policies)  # unknown names stop here
    if records is None:
        records = default_records(plan, n, names)
        check_fits(plan, n, names, records=records)  # too big even so: only that is said
        if records != ALL and notice is not None:  # files the user may expect are absent
            notice(summaries_only_notice(plan, n, names, figures=figures))
    tick = progress(names, n) if progress is not None else None
    with guard() if guard is not None else nullcontext(stop) as stopped:
        result = run(
            plan,
            requests=requests,
            seed=seed,
            policies=names,
            progress=tick,
            stop=stopped,
            engine=engine,
            records=records,
            executor=executor,
            workers=workers,
            scheduler=scheduler,
        )
    written = write_results(
        result,
        folder,
        source_of(scenario),
        __version__,
        figures=figures,
        overwrite=force,
        unique=folder_given is None,
    )
    return result, written


def summaries_only_notice(plan: Plan, n: int, names: list[str], figures: bool) -> str:
    """Why a run keeps summaries only, the files it will write, and how to keep more."""
    need = estimated_bytes(plan, n, names, ALL) / 2**30
    *first, last = run_files(NONE, figures)
    return (
        f"note: {plural(n, 'request')} x {plural(len(names), 'policy', 'policies')} would need "
        f"about {need:.1f} GiB for every "
        f"call's record, so this run keeps summaries only (--records none): it writes "
        f"{', '.join(first)} and {last}, no requests/calls/timeseries tables. Pass --records "
        "requests (or all) to keep them."
    )


def folder_listing(folder: Path) -> str:
    """The files a results folder holds, as `a.csv, b.parquet, figures/x.png`."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    figures = folder / "figures"
    if figures.is_dir():
        names += [f"figures/{p.name}" for p in sorted(figures.iterdir())]
    return ", ".join(names)


def engines_line(engines: dict[str, str], notes: dict[str, str]) -> str:
    """One line: which engine ran each policy (and why not the vectorized one)."""
    parts = [
        f"{policy}={used}" + (f" ({notes[policy]})" if used == "des" and notes.get(policy) else "")
        for policy, used in engines.items()
    ]
    return "engine: " + ", ".join(parts)
