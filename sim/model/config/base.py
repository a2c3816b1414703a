"""The format's shared vocabulary: the strict, frozen base of every spec and the field types the
subjects' specs are built from (positive seconds, probabilities, names, pilot thresholds).

Threshold syntax is parsed by `sim.model.thresholds`, which this module imports (never the
reverse), so every spec of the package can use `Threshold` and `ExpectedTimes` as plain types.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from sim.model.thresholds import parse_expected, parse_threshold


class Spec(BaseModel):
    """Base of every config object: unknown keys are errors, no type coercion (`true` is not
    a number), objects are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]

#: Seconds, "pNN" (the NNth percentile of a step's successful call latency in the pilot run),
#: or "KxpNN" (K times it; written "1.5 x p95", "1.5xp95" or "1.5*p95"). See sim.model.thresholds.
Threshold = Annotated[float | str, BeforeValidator(parse_threshold)]
#: `admission.expected`: one Threshold, or a mapping of step id (or `default`) -> Threshold.
ExpectedTimes = Annotated[float | str | dict[str, float | str], BeforeValidator(parse_expected)]
