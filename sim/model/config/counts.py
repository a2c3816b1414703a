"""The workflow keys on a step: `when`, `repeat`, `loop`, `map`, and their count laws.

A count law is a distribution over integers >= 1 (how many iterations or copies one request
runs): constant, geometric counting from 1, Poisson plus 1, or empirical. The keys' semantics
are in docs/scenario-format.md ("Workflow"); the engine's side is `sim.engine.event_flow`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from sim.model.config.base import Name, Probability, Spec
from sim.model.errors import FieldError

#: The fields each count law takes (besides `dist`).
COUNT_FIELDS = {
    "constant": ("value",),
    "geometric": ("mean",),
    "poisson": ("mean",),
    "empirical": ("values", "weights"),
}


class CountSpec(Spec):
    """A count per request, an integer >= 1: `{dist: constant, value: K}`, `{dist: geometric,
    mean: M}` (from 1, P(N=n) = (1-p)^(n-1) p with p = 1/M), `{dist: poisson, mean: M}` (1 +
    Poisson(M)), `{dist: empirical, values: [...], weights: [...]}` (weights normalised)."""

    dist: Literal["constant", "geometric", "poisson", "empirical"]
    value: Annotated[int, Field(ge=1)] | None = Field(default=None, description="constant: K")
    mean: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="geometric: mean >= 1; poisson: mean of the part above 1"
    )
    values: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, description="empirical: the counts"
    )
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        default=None, description="empirical: their weights (normalised)"
    )

    @model_validator(mode="after")
    def _fields_of_the_law(self) -> CountSpec:
        wanted = COUNT_FIELDS[self.dist]
        for key in ("value", "mean", "values", "weights"):
            given = getattr(self, key) is not None
            if key in wanted and not given:
                raise FieldError((key,), f"missing (required): dist {self.dist} needs {key}")
            if key not in wanted and given:
                allowed = ", ".join(wanted)
                raise FieldError(
                    (key,), f"dist {self.dist} does not take {key} (it takes {allowed})"
                )
        if self.dist == "geometric" and self.mean is not None and self.mean < 1:
            raise FieldError(
                ("mean",), f"a geometric count from 1 needs mean >= 1, got {self.mean:g}"
            )
        if self.dist == "empirical":
            assert self.values is not None
            assert self.weights is not None
            if not self.values:
                raise FieldError(("values",), "must hold at least one count")
            if len(self.weights) != len(self.values):
                raise FieldError(
                    ("weights",),
                    f"needs one weight per value ({len(self.values)}), got {len(self.weights)}",
                )
            if not sum(self.weights) > 0:
                raise FieldError(("weights",), "must not all be 0")
        return self

    @property
    def lowest(self) -> int:
        """The smallest count the law can give."""
        if self.dist == "constant":
            assert self.value is not None
            return self.value
        if self.dist == "empirical":
            assert self.values is not None
            assert self.weights is not None
            return min(v for v, w in zip(self.values, self.weights, strict=True) if w > 0)
        return 1


class WhenSpec(Spec):
    """The step runs only then: with `probability` (per request), or if step `step`'s answer
    (an ancestor's) is `answer`. Skipped, it is not a failure: its dependants go on."""

    probability: Probability | None = None
    step: Name | None = None
    answer: Literal["valid", "invalid"] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> WhenSpec:
        if self.probability is not None:
            for key in ("step", "answer"):
                if getattr(self, key) is not None:
                    raise FieldError(
                        (key,), "give either probability, or step and answer, not both"
                    )
            return self
        if self.step is None:
            raise FieldError(("step",), "missing: give probability, or step and answer")
        if self.answer is None:
            raise FieldError(("answer",), "missing: valid or invalid")
        return self


class RepeatSpec(Spec):
    """Asked again (a new call through the step's policy) while its answer is invalid, at most
    `max` asks in all."""

    until: Literal["valid"] = "valid"
    max: Annotated[int, Field(ge=1)] = Field(description="asks in all, >= 1")


class LoopSpec(Spec):
    """`count` iterations one after another (drawn per request), capped at `max`."""

    count: CountSpec
    max: Annotated[int, Field(ge=1)] | None = Field(default=None, description="cap on the count")


class JoinFirst(Spec):
    """Join on the first `first` answers; the other copies are cancelled."""

    first: Annotated[int, Field(ge=1)]


class MapSpec(Spec):
    """`count` parallel copies (drawn per request), joined when all (or the first K) answer."""

    count: CountSpec
    join: Literal["all"] | JoinFirst = "all"

    @model_validator(mode="after")
    def _first_within_count(self) -> MapSpec:
        if isinstance(self.join, JoinFirst) and self.join.first > self.count.lowest:
            raise FieldError(
                ("join", "first"),
                f"{self.join.first} is above the fewest copies the count can give "
                f"({self.count.lowest}): give first <= {self.count.lowest}",
            )
        return self


class GroupSpec(Spec):
    """Named steps that loop together: each of the `loop`'s iterations runs them in order."""

    steps: Annotated[list[Name], Field(min_length=1)] = Field(
        description="the group's steps, a chain in this order"
    )
    loop: LoopSpec
