"""Options the command line would silently ignore exit 2 naming them; `-q` silences only the
progress; tables are plain columns (no box characters) when the output is not a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import assert_exit, cli

BOX = set("│┃━─┏┓┗┛┡┩└┘├┤┬┴┼╇╈")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "-e", "inline", "-w", "2"], "--workers: has no effect with executor inline"),
        (["sweep", "-e", "inline", "-w", "2"], "--workers: has no effect with executor inline"),
        (["run", "--force"], "--force: replaces what the results folder (out) holds"),
        (["run", "-e", "processes", "--scheduler", "tcp://x:1"], "--scheduler: needs"),
    ],
)
def test_an_option_that_would_be_ignored_exits_2_naming_it(
    args: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a default results folder would land here
    result = cli(*args, "-n", "5")
    assert_exit(result, 2)
    assert said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # refused before any work


def test_quiet_silences_the_progress_not_the_table(contract_path: Path, tmp_path: Path) -> None:
    args = ["run", contract_path, "-n", "200", "-p", "wait", "--no-plot", "--out"]
    loud, quiet = cli(*args, tmp_path / "r"), cli(*args, tmp_path / "q", "-q")
    assert_exit(loud, 0)
    assert_exit(quiet, 0)
    assert "run: wait" in loud.stderr  # the progress lines, without -q
    assert "run: wait" not in quiet.stderr
    assert "hit rate per run [95% CI]" in quiet.stdout  # the table, even with -q
    assert quiet.stdout.replace(str(tmp_path / "q"), "") == loud.stdout.replace(
        str(tmp_path / "r"), ""
    )


def test_tables_have_no_box_characters_when_the_output_is_not_a_terminal(
    contract_path: Path, tmp_path: Path
) -> None:
    result = cli("run", contract_path, "--out", tmp_path, "-n", "100", "-p", "wait,race", "-q")
    assert_exit(result, 0)
    assert "wait" in result.stdout
    assert BOX.isdisjoint(result.stdout), result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("policy"))
    assert "hit rate per run [95% CI]" in header  # the columns, on one plain line
    title = "deadline 90 s, seed 7: a run that failed (early or late) counts at the deadline"
    assert title in result.stdout  # the title whole on its line, not wrapped to the columns
