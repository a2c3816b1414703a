"""A likely typo in a LiteLLM config is an error with a did-you-mean, as an unknown scenario key
is: `litellm_params.tmp` beside `model` used to be listed as "not modelled" and the deployment
quietly got no quota (issue 25, item 6). A key of LiteLLM's own that merely looks like one the
import reads (`tpd`, tokens per day, beside `tpm`) is no typo: it is listed, not refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sim.adapters.litellm import import_litellm
from sim.adapters.litellm_keys import LITELLM_NEIGHBOURS, READS
from sim.cli import main
from sim.model.errors import ScenarioError


def _config(params: dict[str, Any], **top: Any) -> dict[str, Any]:
    entry = {"model_name": "gpt-4o", "litellm_params": {"model": "openai/gpt-4o", **params}}
    return {"model_list": [entry], **top}


def test_a_typo_of_tpm_exits_2_naming_the_key_and_what_was_meant(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(yaml.safe_dump(_config({"tmp": 100_000})), encoding="utf-8")
    out = tmp_path / "scenario.yaml"
    result = CliRunner().invoke(main, ["import", "litellm", str(config), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert str(config) in result.output
    assert "model_list[0].litellm_params.tmp: unknown key (did you mean 'tpm'?" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()  # nothing half-written


@pytest.mark.parametrize(
    ("data", "path", "meant"),
    [
        (_config({"wieght": 2}), "model_list[0].litellm_params.wieght", "weight"),
        (_config({"max_retires": 2}), "model_list[0].litellm_params.max_retires", "max_retries"),
        (
            {"model_list": [{"model_name": "g", "litellm_params": {"model": "x"}, "rmp": 5}]},
            "model_list[0].rmp",
            "rpm",
        ),
        (
            _config({}, router_settings={"num_retires": 3}),
            "router_settings.num_retires",
            "num_retries",
        ),
        (
            _config({}, router_settings={"retry_policy": {"RateLimitErorRetries": 2}}),
            "router_settings.retry_policy.RateLimitErorRetries",
            "RateLimitErrorRetries",
        ),
        (
            _config({}, litellm_settings={"request_timeot": 5}),
            "litellm_settings.request_timeot",
            "request_timeout",
        ),
        (_config({}, router_setings={"num_retries": 3}), "router_setings", "router_settings"),
    ],
)
def test_typos_anywhere_the_import_reads(data: dict[str, Any], path: str, meant: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        import_litellm(data, "proxy.yaml")
    assert f"{path}: unknown key (did you mean '{meant}'?" in str(caught.value)


def test_litellms_own_look_alike_keys_are_listed_not_refused() -> None:
    data = _config(
        {"tpd": 1_000_000, "rpd": 10_000, "stream_timeout": 5, "temperature": 0.2},
        general_settings={"master_key": "sk-1"},
        router_settings={"model_group_retry_policy": {}},
    )
    imported = import_litellm(data, "proxy.yaml")
    skipped = "\n".join(imported.skipped)
    for key in ("litellm_params.tpd", "litellm_params.rpd", "litellm_params.stream_timeout",
                "litellm_params.temperature", "general_settings",
                "router_settings.model_group_retry_policy"):  # fmt: skip
        assert key in skipped


def test_the_look_alikes_are_litellms_own_keys() -> None:
    """LITELLM_NEIGHBOURS is what the installed LiteLLM 1.110.2 has (a stale list would refuse
    a real key, or let a typo through as one)."""
    pytest.importorskip("litellm")
    from tests.adapters.litellm_reference import neighbours  # noqa: PLC0415 - imports litellm

    assert neighbours(READS) == LITELLM_NEIGHBOURS
