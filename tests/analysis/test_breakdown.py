"""sim.analysis.breakdown and sim.analysis.capacity on hand-made and scripted tables: the
brute-force peak, provider limits, rows of a policy without failures, and the capacity check's
refusals and advice. Whole runs (failures by reason, 429s by provider, a policy failing early)
are in tests/integration/test_breakdown.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.analysis.breakdown import ProviderLimits, breakdown, provider_limits
from sim.analysis.capacity import NONE, check_fits, estimated_bytes
from sim.analysis.metrics import peak_window_sum
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario
from sim.plan import compile_scenario


def _brute_peak(times: list[float], amounts: list[float], window: float) -> float:
    """The peak over windows (t - window, t] ending at every event, by brute force."""
    return max(
        (sum(a for s, a in zip(times, amounts, strict=True) if t - window < s <= t) for t in times),
        default=0.0,
    )


@given(
    st.lists(
        st.tuples(st.integers(0, 600), st.integers(0, 5000)), min_size=0, max_size=40
    )  # integer seconds make window edges exact
)
def test_peak_window_sum_is_the_brute_force_peak(events: list[tuple[int, int]]) -> None:
    times = [float(t) for t, _ in events]
    amounts = [float(a) for _, a in events]
    got = peak_window_sum(np.array(times), np.array(amounts), 60.0)
    assert got == pytest.approx(_brute_peak(times, amounts, 60.0))


def test_provider_limits_from_specs_and_dumped_dicts() -> None:
    scenario = load_scenario()
    from_specs = provider_limits(scenario.providers)
    from_dicts = provider_limits(scenario.model_dump()["providers"])
    assert (
        from_specs
        == from_dicts
        == {
            "direct": ProviderLimits(512, 20_000_000),
            "managed": ProviderLimits(256, 10_000_000),
        }
    )


def test_breakdown_of_a_policy_without_failures_has_provider_rows_only() -> None:
    requests = pd.DataFrame(
        {
            "policy": ["p"],
            "request_id": [0],
            "resend": [0],
            "arrival_s": [0.0],
            "latency_s": [2.0],
            "ok": [True],
            "end_s": [2.0],
            "fail_reason": [""],
            "fail_step": [""],
        }
    )
    calls = pd.DataFrame(
        {
            "policy": ["p"],
            "provider": ["a"],
            "start_s": [0.0],
            "queue_s": [0.5],
            "end_s": [2.0],
            "outcome": ["ok"],
            "quota_tokens": [100],
        }
    )
    table = breakdown(requests, calls, {"a": ProviderLimits(3, 1000)})
    assert list(table["section"]) == ["provider"]
    row = table.iloc[0]
    assert row["busy_slots_mean"] == pytest.approx(1.5 / 2.0)  # held 1.5 s of a 2 s span
    assert row["busy_share"] == pytest.approx(0.75 / 3)
    assert row["peak_tpm_share"] == pytest.approx(0.1)


def test_capacity_check_refuses_what_cannot_fit_and_names_the_way_out() -> None:
    scenario = load_scenario()
    need = estimated_bytes(compile_scenario(scenario), 1000, ["wait", "race"])
    check_fits(compile_scenario(scenario), 1000, ["wait", "race"], available=need * 2)
    with pytest.raises(ScenarioError) as info:
        check_fits(compile_scenario(scenario), 1000, ["wait", "race"], available=need // 2)
    message = str(info.value)
    assert "GiB" in message
    assert "--policy" in message
    assert estimated_bytes(compile_scenario(scenario), 1000, ["race"]) > estimated_bytes(
        compile_scenario(scenario), 1000, ["wait"]
    )


def test_summaries_only_is_advised_only_where_it_would_fit() -> None:
    scenario = load_scenario()
    none = estimated_bytes(compile_scenario(scenario), 10**9, ["wait"], NONE)
    assert estimated_bytes(compile_scenario(scenario), 10**9, ["wait"]) > none * 10
    with pytest.raises(ScenarioError) as info:
        check_fits(compile_scenario(scenario), 10**9, ["wait"], available=none * 2)
    assert "or --records none (summaries only)" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        check_fits(compile_scenario(scenario), 10**9, ["wait"], available=none // 2)
    assert "--records none" not in str(info.value)
    assert "for their records" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        check_fits(compile_scenario(scenario), 10**9, ["wait"], available=none // 2, records=NONE)
    assert "even with summaries only" in str(info.value)
