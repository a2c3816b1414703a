"""`tailsim import litellm` fills each model group's price from LiteLLM's own price map (a copy of
the two fields it needs, from LiteLLM 1.110.2) or the deployment's custom pricing, and marks a
group with none known as a placeholder, loudly: in the file's header, on stderr, and under the
table of every run of it (issue 25, item 7; every price was `{}` and runs showed $0.0000)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sim.adapters.litellm import import_litellm
from sim.adapters.litellm_prices import list_price
from sim.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "litellm"


def test_known_models_get_their_list_price_and_the_rest_a_loud_placeholder(
    tmp_path: Path,
) -> None:
    out = tmp_path / "scenario.yaml"
    result = CliRunner().invoke(
        main, ["import", "litellm", str(DATA / "reliability.yaml"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "no price known: model zephyr-beta is a $0 PLACEHOLDER" in result.output
    scenario = yaml.safe_load(out.read_text(encoding="utf-8"))
    models = scenario["models"]
    assert models["gpt-3.5-turbo"]["price_per_mtok"] == {"input": 0.5, "output": 1.5}
    assert models["gpt-3.5-turbo-16k"]["price_per_mtok"] == {"input": 3.0, "output": 4.0}
    assert "price_per_mtok" not in models["zephyr-beta"]  # huggingface/...: not in the map
    header = "\n".join(line for line in out.read_text().splitlines() if line.startswith("#"))
    assert "LIST prices" in header
    assert "LiteLLM 1.110.2's price map" in header
    assert "zephyr-beta: NO PRICE KNOWN" in header
    assert "PLACEHOLDER" in header

    run = CliRunner().invoke(
        main, ["run", str(out), "--requests", "30", "--out", str(tmp_path / "results")]
    )
    assert run.exit_code == 0, run.output
    assert "prices: PLACEHOLDER for zephyr-beta" in run.output


def test_a_fully_priced_import_and_the_bundled_scenarios_print_no_price_note(
    tmp_path: Path,
) -> None:
    out = tmp_path / "scenario.yaml"
    data = {"model_list": [{"model_name": "g", "litellm_params": {"model": "openai/gpt-4o"}}]}
    (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    imported = CliRunner().invoke(
        main, ["import", "litellm", str(tmp_path / "proxy.yaml"), "--out", str(out)]
    )
    assert imported.exit_code == 0, imported.output
    for scenario, policy in ((out, "litellm"), (ROOT / "scenarios" / "default.yaml", "wait")):
        folder = tmp_path / scenario.stem
        args = ["run", str(scenario), "-n", "20", "-p", policy, "--out", str(folder)]
        run = CliRunner().invoke(main, args)
        assert run.exit_code == 0, run.output
        assert "prices:" not in run.output


def _entry(model: str, **params: Any) -> dict[str, Any]:
    return {"model_name": "g", "litellm_params": {"model": model, **params}}


def test_custom_pricing_then_base_model_then_the_model_string() -> None:
    custom = _entry("azure/my-deployment", input_cost_per_token=2e-06, output_cost_per_token=8e-06)
    based = {**_entry("azure/my-deployment"), "model_info": {"base_model": "azure/gpt-4o"}}
    plain = _entry("openai/gpt-4o-mini")  # the provider prefix dropped: 'gpt-4o-mini'
    for entry, price in ((custom, (2.0, 8.0)), (based, (2.5, 10.0)), (plain, (0.15, 0.6))):
        scenario = import_litellm({"model_list": [entry]}, "p.yaml").scenario
        spec = scenario["models"]["g"]["price_per_mtok"]
        assert (spec["input"], spec["output"]) == price


def test_a_group_whose_deployments_differ_takes_the_highest_and_says_so() -> None:
    data = {"model_list": [_entry("gpt-4o-mini"), _entry("gpt-4o"), _entry("azure/unknown")]}
    imported = import_litellm(data, "p.yaml")
    assert imported.scenario["models"]["g"]["price_per_mtok"] == {"input": 2.5, "output": 10.0}
    (line,) = imported.prices
    assert "the highest of each" in line
    assert "no price known for deployment g-3" in line


def test_a_bad_custom_price_exits_2_naming_its_key(tmp_path: Path) -> None:
    data = {"model_list": [_entry("gpt-4o", input_cost_per_token="cheap")]}
    (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    result = CliRunner().invoke(main, ["import", "litellm", str(tmp_path / "proxy.yaml")])
    assert result.exit_code == 2
    assert "model_list[0].litellm_params.input_cost_per_token: must be a number" in result.output


def test_prices_read_exactly_per_million() -> None:
    price = list_price("gpt-3.5-turbo")
    assert price is not None
    assert (price.input, price.output) == (0.5, 1.5)  # 5e-07 x 1e6 is 0.5, not 0.49999...
    assert list_price("huggingface/HuggingFaceH4/zephyr-7b-beta") is None


def test_the_bundled_prices_are_litellms() -> None:
    """sim/adapters/litellm_prices.json is exactly the subset of the installed LiteLLM 1.110.2's
    price map that tests/adapters/litellm_reference.py keeps, with its source and licence."""
    pytest.importorskip("litellm")
    from tests.adapters.litellm_reference import price_subset  # noqa: PLC0415

    bundled = json.loads((ROOT / "sim/adapters/litellm_prices.json").read_text("utf-8"))
    assert bundled == price_subset()
    assert "MIT" in bundled["_source"]["license"]
    licence = (ROOT / "sim/adapters/LICENSE-litellm.txt").read_text(encoding="utf-8")
    assert "Copyright (c) 2023 Berri AI" in licence
