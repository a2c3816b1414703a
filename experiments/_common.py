"""Shared by the experiment scripts: where results go, the article beside ours, one style."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import seaborn as sns

from sim.model.scenario import scenario_from_dict

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
#: The default serving of the bundled scenario's `big` model on its `direct` provider.
DIRECT_BIG: dict[str, Any] = {
    "ttft_s": {"median": 0.8, "p99": 4.0},
    "tokens_per_s": {"median": 60, "p99": 110},
    "stall": {"probability": 0.03, "extra_s": {"median": 30, "p99": 80}},
}


def out_dir(name: str) -> Path:
    """results/experiments/NAME/ (created)."""
    folder = Path("results") / "experiments" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def beside(rows: list[tuple[str, str, str]], title: str) -> str:
    """A printed table: what, the article's figure, ours."""
    width = max(len(what) for what, _a, _t in rows)
    lines = [title, f"{'':{width}}  article  ->  tailsim"]
    lines += [f"{what:<{width}}  {article}  ->  {ours}" for what, article, ours in rows]
    return "\n".join(lines)


def theme() -> None:
    sns.set_theme(style="whitegrid", context="notebook")


def save(fig: plt.Figure, path: Path) -> None:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"figure: {path}")


def chain(
    name: str,
    n: int,
    serving: dict[str, Any],
    policies: dict[str, Any],
    *,
    deadline_s: float = 1e6,
    output_tokens: int = 300,
    rate_per_s: float = 0.2,
    seed: int = 11,
    providers: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
):
    """A chain of n identical steps of model `m` (on provider `p` unless `providers` is given)."""
    steps = [
        {"id": f"s{i}", "model": "m", "input_tokens": 2000, "output_tokens": output_tokens}
        for i in range(1, n + 1)
    ]
    for i in range(1, n):
        steps[i]["after"] = [f"s{i}"]
    data = {
        "name": name,
        "seed": seed,
        "deadline_s": deadline_s,
        "arrivals": {"kind": "poisson", "rate_per_s": rate_per_s},
        "models": {"m": {"price_per_mtok": {"input": 2.5, "output": 10.0}}},
        "providers": providers or {"p": {"serves": {"m": serving}}},
        "workflow": {"steps": steps},
        "policies": policies,
        "pilot": {"requests": 500},
        **(extra or {}),
    }
    return scenario_from_dict(data, source=name)
