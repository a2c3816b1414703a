"""What a user reads (sim.model.errors, sim.model.words): errors name the file (not the scenario's
`name`), counts are pluralised, and a share short of one never prints as 100%. The commands'
messages are in tests/integration/test_messages.py, the docs' links in
tests/project/test_docs.py."""

from __future__ import annotations

import pytest

import sim
from sim.model.words import percent, plural
from tests.helpers import ScenarioFile


def test_plural_says_one_step_and_two_policies() -> None:
    assert plural(1, "step") == "1 step"
    assert plural(2, "step") == "2 steps"
    assert plural(0, "point") == "0 points"
    assert plural(1, "policy", "policies") == "1 policy"
    assert plural(3, "policy", "policies") == "3 policies"


def test_an_overridden_scenario_still_names_its_file(scenario_file: ScenarioFile) -> None:
    path = scenario_file(name="base.yaml")
    scenario = sim.load_scenario(path)
    overridden = sim.model.scenario.with_overrides(scenario, {"deadline_s": 60})
    assert overridden.source == str(path)
    # built from a mapping there is no file: messages fall back on the scenario's name
    assert sim.model.scenario.scenario_from_dict(scenario.model_dump()).source == scenario.name


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
