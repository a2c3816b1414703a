"""`tailsim import litellm`: configs written from LiteLLM's documentation (tests/data/litellm/,
each citing its page) import, `tailsim check` accepts the result and `tailsim run` runs it; the
keys not imported are listed; bad input exits 2 with one line naming the file and key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from sim.adapters.litellm import import_litellm
from sim.cli import main
from sim.model.config import RouterPolicy
from sim.model.scenario import load_scenario
from tests.helpers import REPO_ROOT

DATA = REPO_ROOT / "tests" / "data" / "litellm"
CONFIGS = sorted(p.name for p in DATA.glob("*.yaml"))


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_at_least_three_configs_from_the_docs() -> None:
    assert len(CONFIGS) >= 3
    for name in CONFIGS:
        assert "https://docs.litellm.ai/docs/" in (DATA / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", CONFIGS)
def test_imports_checks_and_runs(tmp_path: Path, name: str) -> None:
    out = tmp_path / "scenario.yaml"
    result = cli("import", "litellm", DATA / name, "--out", out)
    assert result.exit_code == 0, result.output
    check = cli("check", out)
    assert check.exit_code == 0, check.output
    run = cli("run", out, "--requests", "50", "--out", tmp_path / "results")
    assert run.exit_code == 0, run.output
    assert (tmp_path / "results" / "summary.csv").is_file()
    scenario = load_scenario(out)
    policy = scenario.policies["litellm"]
    assert isinstance(policy, RouterPolicy)
    for provider in scenario.providers.values():  # the router is the only retry loop
        assert provider.sdk.retries == 0
    text = out.read_text(encoding="utf-8")
    assert "PLACEHOLDER" in text  # latency and workflow are the user's to replace


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


def test_unsupported_keys_are_listed_on_stderr_and_in_the_header(tmp_path: Path) -> None:
    out = tmp_path / "s.yaml"
    result = cli("import", "litellm", DATA / "routing_strategies.yaml", "--out", out)
    assert result.exit_code == 0
    header = out.read_text(encoding="utf-8").split("\nname:")[0]
    for key in ("router_settings.redis_host", "router_settings.enable_pre_call_checks"):
        assert f"not imported: {key}" in result.stderr
        assert key in header


BAD: list[tuple[dict[str, Any], str]] = [
    ({"model_list": []}, "model_list: must be a non-empty list"),
    ({"model_list": [{"litellm_params": {"model": "x"}}]}, "model_list[0].model_name:"),
    (
        {"model_list": [{"model_name": "g", "litellm_params": {"model": "x", "rpm": "lots"}}]},
        "model_list[0].litellm_params.rpm: must be an integer",
    ),
    (
        {"model_list": [{"model_name": "g", "litellm_params": {"model": "x", "timeout": 0}}]},
        "model_list[0].litellm_params.timeout: must be a number > 0",
    ),
    (
        {
            "model_list": [{"model_name": "g", "litellm_params": {"model": "x"}}],
            "router_settings": {"routing_strategy": "cost-based-routing"},
        },
        "router_settings.routing_strategy: 'cost-based-routing' is not modelled",
    ),
    (
        {
            "model_list": [{"model_name": "g", "litellm_params": {"model": "x"}}],
            "router_settings": {"fallbacks": [{"g": ["nope"]}]},
        },
        "router_settings.fallbacks[0].g[0]: unknown model group 'nope'",
    ),
]


@pytest.mark.parametrize(("config", "expected"), BAD)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, config: dict[str, Any], expected: str
) -> None:
    source = tmp_path / "config.yaml"
    source.write_text(yaml.safe_dump(config), encoding="utf-8")
    out = tmp_path / "out.yaml"
    result = cli("import", "litellm", source, "--out", out)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(source) in lines[0]
    assert expected in lines[0]
    assert "Traceback" not in result.output
    assert not out.exists()  # nothing half written
