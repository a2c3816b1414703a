"""The `tailsim` command line as a user meets it: runs, results folders, and clean refusals.

A few tests start a real process (exit codes, no traceback, nothing left in the working folder);
the rest use click's CliRunner, which is faster. Runs are kept small (a few hundred requests).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import sim.analysis.capacity
import sim.study.policy_run
import sim.study.runner
from tests.helpers import HANG_S, ScenarioFile, assert_exit, cli, run_process, tailsim_command

POLICIES = ["wait", "cut", "race", "hedge", "downshift"]
SUMMARY_COLUMNS = [
    "policy",
    "requests",
    "hit_rate",
    "hit_rate_lo",
    "hit_rate_hi",
    "p50_s",
    "p95_s",
    "p99_s",
    "mean_s",
    "std_s",
    "cost_per_request_usd",
    "cost_per_success_usd",
    "tokens_per_request",
    "calls_per_request",
]
REQUESTS_COLUMNS = [
    "policy",
    "request_id",
    "arrival_s",
    "latency_s",
    "ok",
    "cost_usd",
    "tokens",
    "calls",
]
CALLS_COLUMNS = [
    "policy",
    "request_id",
    "step",
    "attempt",
    "provider",
    "model",
    "start_s",
    "queue_s",
    "ttft_s",
    "end_s",
    "outcome",
    "input_tokens",
    "output_tokens",
    "cost_usd",
]
OUTCOMES = {"ok", "invalid", "error", "timeout", "cancelled", "rate_limited"}
STAMP = re.compile(r"^\d{8}T\d{6}Z(-\d+)?$")

#: Malformed scenarios a user is likely to write: edits to the contract, and the key path (or,
#: for a file that cannot be parsed, the words) the error message must contain.
MALFORMED: list[Any] = [
    pytest.param(
        {"providers.direct.concurency": 512}, "providers.direct.concurency", id="unknown-key"
    ),
    pytest.param(
        {"providers.direct.serves.big.ttft_s.p99": 0.5},
        "providers.direct.serves.big.ttft_s.p99",
        id="p99-below-median",
    ),
    pytest.param(None, "file not found", id="missing-file"),
    pytest.param("name: [unclosed\n  seed: 1\n", "not valid YAML: line 2", id="not-yaml"),
    pytest.param({"workflow.steps[0].after": ["s10"]}, "workflow.steps", id="cycle"),
]


def make_malformed(edits: Any, tmp_path: Path, scenario_file: ScenarioFile) -> Path:
    """A malformed scenario under tmp_path/in/ (edits to the contract, raw text, or no file)."""
    if edits is None:
        return tmp_path / "in" / "missing.yaml"
    if isinstance(edits, str):
        path = tmp_path / "in" / "scenario.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(edits, encoding="utf-8")
        return path
    return scenario_file(edits, name="in/scenario.yaml")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder, made the current one."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


# ---------------------------------------------------------------- a real run, as a user types it


def test_run_without_a_scenario_in_an_empty_folder(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    proc = run_process("run", "--requests", "200", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    for policy in POLICIES:
        assert re.search(rf"^\W*{policy}\b", proc.stdout, re.MULTILINE), proc.stdout
    assert "hit rate" in proc.stdout

    assert [p.name for p in cwd.iterdir()] == ["results"]
    runs = list((cwd / "results" / "ten-step").iterdir())
    assert len(runs) == 1
    folder = runs[0]
    assert STAMP.match(folder.name), folder.name
    assert f"results/ten-step/{folder.name}" in proc.stdout
    assert {"summary.csv", "requests.parquet", "calls.parquet"} <= {
        p.name for p in folder.iterdir()
    }

    summary = pd.read_csv(folder / "summary.csv")
    assert set(SUMMARY_COLUMNS) <= set(summary.columns)
    assert list(summary["policy"]) == POLICIES
    assert (summary["requests"] == 200).all()
    assert (summary["hit_rate_lo"] <= summary["hit_rate"]).all()
    assert (summary["hit_rate"] <= summary["hit_rate_hi"]).all()

    requests = pd.read_parquet(folder / "requests.parquet")
    assert set(REQUESTS_COLUMNS) <= set(requests.columns)
    assert set(requests["policy"]) == set(POLICIES)
    assert (requests.groupby("policy")["request_id"].nunique() == 200).all()

    calls = pd.read_parquet(folder / "calls.parquet")
    assert set(CALLS_COLUMNS) <= set(calls.columns)
    assert set(calls["outcome"]) <= OUTCOMES
    assert set(calls["policy"]) == set(POLICIES)


@pytest.mark.parametrize(("edits", "expected"), MALFORMED)
def test_malformed_scenario_exits_2_cleanly_and_writes_nothing(
    tmp_path: Path, scenario_file: ScenarioFile, edits: Any, expected: str
) -> None:
    scenario = make_malformed(edits, tmp_path, scenario_file)
    cwd = tmp_path / "work"
    cwd.mkdir()
    proc = run_process("run", str(scenario), "--requests", "50", cwd=cwd)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert str(scenario) in proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(("edits", "expected"), MALFORMED)
def test_malformed_scenario_does_not_create_out(
    tmp_path: Path, scenario_file: ScenarioFile, workdir: Path, edits: Any, expected: str
) -> None:
    scenario = make_malformed(edits, tmp_path, scenario_file)
    out = tmp_path / "out" / "run1"
    result = cli("run", scenario, "--out", out, "--requests", "50")
    assert_exit(result, 2)
    assert expected in result.stderr
    assert not (tmp_path / "out").exists()
    assert list(workdir.iterdir()) == []


# ---------------------------------------------------------------- runs with options


@pytest.mark.usefixtures("workdir")
def test_out_writes_there(tmp_path: Path, contract_path: Path) -> None:
    out = tmp_path / "mine" / "first"
    result = cli("run", contract_path, "--out", out, "--requests", "100", "-p", "wait")
    assert_exit(result, 0)
    assert {"summary.csv", "requests.parquet", "calls.parquet"} <= {p.name for p in out.iterdir()}
    assert str(out) in result.stdout
    assert list(Path.cwd().iterdir()) == []
    assert list(pd.read_csv(out / "summary.csv")["policy"]) == ["wait"]


@pytest.mark.usefixtures("workdir")
def test_same_seed_same_bytes_other_seed_other_numbers(tmp_path: Path, contract_path: Path) -> None:
    def summary(seed: int, name: str) -> bytes:
        out = tmp_path / name
        result = cli("run", contract_path, "--out", out, "-n", "300", "--seed", str(seed), "-q")
        assert_exit(result, 0)
        assert "run: " not in result.stderr  # --quiet silences the progress (only)
        return (out / "summary.csv").read_bytes()

    first = summary(11, "a")
    assert summary(11, "b") == first
    assert summary(12, "c") != first
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "a" / "calls.parquet"),
        pd.read_parquet(tmp_path / "b" / "calls.parquet"),
    )


@pytest.mark.usefixtures("workdir")
def test_policy_option_runs_only_those(tmp_path: Path, contract_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("run", contract_path, "--out", out, "-n", "100", "--policy", "race", "-p", "wait")
    assert_exit(result, 0)
    assert sorted(pd.read_csv(out / "summary.csv")["policy"]) == ["race", "wait"]
    assert set(pd.read_parquet(out / "requests.parquet")["policy"]) == {"race", "wait"}
    assert set(pd.read_parquet(out / "calls.parquet")["policy"]) == {"race", "wait"}
    for other in ("cut", "hedge", "downshift"):
        assert other not in result.stdout


@pytest.mark.usefixtures("workdir")
def test_a_policy_named_twice_runs_once(tmp_path: Path, contract_path: Path) -> None:
    once, twice = tmp_path / "once", tmp_path / "twice"
    assert_exit(cli("run", contract_path, "--out", once, "-n", "50", "-p", "race", "-q"), 0)
    result = cli("run", contract_path, "--out", twice, "-n", "50", "-p", "race", "-p", "race")
    assert_exit(result, 0)
    assert list(pd.read_csv(twice / "summary.csv")["policy"]) == ["race"]
    pd.testing.assert_frame_equal(
        pd.read_csv(twice / "summary.csv"), pd.read_csv(once / "summary.csv")
    )
    requests = pd.read_parquet(twice / "requests.parquet")
    assert len(requests) == 50, "each request must appear once per policy"


def test_unknown_policy_exits_2_and_writes_nothing(
    tmp_path: Path, contract_path: Path, workdir: Path
) -> None:
    result = cli("run", contract_path, "-n", "50", "--policy", "race", "--policy", "rase")
    assert_exit(result, 2)
    assert "unknown policy 'rase'" in result.stderr
    assert "known: wait, cut, race, hedge, downshift" in result.stderr
    assert list(workdir.iterdir()) == []
    result = cli("run", contract_path, "-n", "50", "--policy", "rase", "--out", tmp_path / "o")
    assert_exit(result, 2)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--requests", "0"], id="zero-requests"),
        pytest.param(["--requests", "many"], id="word-requests"),
        pytest.param(["--seed", "-1"], id="negative-seed"),
        pytest.param(["--colour"], id="unknown-option"),
    ],
)
def test_bad_option_exits_2_and_writes_nothing(
    contract_path: Path, workdir: Path, args: list[str]
) -> None:
    result = cli("run", contract_path, *args)
    assert_exit(result, 2)
    assert args[0] in result.stderr
    assert list(workdir.iterdir()) == []


# ---------------------------------------------------------------- --out that must be refused


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` (relative path -> bytes)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.usefixtures("workdir")
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda p: (p.mkdir(), (p / "thesis.tex").write_text("mine")), id="folder"),
        pytest.param(lambda p: p.write_text("a file, not a folder"), id="file"),
    ],
)
def test_out_on_something_else_exits_2_and_leaves_it(
    tmp_path: Path, contract_path: Path, make: Callable[[Path], Any]
) -> None:
    target = tmp_path / "target"
    make(target)
    before = _snapshot(tmp_path)
    result = cli("run", contract_path, "-n", "50", "--out", target)
    assert_exit(result, 2)
    assert str(target) in result.stderr
    assert "choose another --out" in result.stderr
    assert _snapshot(tmp_path) == before


@pytest.mark.usefixtures("workdir")
def test_out_below_a_file_exits_2(tmp_path: Path, contract_path: Path) -> None:
    """`--out notes.txt/run` cannot be created: a clear refusal, not a traceback after the run."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine", encoding="utf-8")
    result = cli("run", contract_path, "-n", "50", "--out", blocker / "run")
    assert_exit(result, 2)
    assert str(blocker) in result.stderr
    assert blocker.read_text(encoding="utf-8") == "mine"


