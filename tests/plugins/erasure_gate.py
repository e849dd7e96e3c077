"""A plugin whose eraser holds an erasure of a ``slow-…`` user until the test lets it go, so that "while an
erasure runs" is a steady state a test can look at (loaded by name: ``tests.plugins.erasure_gate:gate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worker.keys.layout import Keys
from worker.plugin import Plugin

__all__ = ["GATE_S", "PLUGIN", "gate", "gate_keys"]

PLUGIN = "tests.plugins.erasure_gate:gate"
GATE_S = 60  # how long the gate holds an erasure at most (the tests let it go long before)


def gate_keys(keys: Keys, user_id: str) -> tuple[str, str]:
    """(set while the erasure of ``user_id`` waits at the gate, the list that lets it go)."""
    return keys.plugin_home("gate", "waiting", user_id), keys.plugin_home("gate", "go", user_id)


def _hold_slow_users(client: Any, keys: Keys, user_id: str, scopes: frozenset[str]) -> Mapping[str, int]:
    """The gate's part of an erasure: a ``slow-…`` user's waits until the test pushes onto its list."""
    if user_id.startswith("slow-"):
        waiting, go = gate_keys(keys, user_id)
        client.set(waiting, "1")
        client.blpop([go], timeout=GATE_S)
        client.delete(waiting)
    return {}


def gate() -> Plugin:
    """The tests' plugin: only an eraser that holds a ``slow-…`` user's erasure."""
    return Plugin("erasure-gate", erase_user=_hold_slow_users)
