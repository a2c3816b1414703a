"""Counts in messages, pluralised: "1 step", "2 steps", "1 policy", "3 policies"."""

from __future__ import annotations


def plural(count: int | float, noun: str, many: str = "") -> str:
    """`count` and `noun`, the noun in its plural (`many`, default noun + "s") unless count is 1."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
