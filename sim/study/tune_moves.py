"""Which models `tailsim tune` may move a step to: a fall-down only to a faster model, a fall-up
only to a stronger one, so that each move is what its name says (a "fall up" from `big`,
quality 1.0, to `mid`, 0.9, was written before this rule)."""

from __future__ import annotations

import math
from typing import Any

from sim.plan import Plan


def stronger(quality: dict[str, float], model: str, than: str | None) -> bool:
    """Whether `model` is a fall-up from `than`: of higher quality."""
    return than is not None and quality[model] > quality[than]


def median_call_s(plan: Plan, model: str, step: Any) -> float:
    """How long `step`'s call takes on `model`: its median first token (with prefill) plus the
    step's answer at the median speed, on the fastest provider serving it (inf: none)."""
    laws = plan.latencies
    times = [
        law.ttft.median
        + law.ttft_s_per_ktok * step.input_tokens / 1000
        + step.output_tokens / law.tokens_per_s.median
        for (_provider, name), law in laws.items()
        if name == model
    ]
    return min(times, default=math.inf)
