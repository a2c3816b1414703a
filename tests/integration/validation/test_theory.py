"""The simulator held to closed-form theory: the checks of `tailsim validate`, at its default size
and seed, one test per check.

Each statistical check accepts theory +- Z_TOLERANCE (4) standard errors, the standard error
derived from the sample (binomial for rates, sqrt(q(1-q)/n)/f(x_q) for quantiles, batch means for
queue waits and occupancy); exact invariants accept floating-point rounding only. A failure
message states the theory, the simulated value and the accepted interval of every failing row.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sim.study.validation import CHECKS, DEFAULT_SEED, DEFAULT_SIZE, Z_TOLERANCE, CheckResult


def _id(check: Callable[[int, int], list[CheckResult]]) -> str:
    """Test id of a check: its function name without the prefix."""
    return check.__name__.removeprefix("check_")


@pytest.mark.parametrize("check", CHECKS, ids=_id)
def test_simulator_matches_theory(check: Callable[[int, int], list[CheckResult]]) -> None:
    """Every row of the check lies in its acceptance interval at the default size and seed."""
    results = check(DEFAULT_SIZE, DEFAULT_SEED)
    assert results, f"{_id(check)} produced no result"
    failed = [r for r in results if not r.passed]
    assert not failed, (
        f"{len(failed)} of {len(results)} rows outside theory +- {Z_TOLERANCE:g} SE:\n"
        + "\n".join(r.describe() for r in failed)
    )
    for r in results:  # the verdict is the interval's, and the interval surrounds the theory
        assert r.lo <= r.theory <= r.hi, r.describe()
        assert r.passed == (r.lo <= r.simulated <= r.hi), r.describe()
