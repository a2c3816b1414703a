"""Scenario dicts with deadline edits, for tests/unit/test_deadlines.py."""

from __future__ import annotations

from typing import Any

from helpers import scenario_dict, step


def scenario_dict_with(edit: dict[str, Any]) -> dict[str, Any]:
    """A one-step, one-policy ('p': wait) scenario dict with `edit` merged into the workflow,
    its first step or the policy."""
    data = scenario_dict([step("s1")], {"p": {"kind": "wait"}})
    data["workflow"] |= edit.get("workflow", {})
    data["workflow"]["steps"][0] |= edit.get("step", {})
    data["policies"]["p"] |= edit.get("policy", {})
    return data
