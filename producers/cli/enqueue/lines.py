"""``enqueue``'s input: every non-blank line becomes an event (a JSON object) or a rejection naming the line
and, where one is to blame, the field. Nothing one line holds stops the others: bytes that are not UTF-8, JSON
that is not an object, a number JSON has no form for (``NaN``, ``Infinity``), a lone surrogate, nesting deeper
than the HTTP door takes in a batch. The checks are the door's own (producers/http/strict_json.py), made
before anything is sent, so a line is refused alike straight to Redis and over HTTP.

Lines are split as text files split them (``\\n``, ``\\r\\n`` or ``\\r``) and decoded one by one; a UTF-8 byte
order mark before the first line is allowed. A file is read a MiB at a time (:func:`open_lines`): a file of any
size in bounded memory (read whole, 50 MB of events took 496 MB).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any, NamedTuple

from producers.cli.inputs import stdin_binary
from producers.http.strict_json import NotStrictJson, loads_strict, nested_deeper_than

__all__ = ["Line", "Rejection", "count_lines", "max_line_depth", "open_lines", "parse_line", "read_lines"]

# ``POST /v1/events`` refuses a body nested deeper than the door's MAX_JSON_DEPTH, and a batch wraps each event
# in two levels of its own (``{"events": [...]}``): an event may nest that much less.
BATCH_WRAPPING_DEPTH = 2
CHUNK_BYTES = 1 << 20  # read at a time
BREAKS = (b"\r\n", b"\n", b"\r")  # a line's end, as bytes.splitlines reads it


class Rejection(NamedTuple):
    """Why a line is not enqueued, and the field to blame (None: the line as a whole)."""

    message: str
    field: str | None = None

    def described(self) -> str:
        """``message (field: F)``, the field only when one is to blame."""
        return f"{self.message} (field: {self.field})" if self.field else self.message


class Line(NamedTuple):
    """A non-blank line: its number (from 1) and its event, or its rejection."""

    number: int
    event: dict[str, Any] | None
    rejection: Rejection | None


def max_line_depth() -> int:
    """How deep one line may nest: what the HTTP door takes in a batch (imported here, when a file is read: the
    door's module brings the web framework, which the CLI does not load to start)."""
    from producers.http.strict_json import MAX_JSON_DEPTH

    return MAX_JSON_DEPTH - BATCH_WRAPPING_DEPTH


def read_lines(path: str) -> list[Line]:
    """Every non-blank line of ``path`` (``-``: stdin), in order, in a list (``run``'s short example files); OSError
    when the file cannot be read, CliError when stdin is closed."""
    return list(open_lines(path))


def open_lines(path: str) -> Iterator[Line]:
    """The non-blank lines of ``path`` (``-``: stdin), in order, read as they are asked for. The file is opened
    here (OSError at once when it cannot be; CliError when stdin is closed) and closed when they are done."""
    if path == "-":
        return _parsed(stdin_binary(), close=False)
    return _parsed(open(path, "rb"), close=True)


def count_lines(path: str) -> int:
    """How many lines of the file at ``path`` are not blank (a progress bar's total), without parsing them."""
    with open(path, "rb") as stream:  # blank as parse_line finds it: Unicode whitespace, a byte order mark
        return sum(
            1 for raw in _raw_lines(stream) if raw.decode("utf-8", "replace").strip().lstrip("\ufeff").strip()
        )


def _parsed(stream: IO[bytes], *, close: bool) -> Iterator[Line]:
    try:
        depth = max_line_depth()
        for number, raw in enumerate(_raw_lines(stream), start=1):
            line = parse_line(number, raw, depth)
            if line is not None:
                yield line
    finally:
        if close:
            stream.close()


def _raw_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``stream`` without their breaks, as ``stream.read().splitlines()`` would give them, a chunk at
    a time: a chunk's last piece waits for the next unless it ends with LF (it may be cut, or be a CR whose LF
    follows)."""
    rest = bytearray()
    read = getattr(
        stream, "read1", stream.read
    )  # what a pipe has, not a whole MiB: a line is sent once it came
    while chunk := read(CHUNK_BYTES):
        rest += chunk
        if b"\n" not in chunk and b"\r" not in chunk:
            continue  # one long line so far: no split (each one would copy what came before)
        pieces = bytes(rest).splitlines(keepends=True)
        # the last piece waits when it may go on: no break yet, or a CR whose LF may come next
        rest = bytearray(pieces.pop() if not pieces[-1].endswith(b"\n") else b"")
        for piece in pieces:
            yield _without_break(piece)
    yield from bytes(rest).splitlines()


def _without_break(piece: bytes) -> bytes:
    for end in BREAKS:
        if piece.endswith(end):
            return piece[: -len(end)]
    return piece


def parse_line(number: int, raw: bytes, max_depth: int) -> Line | None:
    """Line ``number`` (``raw``, without its line break) as an event or a rejection; None when it is blank."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
        return Line(number, None, Rejection(f"not UTF-8 ({where})"))
    if (
        not text.strip().lstrip("\ufeff").strip()
    ):  # blank, or a byte order mark alone (an empty file with one)
        return None
    if nested_deeper_than(raw, max_depth):
        message = f"nested deeper than {max_depth} levels"
        return Line(number, None, Rejection(message, _too_deep_field(raw, max_depth)))
    try:
        value = loads_strict(raw)  # a BOM is allowed: it detects the encoding, as json.loads does
    except NotStrictJson as exc:
        return Line(number, None, Rejection(str(exc), exc.field))
    except RecursionError:  # brackets that never close (the depth check counts pairs), deeper than it reads
        return Line(number, None, Rejection(f"not valid JSON (nested deeper than {max_depth} levels)"))
    except ValueError as exc:
        return Line(number, None, Rejection(f"not valid JSON ({exc})"))
    if not isinstance(value, dict):
        return Line(number, None, Rejection(f"an event must be a JSON object, not {_kind(value)}"))
    return Line(number, value, None)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"


def _too_deep_field(raw: bytes, max_depth: int) -> str | None:
    """The first field of an object line that nests too deep; None when the line is no object or too deep for
    the decoder to read at all."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    for key, item in value.items():
        if nested_deeper_than(json.dumps(item).encode(), max_depth - 1):
            return str(key)
    return None
