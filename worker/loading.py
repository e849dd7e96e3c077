"""Resolving the configured handler bundles (``AGENT_SIGNAL_POLICIES``) into Policy objects, once, at boot.

A setting has to name code across process boundaries, so it holds ``module:factory`` strings; they are
imported and called here, once per process, and from then on the registry holds objects.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from worker.registry import Policy

__all__ = ["PolicyLoadError", "load_policies"]


class PolicyLoadError(ValueError):
    """A configured policy factory cannot be imported or does not return policies."""


def load_policies(specs: Sequence[str]) -> list[Policy]:
    """Import each ``module:attr`` factory, call it, and concatenate the policies in setting order."""
    policies: list[Policy] = []
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise PolicyLoadError(
                f"AGENT_SIGNAL_POLICIES entry {spec!r} must look like 'package.module:factory'"
            )
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise PolicyLoadError(f"AGENT_SIGNAL_POLICIES entry {spec!r}: {exc}") from exc
        produced = factory()
        if not isinstance(produced, list) or not all(isinstance(p, Policy) for p in produced):
            raise PolicyLoadError(f"AGENT_SIGNAL_POLICIES entry {spec!r} must return a list of Policy")
        policies.extend(produced)
    return policies
