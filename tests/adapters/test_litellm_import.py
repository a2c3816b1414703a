"""`import_litellm` (sim.adapters.litellm): configs written from LiteLLM's documentation
(tests/data/litellm/, each citing its page) become providers, models and a `router` policy;
settings are read where LiteLLM reads them, with its precedence. The command itself (`tailsim
import litellm`, check, run, refusals) is in tests/integration/test_litellm_import.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.adapters.litellm import import_litellm
from tests.helpers import REPO_ROOT

DATA = REPO_ROOT / "tests" / "data" / "litellm"
CONFIGS = sorted(p.name for p in DATA.glob("*.yaml"))


def test_at_least_three_configs_from_the_docs() -> None:
    assert len(CONFIGS) >= 3
    for name in CONFIGS:
        assert "https://docs.litellm.ai/docs/" in (DATA / name).read_text(encoding="utf-8")


def test_what_the_load_balancing_config_becomes(tmp_path: Path) -> None:
    """Three deployments of one group: three providers with their rpm as quota, one model, the
    router's settings (num_retries, timeout, simple-shuffle weights by rpm)."""
    data = yaml.safe_load((DATA / "load_balancing.yaml").read_text(encoding="utf-8"))
    imported = import_litellm(data, "lb.yaml")
    scenario = imported.scenario
    assert list(scenario["models"]) == ["gpt-3.5-turbo"]
    assert [p["rpm"] for p in scenario["providers"].values()] == [6, 6, 1440]
    router = scenario["policies"]["litellm"]
    assert router["num_retries"] == 2
    assert router["timeout_s"] == 30.0
    assert router["routing_strategy"] == "simple-shuffle"
    assert [d["rpm"] for d in router["deployments"]["gpt-3.5-turbo"]] == [6, 6, 1440]


def test_settings_in_litellm_settings_and_their_precedence() -> None:
    """num_retries, request_timeout and fallbacks read from litellm_settings; router_settings
    wins where both set a key; what is not modelled is listed, never dropped."""
    data = yaml.safe_load((DATA / "reliability.yaml").read_text(encoding="utf-8"))
    imported = import_litellm(data, "rel.yaml")
    router = imported.scenario["policies"]["litellm"]
    assert router["num_retries"] == 3
    assert router["timeout_s"] == 10.0
    assert router["fallbacks"] == {"zephyr-beta": ["gpt-3.5-turbo"]}
    assert router["allowed_fails"] == 1
    assert router["cooldown_time_s"] == 30.0
    assert router["retry_policy"] == {"RateLimitErrorRetries": 2, "TimeoutErrorRetries": 1}
    skipped = "\n".join(imported.skipped)
    for key in (
        "litellm_settings.context_window_fallbacks",
        "litellm_settings.allowed_fails",
        "router_settings.retry_policy.BadRequestErrorRetries",
        "general_settings",
    ):
        assert key in skipped, key


def test_a_group_listed_twice_under_fallbacks_keeps_its_first_list() -> None:
    """Bug: `_fallbacks` keeping the last entry of a group listed twice (`out[group] = ...`
    for `out.setdefault(group, ...)`). LiteLLM's Router looks a group's fallbacks up with
    `get_fallback_model_group`, which walks the list and stops at the first entry naming the
    group (litellm 1.110.2, router_utils/fallback_event_handlers.py: `break` on the exact
    match), so a later entry for the same group is never used; the import must say the same."""
    data = yaml.safe_load((DATA / "reliability.yaml").read_text(encoding="utf-8"))
    data["litellm_settings"]["fallbacks"] = [
        {"zephyr-beta": ["gpt-3.5-turbo"]},
        {"gpt-3.5-turbo": ["gpt-3.5-turbo-16k"]},
        {"zephyr-beta": ["gpt-3.5-turbo-16k"]},
    ]
    router = import_litellm(data, "rel.yaml").scenario["policies"]["litellm"]
    assert router["fallbacks"] == {
        "zephyr-beta": ["gpt-3.5-turbo"],
        "gpt-3.5-turbo": ["gpt-3.5-turbo-16k"],
    }