@pytest.mark.usefixtures("workdir")
def test_out_on_earlier_results_is_refused_then_replaced_with_force(
    tmp_path: Path, contract_path: Path
) -> None:
    out = tmp_path / "out"
    assert_exit(cli("run", contract_path, "-n", "50", "-p", "wait", "-q", "--out", out), 0)
    before = _snapshot(out)
    refused = cli("run", contract_path, "-n", "60", "-p", "cut", "-q", "--out", out)
    assert_exit(refused, 2)
    assert "--force" in refused.stderr
    assert _snapshot(out) == before
    forced = cli("run", contract_path, "-n", "60", "-p", "cut", "-q", "--out", out, "--force")
    assert_exit(forced, 0)
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["cut"]
    assert list(summary["requests"]) == [60]


@pytest.mark.slow
def test_two_runs_started_in_the_same_second_write_two_folders(
    tmp_path: Path, contract_path: Path
) -> None:
    """Two processes racing for the same default folder name: both finish, neither is lost."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    command = [*tailsim_command(), "run", str(contract_path), "-n", "300", "-p", "wait,cut"]
    command.append("--no-plot")  # the race is for the folder; a figure would only add time
    procs = [
        subprocess.Popen(
            command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=HANG_S) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    printed = [re.search(r"results: (\S+)/ ", stdout).group(1) for stdout, _ in outputs]
    assert printed[0] != printed[1]
    folders = sorted((cwd / "results" / "ten-step").iterdir())
    assert len(folders) == 2
    for folder in folders:
        assert (folder / "summary.csv").is_file()
        assert oct(folder.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every start of work (the pilot, the arrivals) record itself and stop: a test that
    must refuse before any work checks the returned list stays empty, whatever the load."""
    started: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def spy(*args: Any, **kwargs: Any) -> Any:
            started.append(what)
            raise AssertionError(f"{what} started before the refusal")

        return spy

    monkeypatch.setattr(sim.study.runner, "prepare", refuse("the pilot"))
    monkeypatch.setattr(sim.study.policy_run, "arrival_times", refuse("the arrivals"))
    return started


