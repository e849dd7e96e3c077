"""Packing a command for the wire with hiredis alone, where redis-py 8 first encodes every argument in Python.

redis-py's ``HiredisRespSerializer`` runs each argument through ``Encoder.encode`` (four ``isinstance`` checks
and a ``str.encode``) and two generator expressions before ``hiredis.pack_command``, which encodes ``str``,
``bytes``, ``int``, ``float`` and ``memoryview`` itself. A batch COMMIT carries ~17 arguments per event, so that
walk cost more than any single step of the drain's own Python (issue 29). :class:`HiredisPacker` hands the
arguments to hiredis as they are and falls back to redis-py's own packing for anything hiredis refuses
(``TypeError``: a ``bool``, ``None``, a ``bytearray``), which then packs or raises redis-py's ``DataError``
exactly as before (its pure-Python serializer: the same bytes, and the same signature in every redis-py the
project allows). The bytes on the wire are the same (a unit test compares both for every argument type the
engine sends). Only for clients that decode with UTF-8 and strict errors, what hiredis does.

Written by hand: redis-py takes a ``command_packer`` per connection but ships none that skips its encoder.
"""

from __future__ import annotations

from typing import Any

import hiredis
from redis import connection
from redis._parsers import encoders

__all__ = ["HiredisPacker", "hiredis_packer_kwargs"]

_BUFFER_CUTOFF = 6000  # redis-py's default, for the fallback's chunking
# redis-py's own pieces, through Any: some of its versions annotate them and some do not.
_redis_py: Any = connection
_encoders: Any = encoders


class HiredisPacker:
    """A redis-py ``command_packer``: ``pack(*args)`` returns the command's RESP bytes as a one-item list."""

    def __init__(self) -> None:
        encoder = _encoders.Encoder("utf-8", "strict", True)
        self._fallback = _redis_py.PythonRespSerializer(_BUFFER_CUTOFF, encoder.encode)

    def pack(self, *args: Any) -> list[bytes]:
        command = args[0]
        if type(command) is str and " " not in command:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass  # an argument hiredis does not take: redis-py's way, its DataError included
        packed: list[bytes] = self._fallback.pack(*args)
        return packed


def hiredis_packer_kwargs() -> dict[str, Any]:
    """The connection keyword that installs :class:`HiredisPacker` (one shared, stateless instance)."""
    return {"command_packer": HiredisPacker()}
