"""Thresholds measured by the pilot: 'pNN', a multiple of one ('1.5 x p95'), and admission's
expected attempt time per step.

A threshold is seconds, 'pNN' (the NNth percentile of the step's pilot latency) or 'K x pNN'
(K times it; also written 'KxpNN' or 'K*pNN', kept as 'KxpNN'). `admission.expected` may also
be a mapping of step id -> threshold (with `default` for the steps not listed). Parsing lives
here so `sim.model.config` stays a schema; resolving a threshold against a pilot sample is
`seconds_of`. No I/O and no import of `sim.model.config` (it imports this module).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from sim.model.errors import FieldError

#: 'pNN' with 0 < NN < 100 (decimals allowed: p99.9).
_PERCENTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")
#: 'K x pNN' with K a positive number: 1.5 x p95, 1.5xp95, 1.5*p95.
_MULTIPLE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*[xX*]\s*(\S+)$")
_FORMS = (
    "seconds (> 0), a percentile like 'p95' ('pNN' with 0 < NN < 100), or a multiple of one "
    "like '1.5 x p95'"
)
#: The key of `admission.expected`'s mapping for the steps it does not list.
DEFAULT_KEY = "default"
#: What a step not in the mapping (and without `default`) expects: AdmissionSpec's default.
DEFAULT_EXPECTED = "p50"


def parse_threshold(value: Any) -> float | str:
    """Seconds (> 0, a float), 'pNN' or 'K x pNN' (normalised to 'KxpNN'); a ValueError saying
    what is allowed otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected {_FORMS}, got {value!r}")
    if isinstance(value, int | float):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"seconds must be a finite number > 0, got {value!r}")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        percentile = _percentile(text)
        if percentile is not None:
            return percentile
        match = _MULTIPLE.match(text)
        if match is not None:
            factor, percentile = float(match.group(1)), _percentile(match.group(2))
            if percentile is not None and factor > 0 and math.isfinite(factor):
                return f"{factor!r}x{percentile}"
    raise ValueError(f"expected {_FORMS}, got {value!r}")


def _percentile(text: str) -> str | None:
    """'pNN' normalised, or None when `text` is not a percentile with 0 < NN < 100."""
    match = _PERCENTILE.match(text)
    if match and 0 < float(match.group(1)) < 100:
        return f"p{match.group(1)}"
    return None


def percentile_of(threshold: float | str) -> float | None:
    """The NN of a 'pNN' or 'KxpNN' threshold, or None when it is already in seconds."""
    if not isinstance(threshold, str):
        return None
    return float(threshold.rpartition("p")[2])


def multiple_of(threshold: float | str) -> float:
    """The K of a 'KxpNN' threshold (1 for 'pNN' and for seconds)."""
    if isinstance(threshold, str) and "x" in threshold:
        return float(threshold.partition("x")[0])
    return 1.0


def seconds_of(threshold: float | str, sample: np.ndarray) -> float:
    """A threshold in seconds: as given, or K times the NNth percentile of `sample`."""
    pct = percentile_of(threshold)
    if pct is None:
        return float(threshold)
    return multiple_of(threshold) * float(np.percentile(sample, pct))


def parse_expected(value: Any) -> float | str | dict[str, float | str]:
    """`admission.expected`: one threshold for every step, or a mapping step id -> threshold
    (`default` for the rest); each value parsed as a threshold, problems at their key."""
    if not isinstance(value, dict):
        return parse_threshold(value)
    if not value:
        raise ValueError(
            f"expected {_FORMS}, or a mapping of step id (or '{DEFAULT_KEY}') to one; "
            "got an empty mapping"
        )
    parsed: dict[str, float | str] = {}
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for key, one in value.items():
        if not isinstance(key, str):
            problems.append(((str(key),), f"a step id or '{DEFAULT_KEY}', got {key!r}"))
            continue
        try:
            parsed[key] = parse_threshold(one)
        except ValueError as exc:
            problems.append(((key,), str(exc)))
    if problems:
        raise FieldError(*problems[0], *problems[1:])
    return parsed


def expected_of(expected: float | str | dict[str, float | str], step: str) -> float | str:
    """The expected attempt time `step` is admitted by (its entry, else `default`, else p50)."""
    if not isinstance(expected, dict):
        return expected
    return expected.get(step, expected.get(DEFAULT_KEY, DEFAULT_EXPECTED))


def expected_step_problems(
    policies: dict[str, Any], ids: list[str]
) -> list[tuple[tuple[str | int, ...], str]]:
    """Keys of an `admission.expected` mapping that are neither a step id nor `default`."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for name, spec in policies.items():
        admission = getattr(spec, "admission", None)
        expected = getattr(admission, "expected", None)
        if not isinstance(expected, dict):
            continue
        for key in expected:
            if key != DEFAULT_KEY and key not in ids:
                known = ", ".join([*ids, DEFAULT_KEY])
                where = ("policies", name, "admission", "expected", key)
                problems.append((where, f"unknown step '{key}' (known: {known})"))
    return problems
