"""The public surface of producers is exactly its __all__ (httpx's test_exported_members)."""

from __future__ import annotations

from types import ModuleType

import producers


def test_all_is_the_public_surface() -> None:
    """Every public name is in __all__ and every __all__ name exists; the rooms (sdk, http, cli), which Python
    sets on the package once imported, are subpackages, not names of the surface. The names are imported when first
    asked for (PEP 562): ``dir`` lists them, and each resolves."""
    public = sorted(
        name
        for name in dir(producers)
        if not name.startswith("_") and not isinstance(getattr(producers, name), ModuleType)
    )
    assert sorted(producers.__all__) == public


def test_every_lazy_name_is_exported_and_resolves() -> None:
    """``producers`` and ``producers.sdk`` import a name when first asked for: each of their names has a home
    module, each home names only exported names, and each name resolves there."""
    import producers.sdk

    for package in (producers, producers.sdk):
        homes = vars(package)["_HOMES"]
        assert set(homes) == set(package.__all__), package.__name__
        for name in package.__all__:
            assert getattr(package, name) is getattr(__import__(homes[name], fromlist=[name]), name)
        assert set(package.__all__) <= set(dir(package))
