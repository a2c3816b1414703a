"""Controls that react to 429 pressure: shedding at arrival on the recent 429 share of the
policy's attempts (`shed.on_429_share`), and hedging stopped to a provider whose recent 429
share is high (`stop_hedging_on_429_share`). 429s fail fast, so the step-time shed cannot see
them; these can. On a saturated bundled quota: tests/integration/test_pressure.py."""

from __future__ import annotations

from typing import Any

import pytest

from sim.model.config import RateLimitShareSpec, ShedSpec
from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from sim.policy.controls import RateLimitShare
from tests.helpers import build, scenario_dict, serving, simulate

RACE = {"kind": "race", "attempts": 2, "providers": ["p1", "p2"]}
#: Every request arrives at t = 0, 1, ..., 29, then one at t = 60.
ARRIVALS = [float(t) for t in range(30)] + [60.0]


def test_rate_limit_share_counts_429s_among_attempts_ended_in_its_window() -> None:
    share = RateLimitShare(window_s=10.0)
    for t, limited in [(0.0, True), (1.0, False), (2.0, True), (3.0, False)]:
        share.record(t, limited)
    assert share.share(3.0, min_samples=5) is None  # 4 attempts: too few to judge
    assert share.share(3.0, min_samples=4) == pytest.approx(0.5)
    assert share.share(10.5, min_samples=1) == pytest.approx(1 / 3)  # t = 0 left the window
    assert share.share(13.0, min_samples=1) is None  # every attempt (t <= 3) has left it
    assert share.limited == 0


def test_new_keys_default_to_off() -> None:
    assert ShedSpec().on_429_share is None
    assert build().policies["wait"].controls is None
    spec = RateLimitShareSpec(share=0.2)
    assert (spec.window_s, spec.min_samples) == (10.0, 5)


def _two_providers(policies: dict[str, Any]) -> Any:
    """p1 unlimited; p2 allows one request a minute (a bucket of 1 refilling 1/60 per s), so
    a race's second attempt there is a 429 the instant it is sent. Calls take 2 s."""
    tight = {"rpm": 1, "serves": {"big": serving(), "small": serving()}}
    free = {"serves": {"big": serving(), "small": serving()}}
    return build(policies=policies, providers={"p1": free, "p2": tight})


def _pattern(result: Any) -> str:
    """Per request in order: S shed, . delivered, x failed otherwise."""
    runs = result.requests.sort_values("request_id")
    return "".join(
        "S" if reason == "shed" else ("." if ok else "x")
        for reason, ok in zip(runs["fail_reason"], runs["ok"], strict=True)
    )


def test_429_share_sheds_where_the_step_time_shed_never_fires() -> None:
    """Every race's primary on p1 answers in 2 s and its extra on p2 gets a 429 at once: steps
    are fast, so the step-time shed admits everything. The 429-aware shed (window 10 s, at
    least 5 attempts): by t = 3 the window holds 429@1, ok@2 (p1), ok@2 (p2's one admitted
    call), 429@2, ok@3: 2/5 = 0.4 > 0.3, shed until t = 11, when 429@1 has left (1/5 = 0.2);
    at 12 and 13 fewer than 5 attempts are left (admitted: the shed probes again); at 14 the
    new 429s make 3/5; and so on. After a quiet minute the last request is admitted."""
    shed = {**RACE, "controls": {"shed": {"window_s": 10}}}
    on_429 = {**RACE, "controls": {"shed": {"window_s": 10, "on_429_share": 0.3}}}
    lenient = {**RACE, "controls": {"shed": {"window_s": 10, "on_429_share": 0.6}}}
    scenario = _two_providers({"shed": shed, "on_429": on_429, "lenient": lenient})
    assert _pattern(simulate(scenario, "shed", arrivals=ARRIVALS)) == "." * 31
    fired = simulate(scenario, "on_429", arrivals=ARRIVALS)
    assert _pattern(fired) == "..." + "S" * 8 + "..." + "S" * 8 + "..." + "S" * 5 + "."
    shed_ids = fired.requests.loc[fired.requests["fail_reason"] == "shed", "request_id"]
    assert not fired.calls["request_id"].isin(shed_ids).any()  # a shed run calls nothing
    # the share is 0.5 at most here (one 429 per ok): a threshold above it never sheds
    assert _pattern(simulate(scenario, "lenient", arrivals=ARRIVALS)) == "." * 31


def test_hedging_stops_to_a_provider_whose_429_share_is_high() -> None:
    """The same race under `stop_hedging_on_429_share` (share 0.3, 10 s, 5 attempts): p2's
    attempts of t = 0..4 are ok@2 and four 429s, so no extra goes to p2 from t = 5 until its
    window holds fewer than 5 attempts again (t = 11); the primaries on p1 are never held
    back, so every request is still answered."""
    quiet = {**RACE, "controls": {"stop_hedging_on_429_share": {"share": 0.3, "window_s": 10}}}
    scenario = _two_providers({"quiet": quiet, "blind": RACE})
    blind = simulate(scenario, "blind", arrivals=ARRIVALS)
    polite = simulate(scenario, "quiet", arrivals=ARRIVALS)
    assert (blind.calls["provider"] == "p2").sum() == 31
    to_p2 = polite.calls.loc[polite.calls["provider"] == "p2", "request_id"].tolist()
    assert to_p2 == [0, 1, 2, 3, 4, 11, 12, 13, 14, 15, 21, 22, 23, 24, 25, 30]
    assert polite.requests["ok"].all()
    assert (polite.calls["provider"] == "p1").sum() == 31


@pytest.mark.parametrize(
    ("controls", "where", "fragment"),
    [
        ({"shed": {"on_429_share": 1.0}}, "controls.shed.on_429_share", "less than 1"),
        ({"shed": {"on_429_share": "high"}}, "controls.shed.on_429_share", "number"),
        ({"stop_hedging_on_429_share": {}}, "controls.stop_hedging_on_429_share.share", "missing"),
        (
            {"stop_hedging_on_429_share": {"share": 0.2, "window": 5}},
            "controls.stop_hedging_on_429_share.window",
            "window_s",
        ),
    ],
)
def test_bad_429_keys_name_their_key_path(
    controls: dict[str, Any], where: str, fragment: str
) -> None:
    data = scenario_dict(policies={"r": {"kind": "race", "controls": controls}})
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    rendered = caught.value.render()
    assert f"policies.r.{where}" in rendered, rendered
    assert fragment in rendered, rendered
