"""A step's `max_tokens` below its answer length is refused at validation (issue 25, item 3):
at least `output_tokens`, or a drawn length's median (`sim/model/config/workflow.py`)."""

from __future__ import annotations

import pytest

from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from tests.helpers import scenario_dict, step


def problems_of(**extra: object) -> list[tuple[str, str]]:
    """The problems of a one-step scenario whose step takes `extra` (empty if it is valid)."""
    try:
        scenario_from_dict(scenario_dict([step("s1", **extra)]))
    except ScenarioError as exc:
        return list(exc.problems)
    return []


def test_a_cap_below_a_fixed_length_is_refused_at_its_key_path() -> None:
    """max_tokens 10 under output_tokens 60: one problem, at the step's max_tokens, saying
    what is allowed."""
    problems = problems_of(output_tokens=60, max_tokens=10)
    assert len(problems) == 1, problems
    path, message = problems[0]
    assert path == "workflow.steps[0].max_tokens"
    assert "below output_tokens (60)" in message
    assert "max_tokens >= 60" in message


def test_a_cap_below_a_drawn_lengths_median_is_refused() -> None:
    """A drawn length {median 150, p99 300} with max_tokens 100 would cut most answers."""
    problems = problems_of(output_tokens={"median": 150, "p99": 300}, max_tokens=100)
    assert [p for p, _ in problems] == ["workflow.steps[0].max_tokens"]
    assert "median" in problems[0][1]
    assert "max_tokens >= 150" in problems[0][1]


@pytest.mark.parametrize(
    "extra",
    [
        {"output_tokens": 60, "max_tokens": 60},  # equal: nothing cut
        {"output_tokens": 60, "max_tokens": 61},
        {"output_tokens": {"median": 150, "p99": 300}, "max_tokens": 150},  # the median itself
        {"output_tokens": {"median": 150, "p99": 300}, "max_tokens": 200},  # cuts the tail only
        {"output_tokens": 60},  # no cap
    ],
)
def test_a_cap_at_or_above_the_length_is_accepted(extra: dict[str, object]) -> None:
    assert problems_of(**extra) == []


def test_the_later_step_is_named_by_its_own_index() -> None:
    """The key path names the step that is wrong, not the first one."""
    data = scenario_dict([step("s1"), step("s2", "s1", output_tokens=60, max_tokens=59)])
    with pytest.raises(ScenarioError) as raised:
        scenario_from_dict(data)
    assert [p for p, _ in raised.value.problems] == ["workflow.steps[1].max_tokens"]
