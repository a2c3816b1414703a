"""`tailsim import litellm` end to end: every documented config imports, `tailsim check`
accepts the result and `tailsim run` runs it; the keys not imported are listed on stderr and in
the file's header; bad input exits 2 with one line naming the file and key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.model.config import RouterPolicy
from sim.model.scenario import load_scenario
from tests.helpers import REPO_ROOT, cli

DATA = REPO_ROOT / "tests" / "data" / "litellm"
CONFIGS = sorted(p.name for p in DATA.glob("*.yaml"))


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
