"""The public surface of producers is exactly its __all__ (httpx's test_exported_members)."""

from __future__ import annotations

import producers


def test_all_is_the_public_surface() -> None:
    """Every public name is in __all__ and every __all__ name exists."""
    public = sorted(name for name in vars(producers) if not name.startswith("_"))
    assert sorted(producers.__all__) == public
