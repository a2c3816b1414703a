"""Hard requests (sim.model.hardness, `hardness`, `models.M.when_hard`): the keys' validation, the
docs' example, and a hard answer's length. `hard_scenario` builds the one-step scenario the
whole-run closed forms of tests/integration/test_hardness.py use."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sim.model.errors import ScenarioError
from sim.model.hardness import hard_tokens
from sim.model.scenario import scenario_from_dict
from tests.helpers import (
    REPO_ROOT,
    SMALL_IN,
    SMALL_OUT,
    ScriptedBank,
    scenario_dict,
    serving,
    simulate,
    step,
)

H, P_EASY, P_HARD, Q_EASY, Q_HARD = 0.1, 0.05, 0.6, 0.02, 0.1


def hard_scenario(
    policies: dict[str, Any],
    small: dict[str, Any] | None = None,
    big: dict[str, Any] | None = None,
    share: float = H,
    steps: list[dict[str, Any]] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """One step on `small` (junk P_EASY, P_HARD when hard), `big` as the stronger model (junk
    Q_EASY, Q_HARD when hard); constant latencies (a call: 1 s + 100 tokens at 100 tok/s)."""
    data = scenario_dict(steps or [step("s1", model="small")], policies, **overrides)
    data["providers"] = {
        "p1": {
            "serves": {
                "small": serving(invalid_rate=P_EASY),
                "big": serving(invalid_rate=Q_EASY),
            }
        }
    }
    data["hardness"] = {"share": share}
    data["models"]["small"]["when_hard"] = {"invalid_rate": P_HARD} if small is None else small
    data["models"]["big"]["when_hard"] = {"invalid_rate": Q_HARD} if big is None else big
    return data


# ---------------------------------------------------------------- bad input


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    return info.value.problems


def test_when_hard_without_hardness_is_an_error() -> None:
    data = hard_scenario({"wait": {"kind": "wait"}})
    del data["hardness"]
    problems = dict(_problems(data))
    assert "no request is hard" in problems["models.small.when_hard"]
    assert "hardness: {share" in problems["models.big.when_hard"]


@pytest.mark.parametrize(
    ("edit", "key_path", "fragment"),
    [
        ({"hardness": {"share": 1.5}}, "hardness.share", "less than or equal to 1"),
        ({"hardness": {}}, "hardness.share", "missing"),
        ({"hardness": {"shares": 0.1}}, "hardness.shares", "did you mean 'share'"),
        ({"when_hard": {"length": 0}}, "models.small.when_hard.length", "greater than 0"),
        ({"when_hard": {"invalid_rat": 0.1}}, "models.small.when_hard.invalid_rat", "invalid_rate"),
        ({"when_hard": {"invalid_rate": 0.995}}, "models.small.when_hard.invalid_rate", "< 1"),
    ],
)
def test_bad_hardness_keys_name_the_key_path(
    edit: dict[str, Any], key_path: str, fragment: str
) -> None:
    data = hard_scenario({"wait": {"kind": "wait"}})
    data["providers"]["p1"]["serves"]["small"]["error_rate"] = 0.01
    if "hardness" in edit:
        data["hardness"] = edit["hardness"]
    else:
        data["models"]["small"]["when_hard"] = edit["when_hard"]
    problems = _problems(data)
    messages = [m for path, m in problems if path == key_path]
    assert messages, problems
    assert fragment in messages[0], messages[0]


# ---------------------------------------------------------------- documented


def test_the_keys_are_documented_and_the_docs_example_loads() -> None:
    """scenario-format.md documents every hardness key, and its example block, put into a
    scenario as written, loads with one request in ten hard."""
    text = (REPO_ROOT / "docs" / "scenario-format.md").read_text()
    section = text[text.index("## Hard requests") : text.index("## Arrivals")]
    for key in ("hardness.share", "models.M.when_hard.invalid_rate", "models.M.when_hard.length"):
        assert f"`{key}`" in section, key
    example = yaml.safe_load(section.split("```yaml")[1].split("```")[0])
    data = scenario_dict([step("s1", model="small")], {"wait": {"kind": "wait"}})
    data["hardness"] = example["hardness"]
    data["models"] = example["models"]
    scenario = scenario_from_dict(data)
    assert scenario.hardness is not None
    assert scenario.hardness.share == 0.1
    when = scenario.models["small"].when_hard
    assert when is not None
    assert (when.invalid_rate, when.length) == (0.5, 2.5)


# ---------------------------------------------------------------- a hard answer's length

#: (the easy length, `when_hard.length`, the hard length worked out by hand: the product to the
#: nearest whole token, at least 1). The products sit away from .5, so floor and round differ
#: wherever the fraction is .5 or more: 125.7, 8.7 and 333.6 tell them apart; 2.1 (both give
#: 2) and 0.4 (the floor of 1) are controls.
HARD_LENGTHS = [
    (100, 1.257, 126),
    (100, 1.254, 125),
    (3, 2.9, 9),
    (333.6, 1.0, 334),
    (7, 0.3, 2),
    (2, 0.2, 1),
    (400, 2.5, 1000),
]


@pytest.mark.parametrize(("tokens", "factor", "expected"), HARD_LENGTHS)
def test_a_hard_answer_is_the_length_times_the_factor_to_the_nearest_token(
    tokens: float, factor: float, expected: int
) -> None:
    """Bug: `hard_tokens` flooring (`int(tokens * factor)`) instead of rounding: 125.7 tokens
    billed as 125. Only a golden record (regenerable) caught it; these are worked by hand."""
    assert hard_tokens(tokens, factor) == expected


def test_a_hard_call_bills_the_rounded_length() -> None:
    """The engine bills what `hard_tokens` gives: every request hard (share 1), `small` 1.257
    times as long, a 100-token step: the call has 126 output tokens (125 floored) and costs
    1000 x 0.1e-6 + 126 x 0.2e-6 USD."""
    data = hard_scenario({"wait": {"kind": "wait"}}, small={"length": 1.257}, share=1.0)
    calls = simulate(scenario_from_dict(data), "wait", ScriptedBank({}, n_requests=1)).calls
    assert list(calls["output_tokens"]) == [126]
    assert list(calls["cost_usd"]) == pytest.approx([1000 * SMALL_IN + 126 * SMALL_OUT])
