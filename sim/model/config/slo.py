"""The scenario's service-level objective: `slo: {target: 0.9999}`, the share of requests a team
promises to answer within the deadline. It changes no number of a run; it asks the outputs
(`run`, `sweep`, `report`, `explain`) to show that share as nines with its interval and whether
the promise is met, and `tune` to search against it (`sim.analysis.slo` does the reading)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sim.model.config.base import Spec
from sim.model.errors import FieldError


class SloSpec(Spec):
    """A promised success probability: `target` in (0, 1) of requests meet `metric`."""

    target: float = Field(
        description="promised share of requests that succeed, strictly between 0 and 1 "
        "(0.999: three nines, 0.9999: four)"
    )
    metric: Literal["valid_hit_rate", "hit_rate"] = Field(
        default="valid_hit_rate",
        description="what counts as a success: valid_hit_rate (answered within the deadline, "
        "valid and at or above the quality floor; the same as hit_rate without validators or a "
        "floor) or hit_rate (answered within the deadline, junk included)",
    )

    @model_validator(mode="before")
    @classmethod
    def _a_bare_number_is_the_target(cls, data: Any) -> Any:
        """`slo: 0.9999` is short for `slo: {target: 0.9999}`."""
        return {"target": data} if isinstance(data, int | float | str) else data

    @field_validator("target", mode="before")
    @classmethod
    def _a_share_below_one(cls, value: Any) -> Any:
        """A clear message for what is not a share strictly between 0 and 1 (a percentage,
        1, 0, a string)."""
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not 0 < value < 1:
            hint = f" (did you mean {value / 100:g}?)" if number and 1 < value < 100 else ""
            raise FieldError(
                (),
                f"must be a share strictly between 0 and 1, e.g. 0.9999 for four nines, got "
                f"{value!r}{hint}",
            )
        return float(value)
