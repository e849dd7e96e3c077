"""Scope buckets' key arithmetic (worker/keys/buckets.py): which slot each key lands in."""

from __future__ import annotations

import zlib

import pytest
from redis.crc import key_slot

from worker.keys.buckets import bucket_of, slot_tag
from worker.keys.layout import Keys


def test_one_bucket_keeps_every_key_where_it_was() -> None:
    k = Keys("p:", "acme")
    b = k.for_scope("topic:a")
    assert (k.home_prefix, b.bucket_prefix, k.scope_prefix("topic:a")) == ("p:t:{acme}:",) * 3
    assert b == k.for_bucket(0) and k.every_bucket() == [b]
    assert k.inbox("topic:a") == "p:t:{acme}:inbox:{topic:a}" and b.dlq == "p:t:{acme}:dlq"
    assert b.bucket_audit == k.ops_audit


def test_a_scope_and_its_bucket_s_indexes_share_a_slot_and_user_data_stays_home() -> None:
    k = Keys("p:", "acme", 8)
    scope = "topic:x"
    b = k.for_scope(scope)
    assert b.bucket == zlib.crc32(scope.encode()) % 8 == bucket_of(scope, 8)
    tags = {slot_tag(x) for x in (b.inbox(scope), b.lease(scope), b.plugin(scope, "n"), b.event("e"), b.dlq)}
    assert tags == {f"acme.{b.bucket:02x}"}
    assert k.inbox(scope) == b.inbox(scope)  # scope-keyed keys need no binding
    assert slot_tag(b.plugin_home("memories", "u")) == slot_tag(b.receipt("u", "r")) == "acme"
    assert len({key_slot(k.for_bucket(i).stats.encode()) for i in range(8)}) == 8


def test_an_index_key_is_a_bucket_s_only() -> None:
    """A tenant's builder has no bucket index (mypy refuses it; at run time it is not there either)."""
    assert not hasattr(Keys("p:", "acme", 4), "dlq")
    assert Keys("p:", "acme", 4).for_bucket(1).dlq == "p:t:{acme.01}:dlq"


def test_the_tenant_pattern_and_ownership_cover_home_and_buckets_only() -> None:
    import fnmatch

    k = Keys("p:", "acme", 4)
    mine = [k.home_prefix + "memories:u", k.for_bucket(3).stats, k.inbox("topic:z")]
    others = ["p:t:{acme-2}:dlq", "p:t:{acme-2.01}:dlq", "p:workers"]
    assert all(fnmatch.fnmatchcase(key, k.tenant_pattern) and k.owns(key) for key in mine)
    assert not any(fnmatch.fnmatchcase(key, k.tenant_pattern) or k.owns(key) for key in others)
    assert k.is_engine_key(k.inbox("topic:z")) and not k.is_engine_key(k.home_prefix + "memories:u")
    # a user's share of the retained events is the engine's too: a handler's staged DEL could reset it (a review)
    assert all(k.is_engine_key(b.retained_user_events("alice")) for b in k.every_bucket())


def test_the_once_marker_sits_in_the_written_slot_and_names_no_user() -> None:
    k = Keys("p:", "acme", 4)
    marker = k.applied_marker(k.home_prefix + "memories:user-42", "journal:user-42:1:acme")
    assert slot_tag(marker) == "acme" and "user-42" not in marker
    assert slot_tag(k.applied_marker(k.for_bucket(2).dlq, "r")) == "acme.02"
    with pytest.raises(ValueError):
        k.applied_marker("p:t:{other}:x", "r")
