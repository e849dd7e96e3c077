"""ReloadingRouter: a version that cannot be loaded never replaces the last good router, keeps its errors in
last_error until a version loads, and is tried again (the file's stamp is kept only once a version loaded)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from policies.routing import ConfigError, ReloadingRouter
from policies.routing import loader as loader_module

GOOD = """
routing:
  decisions:
    - name: fallback
      modelRefs: [ { model: MODEL } ]
"""
OVERSIZED = """
routing:
  signals:
    conversation:
      - name: r
        feature: { type: count, source: { type: tool_definition } }
        predicate: { gte: 1%s }
  decisions:
    - name: d
      rules: { type: conversation, name: r }
""" % ("0" * 400)


def _write(path: Path, text: str, tick: int) -> None:
    """Write ``text`` with a modification time of its own (so the stamp changes whatever the clock does)."""
    path.write_text(text)
    os.utime(path, ns=(tick * 1_000_000_000, tick * 1_000_000_000))


def _model(holder: ReloadingRouter) -> Any:
    return holder.get().route({"messages": []})["model"]


def test_a_bad_version_keeps_the_last_good_router_and_its_error(tmp_path: Path) -> None:
    """An oversized predicate after a good version: the good router serves, last_error names the problem at
    every call (not only the first), and the next good version loads."""
    path = tmp_path / "router.yaml"
    _write(path, GOOD.replace("MODEL", "one"), 1)
    holder = ReloadingRouter(path, check_every_s=0)
    assert _model(holder) == "one" and holder.version == 1
    _write(path, OVERSIZED, 2)
    for _ in range(2):
        assert _model(holder) == "one"
        assert holder.last_error == ['conversation rule [0] "r": predicate values must be finite']
        assert holder.version == 1
    _write(path, GOOD.replace("MODEL", "two"), 3)
    assert _model(holder) == "two" and holder.last_error is None and holder.version == 2


def test_a_failed_load_is_tried_again_at_the_same_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load that fails in an unexpected way is contained (never raised to the caller) and retried at the next
    check even though the file's stamp did not change: the stamp is kept only once a version loaded."""
    path = tmp_path / "router.yaml"
    _write(path, GOOD.replace("MODEL", "one"), 1)
    holder = ReloadingRouter(path, check_every_s=0)
    assert _model(holder) == "one"
    real = loader_module.load_router
    failures = iter([OverflowError("int too large to convert to float")])

    def flaky(where: Any) -> Any:
        for failure in failures:
            raise failure
        return real(where)

    monkeypatch.setattr(loader_module, "load_router", flaky)
    _write(path, GOOD.replace("MODEL", "two"), 2)
    assert _model(holder) == "one"
    assert holder.last_error is not None and "OverflowError" in holder.last_error[0]
    assert _model(holder) == "two" and holder.last_error is None


def test_no_good_version_yet_is_a_config_error(tmp_path: Path) -> None:
    """Without any version loaded, get() raises ConfigError with the errors (the API answers 503)."""
    path = tmp_path / "router.yaml"
    _write(path, OVERSIZED, 1)
    with pytest.raises(ConfigError) as info:
        ReloadingRouter(path, check_every_s=0).get()
    assert info.value.errors == ['conversation rule [0] "r": predicate values must be finite']
