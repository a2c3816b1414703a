"""The LiteLLM side of the experiment: a Router config (two deployments on the fake server, one
per model group, `num_retries: 2`, a fallback from the primary group to the backup) and the
tailsim scenario that `tailsim import litellm` makes of that same config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from experiments.real_client import compare
from experiments.real_client import scenario as scen

#: The model group the driver asks for; it falls back to BACKUP.
GROUP = "primary"
BACKUP = "backup"


def config(ports: dict[str, int], tpm: float | None) -> dict[str, Any]:
    """A LiteLLM proxy-style config: deployment d0 serves GROUP (quota `tpm`), d1 serves BACKUP
    (a third of it); the router retries twice and falls back from GROUP to BACKUP."""
    quotas = {GROUP: tpm, BACKUP: tpm / 3 if tpm else None}
    model_list = []
    for group, dep in ((GROUP, "d0"), (BACKUP, "d1")):
        params: dict[str, Any] = {
            "model": "openai/fake",
            "api_base": f"http://127.0.0.1:{ports[dep]}/v1",
            "api_key": "fake",
        }
        if quotas[group]:
            params["tpm"] = int(quotas[group])
        model_list.append({"model_name": group, "litellm_params": params})
    return {
        "model_list": model_list,
        "router_settings": {"num_retries": 2, "fallbacks": [{GROUP: [BACKUP]}]},
    }


def scenario(
    setup: scen.Setup,
    name: str,
    trace_file: str,
    tpm: float | None,
    overhead_file: str,
    over: compare.Overhead,
    folder: Path,
) -> tuple[dict[str, Any], str]:
    """The scenario `tailsim import litellm` makes of the run's router config, completed with
    what a LiteLLM config does not hold (as its header asks): every provider's slots, service
    law and measured overhead, the workflow, deadline and the run's own arrivals. Returns it
    and the policy to run (`litellm`)."""
    path = folder / "litellm.yaml"
    path.write_text(yaml.safe_dump(config({"d0": 0, "d1": 0}, tpm), sort_keys=False))
    out = folder / "imported.yaml"
    cmd = [sys.executable, "-m", "sim.cli", "import", "litellm", str(path), "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)  # noqa: S603 (our own command)
    data = yaml.safe_load(out.read_text())
    for spec in data["providers"].values():
        spec["concurrency"] = setup.slots
        for model in spec["serves"]:
            spec["serves"][model] = setup.serving()
        if "tpm" in spec:
            spec.update({"start": "steady", "retry_after": "seconds"})
        spec["overhead_s"] = {"dist": "empirical", "file": overhead_file, "column": "overhead_s"}
        spec["overhead_held"] = round(over.held_share, 4)
    workflow = setup.workflow()
    for step in workflow["steps"]:
        step["model"] = GROUP
    data.update(
        {
            "name": name,
            "deadline_s": setup.deadline_s,
            "arrivals": {"kind": "trace", "file": trace_file, "column": "t"},
            "workflow": workflow,
        }
    )
    data.pop("requests", None)
    return data, "litellm"
