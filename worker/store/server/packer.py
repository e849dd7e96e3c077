"""Packing a command for the wire with hiredis alone, where redis-py 8.2 first encodes every argument in Python.

redis-py 8.2's ``HiredisRespSerializer`` runs each argument through ``Encoder.encode`` (five ``isinstance``
checks and a ``str.encode``) and two generator expressions before ``hiredis.pack_command``, which encodes a
``str`` (strict UTF-8), ``bytes``, an exact ``int`` and a ``float`` itself. A batch COMMIT carries ~17 arguments
per event, so that walk cost more than any single step of the drain's own Python (issue 29).
:class:`HiredisPacker` hands such arguments to hiredis as they are. Whatever hiredis refuses (``TypeError``: a
``bool``, ``None``, an ``IntEnum``, a ``bytearray``) and any ``memoryview`` (hiredis copies a view's buffer
without its strides) go to redis-py's pure-Python serializer, which packs them or raises its ``DataError`` as
redis-py 8.2 does. The bytes on the wire are redis-py's: a unit test compares both for every argument type.
hiredis encodes with UTF-8 and strict errors only, so a client whose URL sets another ``encoding`` or
``encoding_errors`` keeps redis-py's packer (:func:`hiredis_packer_kwargs`).

Written by hand: redis-py takes a ``command_packer`` per connection but ships none that skips its encoder.
"""

from __future__ import annotations

import codecs
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
        if type(command) is str and " " not in command and memoryview not in map(type, args):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass  # an argument hiredis does not take: redis-py's way, its DataError included
        packed: list[bytes] = self._fallback.pack(*args)
        return packed


def hiredis_packer_kwargs(url: str) -> dict[str, Any]:
    """The connection keyword that installs :class:`HiredisPacker` (one shared, stateless instance) for a
    client of ``url``; none when the URL asks for an encoding hiredis would not use."""
    options = _redis_py.parse_url(url)
    encoding = codecs.lookup(options.get("encoding", "utf-8")).name  # any spelling of a codec: its one name
    if encoding != "utf-8" or options.get("encoding_errors", "strict") != "strict":
        return {}
    return {"command_packer": HiredisPacker()}
