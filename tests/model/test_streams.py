"""sim.model.streams: named random streams and the per-call draw bank (common random numbers)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.model.latency import UNIFORMS_PER_CALL, CallLatency, Constant, Exponential
from sim.model.streams import CallDrawBank, Streams


def _draws(streams: Streams, *key: str | int, n: int = 8) -> np.ndarray:
    return streams.generator(*key).random(n)


def test_same_key_same_draws() -> None:
    np.testing.assert_array_equal(
        _draws(Streams(7, "main"), "call", "s1", 0, 0),
        _draws(Streams(7, "main"), "call", "s1", 0, 0),
    )


def test_draws_do_not_depend_on_creation_order() -> None:
    forward, backward = Streams(7), Streams(7)
    a1 = _draws(forward, "a")
    b1 = _draws(forward, "b")
    b2 = _draws(backward, "b")
    a2 = _draws(backward, "a")
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(b1, b2)
    # nor on how many other streams were made in between
    busy = Streams(7)
    for k in range(50):
        busy.generator("noise", k).random(3)
    np.testing.assert_array_equal(_draws(busy, "a"), a1)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ((7, (), ("a",)), (7, (), ("b",))),
        ((7, (), ("call", "s1", 0, 0)), (7, (), ("call", "s1", 1, 0))),
        ((7, (), ("call", "s1", 0, 0)), (7, (), ("call", "s1", 0, 1))),
        ((7, (), ("call", "s1", 0, 0)), (7, (), ("call", "s2", 0, 0))),
        ((7, (), ("x",)), (8, (), ("x",))),
        ((7, ("main",), ("x",)), (7, ("pilot",), ("x",))),
        ((7, (), ("1",)), (7, (), (1,))),
    ],
)
def test_different_keys_differ(left: tuple, right: tuple) -> None:
    (s1, ns1, k1), (s2, ns2, k2) = left, right
    assert not np.array_equal(_draws(Streams(s1, *ns1), *k1), _draws(Streams(s2, *ns2), *k2))


def test_child_namespace_is_separate_and_stable() -> None:
    root = Streams(3, "main")
    child = root.child("calls")
    assert child.seed == 3
    assert child.namespace == (*root.namespace, child.namespace[-1])
    np.testing.assert_array_equal(_draws(child, "x"), _draws(Streams(3, "main", "calls"), "x"))
    assert not np.array_equal(_draws(child, "x"), _draws(root, "x"))


def test_negative_key_parts_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        Streams(1).generator("call", -1)


def test_bank_rows_do_not_depend_on_the_number_of_requests() -> None:
    small = CallDrawBank(Streams(5, "main").child("calls"), 10)
    large = CallDrawBank(Streams(5, "main").child("calls"), 1000)
    block = small.uniforms("s1", 0, 0)
    assert block.shape == (10, UNIFORMS_PER_CALL)
    np.testing.assert_array_equal(block, large.uniforms("s1", 0, 0)[:10])
    assert np.all((block >= 0) & (block < 1))


def test_bank_blocks_are_keyed_by_step_attempt_resend() -> None:
    bank = CallDrawBank(Streams(5), 20)
    first = bank.uniforms("s1", 0, 0)
    assert bank.uniforms("s1", 0, 0) is first  # drawn once, reused by every policy
    others = [bank.uniforms("s1", 1, 0), bank.uniforms("s1", 0, 1), bank.uniforms("s2", 0, 0)]
    for other in others:
        assert not np.array_equal(first, other)
    # order of first use does not matter
    fresh = CallDrawBank(Streams(5), 20)
    fresh.uniforms("s2", 0, 0)
    np.testing.assert_array_equal(fresh.uniforms("s1", 0, 0), first)


def test_bank_paths_transform_the_same_uniforms() -> None:
    bank = CallDrawBank(Streams(5), 50)
    slow = CallLatency(Exponential(2.0), Constant(10.0), 0.0, None, 0.0, 0.0)
    fast = CallLatency(Exponential(1.0), Constant(20.0), 0.0, None, 0.0, 0.0)
    a = bank.draws("s1", 0, 0, ("p1", "big"), slow, 100)
    b = bank.draws("s1", 0, 0, ("p2", "big"), fast, 100)
    # same quantile, half the scale: a perfectly paired comparison of the two paths
    np.testing.assert_allclose(a.ttft, 2.0 * np.asarray(b.ttft), rtol=1e-12)
    assert a.generation == [10.0] * 50
    assert b.generation == [5.0] * 50
    assert bank.draws("s1", 0, 0, ("p1", "big"), slow, 100) is a  # cached
