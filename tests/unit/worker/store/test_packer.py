"""The command packer (worker/store/packer.py) puts the same bytes on the wire as redis-py's own, for every
argument type the engine sends, refuses what redis-py refuses with redis-py's error, and is what the state
store's pool hands its connections."""

from __future__ import annotations

from typing import Any

import pytest
from redis.connection import Connection
from redis.exceptions import DataError

from worker.settings import Settings
from worker.store.client import redis_from_settings
from worker.store.packer import HiredisPacker


def _redis_py_packed(*args: Any) -> bytes:
    standard = Connection(decode_responses=True)  # redis-py's own packer; never connects
    return b"".join(standard.pack_command(*args))


CASES: list[tuple[Any, ...]] = [
    ("EVALSHA", "0" * 40, 2, "k:{acme}:1", "k:{acme}:2", "arg", 17, -3, 0),
    ("SET", "key", "é ünïcode ✓", "EX", 60),
    ("SET", "key", b"\x00\xff raw bytes"),
    ("ZADD", "z", 1.5, "a", 1e-07, "b", 12345678901234.0, "c"),
    ("SET", "key", memoryview(b"view")),
    ("SET", "key", bytearray(b"array")),  # hiredis refuses it: redis-py's way
    ("CONFIG GET", "maxmemory"),  # a command name of two words
    ("SET", "key", ""),
    ("HSET", "h", *[f"f{i}" for i in range(300)]),
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: f"{a[0]}:{type(a[-1]).__name__}")
def test_the_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    assert b"".join(HiredisPacker().pack(*args)) == _redis_py_packed(*args)


def test_a_bool_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(DataError, match="bool"):
        HiredisPacker().pack("SET", "key", True)


def test_a_string_utf8_cannot_encode_raises_the_encoders_error() -> None:
    with pytest.raises(UnicodeEncodeError):
        _redis_py_packed("SET", "key", "\ud800")
    with pytest.raises(UnicodeEncodeError):
        HiredisPacker().pack("SET", "key", "\ud800")


def test_the_state_stores_pool_packs_with_it() -> None:
    client = redis_from_settings(Settings(redis_url="redis://127.0.0.1:6379/15"))
    try:
        connection = client.connection_pool.make_connection()
        assert isinstance(connection._command_packer, HiredisPacker)
        connection.disconnect()
    finally:
        client.close()
