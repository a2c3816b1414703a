"""What a user reads: errors name the file (not the scenario's `name`), counts are pluralised,
and the docs point only at files the repository holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import sim
from sim.cli import main
from sim.model.errors import ScenarioError
from sim.model.words import percent, plural
from tests.helpers import REPO_ROOT, ScenarioFile


def test_plural_says_one_step_and_two_policies() -> None:
    assert plural(1, "step") == "1 step"
    assert plural(2, "step") == "2 steps"
    assert plural(0, "point") == "0 points"
    assert plural(1, "policy", "policies") == "1 policy"
    assert plural(3, "policy", "policies") == "3 policies"


def test_check_counts_one_step_in_the_singular(scenario_file: ScenarioFile) -> None:
    path = scenario_file(
        {
            "workflow.steps": [{"id": "s1", "model": "big", "input_tokens": 100}],
            "sweep": ...,
        },
        name="one-step.yaml",
    )
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "ok (1 step, policies:" in result.stdout
    assert "1 steps" not in result.stdout


def test_a_bad_sweep_key_names_the_file_not_the_scenario(scenario_file: ScenarioFile) -> None:
    grid = {"providers.direct.concurency": [24, 48]}
    path = scenario_file({"sweep.grid": grid}, name="my-sweep.yaml")
    result = CliRunner().invoke(main, ["sweep", str(path), "-n", "20", "-q", "--no-plot"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{path}:" in result.stderr
    assert "sweep.grid.providers.direct.concurency" in result.stderr
    assert "ten-step:" not in result.stderr
    # the Python API names the file too
    with pytest.raises(ScenarioError) as info:
        sim.sweep(path, requests=20)
    assert info.value.source == str(path)


def test_an_overridden_scenario_still_names_its_file(scenario_file: ScenarioFile) -> None:
    path = scenario_file(name="base.yaml")
    scenario = sim.load_scenario(path)
    overridden = sim.model.scenario.with_overrides(scenario, {"deadline_s": 60})
    assert overridden.source == str(path)
    # built from a mapping there is no file: messages fall back on the scenario's name
    assert sim.model.scenario.scenario_from_dict(scenario.model_dump()).source == scenario.name


#: What a user of a clone does not have: another repository's files and tracker numbers.
FOREIGN = re.compile(r"\.\./shared|contract/|ARCHITECTURE\.md|\b[Ii]ssues? \d")
#: Where a user reads: the README, the docs, and the comments and messages of code and scenarios.
READ = ["README.md", "docs", "sim", "experiments", "benchmarks", "scenarios"]


def _read_files() -> list[Path]:
    files = []
    for name in READ:
        root = REPO_ROOT / name
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        files += [f for f in candidates if f.suffix in {".md", ".py", ".yaml"} and f.is_file()]
    return files


def test_docs_point_at_nothing_a_user_lacks() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
        for path in _read_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FOREIGN.search(line)
    ]
    assert found == []


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for doc in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.name}: {target}")
    assert broken == []


@pytest.mark.parametrize(
    ("share", "text"),
    [
        (0.5, "50.0%"),
        (0.99993, "99.99%"),  # a rare miss is never rounded away to 100.0%
        (0.999996, "99.9996%"),
        (1.0, "100.0%"),
        (0.00004, "0.004%"),  # nor a rare hit to 0.0%
        (0.0, "0.0%"),
        (float("nan"), "n/a"),
    ],
)
def test_a_share_short_of_one_never_prints_as_100_percent(share: float, text: str) -> None:
    assert percent(share) == text
