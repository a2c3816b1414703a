"""Hypothesis profiles of the engine property tests: "ci" (default, reproducible) and "dev".

The profile is HYPOTHESIS_PROFILE if set, else "ci": every default run explores the same
examples. `HYPOTHESIS_PROFILE=dev pytest tests/property` explores new ones each time.
Both have no per-example deadline (an example is a whole simulation). "ci" is derandomized and
keeps no example database, so a CI run explores the same examples every time; "dev" explores
new ones on every run and remembers failures in .hypothesis/.

The profiles are registered here but not loaded globally (hypothesis settings are global: loading
one would also change how many examples the unit tests of sim.analysis.analytic run); the engine
tests
pick theirs with `settings.get_profile(...)` and apply it test by test.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,
    "suppress_health_check": (HealthCheck.too_slow, HealthCheck.data_too_large),
}

settings.register_profile("dev", max_examples=40, print_blob=True, **_COMMON)
settings.register_profile(
    "ci", max_examples=120, derandomize=True, database=None, print_blob=True, **_COMMON
)