def test_unwritable_out_exits_2_before_any_work(
    tmp_path: Path, contract_path: Path, no_simulation: list[str]
) -> None:
    """A read-only place (even for root: /proc) is refused before anything is simulated."""
    result = cli("run", contract_path, "-n", "2000000", "--out", "/proc/tailsim-out")
    assert_exit(result, 2)
    assert no_simulation == []
    assert "/proc/tailsim-out" in result.stderr
    assert result.stdout == ""  # no table, no engine line: nothing ran
    # the same as a user meets it: a fresh process, no traceback, nothing printed but the error
    proc = run_process(
        "run", str(contract_path), "-n", "2000000", "--out", "/proc/tailsim-out", cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    assert "/proc/tailsim-out" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "note:" not in proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_exits_130_and_leaves_nothing(tmp_path: Path, contract_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    proc = subprocess.Popen(
        [
            *tailsim_command(),
            "run",
            str(contract_path),
            "-n",
            "300000",
            "-p",
            "race",
            "--engine",
            "des",
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_cpu_seconds(proc, 4.0)  # past the imports (~1.5 s), well into the simulation
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted" in stderr
    assert list(cwd.rglob("*")) in (
        [],
        [cwd / "results"],
        [cwd / "results", cwd / "results/ten-step"],
    )
    assert not [p for p in cwd.rglob("*") if p.is_file()]


def _wait_for_cpu_seconds(proc: subprocess.Popen[str], seconds: float) -> None:
    """Wait until `proc` has used `seconds` of CPU: a measure of its progress that a loaded
    machine does not stretch (HANG_S of wall time is a bound against a hang only)."""
    tick = os.sysconf("SC_CLK_TCK")
    started = time.monotonic()
    while time.monotonic() - started < HANG_S:
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before {seconds} s of CPU")
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / tick >= seconds:  # utime + stime
            return
        time.sleep(0.1)
    pytest.fail(f"process {proc.pid} did not reach {seconds} s of CPU in {HANG_S} s")


def test_a_run_too_big_for_memory_stops_at_once_with_the_estimate(
    workdir: Path, contract_path: Path, no_simulation: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Too big even for summaries only: one error saying so, exit 2, before any work; no notice
    that it would keep summaries only (it keeps nothing)."""
    monkeypatch.setattr(sim.analysis.capacity, "available_bytes", lambda: 16 * 2**30)
    result = cli("run", contract_path, "-n", "2000000000")
    assert_exit(result, 2)
    assert no_simulation == []
    assert "2000000000 requests x 5 policies" in result.stderr
    assert "even with summaries only" in result.stderr
    assert "16.0 GiB available" in result.stderr
    assert "--policy" in result.stderr
    assert "note:" not in result.stderr
    assert "keeps summaries only" not in result.stderr
    assert list(workdir.iterdir()) == []


@pytest.mark.usefixtures("workdir")
def test_policies_by_comma_and_repeated(tmp_path: Path, contract_path: Path) -> None:
    out = tmp_path / "o"
    result = cli("run", contract_path, "-n", "40", "-p", "race,wait", "-p", "cut", "--out", out)
    assert_exit(result, 0)
    assert list(pd.read_csv(out / "summary.csv")["policy"]) == ["race", "wait", "cut"]


@pytest.mark.usefixtures("workdir")
def test_run_prints_why_and_explain_prints_it_again(tmp_path: Path, contract_path: Path) -> None:
    out = tmp_path / "o"
    result = cli("run", contract_path, "-n", "200", "-p", "wait", "--out", out)
    assert_exit(result, 0)
    assert "why:" in result.stdout
    assert "customers served" in result.stdout
    assert "$/success" in result.stdout
    breakdown = pd.read_csv(out / "breakdown.csv")
    assert set(breakdown["section"]) == {"failure", "provider"}
    again = cli("explain", out)
    assert_exit(again, 0)
    assert "why:" in again.stdout
    assert "deadline at s" in again.stdout
    (out / "breakdown.csv").unlink()  # an older folder: recomputed from the tables
    recomputed = cli("explain", out)
    assert_exit(recomputed, 0)
    assert recomputed.stdout == again.stdout


def test_run_lists_actions_parquet_only_when_written(tmp_path: Path, repo_root: Path) -> None:
    """A workflow with tool steps writes actions.parquet, and the printed `results:` line says
    so; one without writes none and does not mention it."""
    tool = cli(
        "run", repo_root / "scenarios" / "tool-resend.yaml", "-n", "60", "--no-plot",
        "--out", tmp_path / "tool",
    )  # fmt: skip
    assert_exit(tool, 0)
    assert (tmp_path / "tool" / "actions.parquet").exists()
    assert "actions.parquet" in tool.stdout.split("results:")[1]
    plain = cli(
        "run", repo_root / "scenarios" / "default.yaml", "-n", "60", "-p", "wait", "--no-plot",
        "--out", tmp_path / "plain",
    )  # fmt: skip
    assert_exit(plain, 0)
    assert not (tmp_path / "plain" / "actions.parquet").exists()
    assert "actions.parquet" not in plain.stdout


def test_explain_on_a_folder_that_is_not_a_run_exits_2(tmp_path: Path) -> None:
    result = cli("explain", tmp_path)
    assert_exit(result, 2)
    assert "not a tailsim results folder" in result.stderr


def test_failed_write_leaves_no_partial_folder(
    tmp_path: Path, contract_path: Path, monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", broken)
    out = tmp_path / "results" / "run1"
    result = cli("run", contract_path, "-n", "50", "-p", "wait", "--out", out)
    assert result.exit_code != 0
    assert not out.exists()
    assert list(out.parent.iterdir()) == [], "a .partial- staging folder was left behind"
    assert list(workdir.iterdir()) == []


# ---------------------------------------------------------------- scenarios with data files


@pytest.mark.slow
def test_run_reads_data_files_relative_to_the_scenario(
    tmp_path: Path, scenario_file: ScenarioFile
) -> None:
    data = tmp_path / "scn" / "data"
    data.mkdir(parents=True)
    (data / "ttft.csv").write_text("ttft\n0.4\n0.7\n1.1\n2.5\n", encoding="utf-8")
    (data / "arrivals.csv").write_text(
        "t\n" + "\n".join(str(2 * i) for i in range(40)) + "\n", encoding="utf-8"
    )
    scenario = scenario_file(
        {
            "providers.direct.serves.big.ttft_s": {"dist": "empirical", "file": "data/ttft.csv"},
            "arrivals": {"kind": "trace", "file": "data/arrivals.csv", "column": "t"},
        },
        name="scn/scenario.yaml",
    )
    cwd = tmp_path / "work"
    cwd.mkdir()
    proc = run_process("run", str(scenario), "-n", "30", "-p", "wait", "-q", "--out", "o", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    requests = pd.read_parquet(cwd / "o" / "requests.parquet")
    assert sorted(requests["arrival_s"])[:3] == pytest.approx([0.0, 2.0, 4.0])


# ---------------------------------------------------------------- schema and check


def test_schema_prints_json(contract_data: dict[str, Any]) -> None:
    result = cli("schema")
    assert_exit(result, 0)
    schema = json.loads(result.stdout)
    assert set(contract_data) <= set(schema["properties"])


def test_check_accepts_the_contract(contract_path: Path) -> None:
    result = cli("check", contract_path)
    assert_exit(result, 0)
    assert "ok" in result.stdout
    assert "10 steps" in result.stdout
    assert "wait, cut, race, hedge, downshift" in result.stdout


@pytest.mark.parametrize(("edits", "expected"), MALFORMED)
def test_check_refuses_a_bad_file(
    tmp_path: Path, scenario_file: ScenarioFile, edits: Any, expected: str
) -> None:
    scenario = make_malformed(edits, tmp_path, scenario_file)
    result = cli("check", scenario)
    assert_exit(result, 2)
    assert str(scenario) in result.stderr
    assert expected in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("key_path", "value"),
    [
        pytest.param("policies.cut.cutoff", "[p95]", id="cutoff"),
        pytest.param("workflow.steps[1].after", ["[bold]s1"], id="step-id"),
        pytest.param("name", "[/]", id="closing-tag"),
    ],
)
def test_error_messages_show_the_users_text_verbatim(
    scenario_file: ScenarioFile, key_path: str, value: Any
) -> None:
    """Brackets in a bad value are the user's text, not console markup to interpret."""
    scenario = scenario_file({key_path: value})
    result = cli("check", scenario)
    assert_exit(result, 2)
    shown = value[0] if isinstance(value, list) else value
    assert f"'{shown}'" in result.stderr


def test_plot_redraws_the_figure_from_result_files(tmp_path: Path, contract_path: Path) -> None:
    out = tmp_path / "r"
    assert_exit(cli("run", contract_path, "--out", out, "-n", "150", "-q", "--no-plot"), 0)
    assert not (out / "figures").exists()  # --no-plot draws nothing
    result = cli("plot", out)
    assert_exit(result, 0)
    png = (out / "figures" / "policies.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert len(png) > 20_000


def test_plot_refuses_a_folder_without_results(tmp_path: Path) -> None:
    result = cli("plot", tmp_path)
    assert_exit(result, 2)
    assert "not a tailsim results folder" in result.stderr
    assert "summary.csv" in result.stderr


@pytest.mark.usefixtures("workdir")
def test_valid_hits_are_printed_where_answers_can_be_wrong(
    tmp_path: Path, repo_root: Path, contract_path: Path
) -> None:
    """Under a quality floor a delivered run is not yet a good one: the table shows valid hits
    beside the hit rate; where they cannot differ it does not clutter the table."""
    floor = cli(
        "run", repo_root / "scenarios" / "quality-floor.yaml", "-n", "200", "--out", tmp_path / "q"
    )
    assert_exit(floor, 0)
    assert "valid hits" in floor.stdout
    plain = cli("run", contract_path, "-n", "60", "-p", "wait", "--out", tmp_path / "d")
    assert_exit(plain, 0)
    assert "valid hits" not in plain.stdout
