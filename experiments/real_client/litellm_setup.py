"""The LiteLLM side of the experiment: a Router config (two deployments on the fake server, one
per model group, `num_retries: 2`, a fallback from the primary group to the backup) and the
tailsim scenario that `tailsim import litellm` makes of that same config."""

from __future__ import annotations

from typing import Any

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


def scenario(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], str]:
    """The imported scenario (needs `tailsim import litellm`)."""
    raise RuntimeError("tailsim import litellm is not available on this branch yet")
