"""The command packer (worker/store/server/packer.py) puts redis-py's bytes on the wire for every argument type, takes
hiredis's path for the engine's own arguments, refuses what redis-py refuses with redis-py's error, and is what
the state store's pool hands its connections unless the URL asks for another encoding."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from redis._parsers.encoders import Encoder
from redis.connection import PythonRespSerializer
from redis.exceptions import DataError

from worker.settings import Settings
from worker.store.server import packer
from worker.store.server.client import redis_from_settings
from worker.store.server.packer import HiredisPacker


class _Level(enum.IntEnum):
    HIGH = 1


def _redis_py_packed(*args: Any) -> bytes:
    """redis-py's own packing, the pure-Python serializer (what redis-py 8.2 does for every argument type)."""
    encoder = Encoder("utf-8", "strict", True)  # type: ignore[no-untyped-call]
    return _joined(PythonRespSerializer(6000, encoder.encode).pack(*args))


def _joined(chunks: list[Any]) -> bytes:
    """The bytes of a packed command's chunks (a chunk may be a caller's memoryview, strided ones included)."""
    return b"".join(bytes(chunk) for chunk in chunks)


CASES: list[tuple[Any, ...]] = [
    ("EVALSHA", "0" * 40, 2, "k:{acme}:1", "k:{acme}:2", "arg", 17, -3, 0, 2**70, -(2**70)),
    ("SET", "key", "é ünïcode ✓", "EX", 60),
    ("SET", "key", b"\x00\xff raw bytes"),
    ("ZADD", "z", 1.5, "a", 1e-07, "b", 12345678901234.0, "c", 1e300, "d", -0.0, "e"),
    ("ZADD", "z", float("inf"), "a", float("-inf"), "b"),
    ("SET", "key", memoryview(b"view")),
    ("SET", "key", memoryview(b"abcdef")[::2]),  # strided: hiredis would copy "abc"
    ("SET", "key", bytearray(b"array")),  # hiredis refuses it: redis-py's way
    ("SET", "key", _Level.HIGH),  # an int subclass: redis-py writes its repr
    ("CONFIG GET", "maxmemory"),  # a command name of two words
    ("SET", "key", ""),
    ("HSET", "h", *[f"f{i}" for i in range(300)]),
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: f"{a[0]}:{type(a[-1]).__name__}")
def test_redis_pys_bytes(args: tuple[Any, ...]) -> None:
    assert _joined(HiredisPacker().pack(*args)) == _redis_py_packed(*args)


def test_the_engines_arguments_take_hiredis_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """str, bytes, int and float never reach redis-py's serializer: the speed the packer exists for."""
    packer_ = HiredisPacker()
    monkeypatch.setattr(packer_, "_fallback", None)
    packed = packer_.pack("EVALSHA", "0" * 40, 1, "k", b"\x01raw", 1.5, "é")
    assert _joined(packed) == _redis_py_packed("EVALSHA", "0" * 40, 1, "k", b"\x01raw", 1.5, "é")


@pytest.mark.parametrize("value", [True, None, 1 + 2j], ids=["bool", "None", "complex"])
def test_what_redis_py_refuses_is_refused_with_its_error(value: Any) -> None:
    with pytest.raises(DataError):
        _redis_py_packed("SET", "key", value)
    with pytest.raises(DataError):
        HiredisPacker().pack("SET", "key", value)


def test_a_released_memoryview_is_refused_as_redis_py_refuses_it() -> None:
    view = memoryview(b"payload")
    view.release()
    with pytest.raises(ValueError, match="released"):
        HiredisPacker().pack("SET", "key", view)


def test_the_state_stores_pool_packs_with_it() -> None:
    client = redis_from_settings(Settings(redis_url="redis://127.0.0.1:6379/15"))
    try:
        connection = client.connection_pool.make_connection()
        assert isinstance(connection._command_packer, HiredisPacker)
        connection.disconnect()
    finally:
        client.close()


@pytest.mark.parametrize("query", ["encoding=latin-1", "encoding_errors=replace"])
def test_a_url_with_another_encoding_keeps_redis_pys_packer(query: str) -> None:
    assert packer.hiredis_packer_kwargs(f"redis://127.0.0.1:6379/15?{query}") == {}
    client = redis_from_settings(Settings(redis_url=f"redis://127.0.0.1:6379/15?{query}"))
    try:
        connection = client.connection_pool.make_connection()
        assert not isinstance(connection._command_packer, HiredisPacker)
        connection.disconnect()
    finally:
        client.close()


@pytest.mark.parametrize("query", ["encoding=utf8", "encoding=UTF_8", "encoding_errors=strict"])
def test_a_url_naming_utf8_strict_any_way_packs_with_hiredis(query: str) -> None:
    assert isinstance(
        packer.hiredis_packer_kwargs(f"redis://127.0.0.1:6379/15?{query}")["command_packer"], HiredisPacker
    )
