"""``enqueue``'s input: every non-blank line becomes an event (a JSON object) or a rejection naming the line
and, where one is to blame, the field. Nothing one line holds stops the others: bytes that are not UTF-8, JSON
that is not an object, a number JSON has no form for (``NaN``, ``Infinity``), a lone surrogate, nesting deeper
than the HTTP door takes in a batch. The checks are the door's own (producers/http/strict_json.py), made
before anything is sent, so a line is refused alike straight to Redis and over HTTP.

Lines are split as text files split them (``\\n``, ``\\r\\n`` or ``\\r``) and decoded one by one; a UTF-8 byte
order mark before the first line is allowed.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from producers.cli.inputs import stdin_binary
from producers.http.strict_json import NotStrictJson, loads_strict, nested_deeper_than

__all__ = ["Line", "Rejection", "max_line_depth", "parse_line", "read_lines"]

# ``POST /v1/events`` refuses a body nested deeper than the door's MAX_JSON_DEPTH, and a batch wraps each event
# in two levels of its own (``{"events": [...]}``): an event may nest that much less.
BATCH_WRAPPING_DEPTH = 2


class Rejection(NamedTuple):
    """Why a line is not enqueued, and the field to blame (None: the line as a whole)."""

    message: str
    field: str | None = None


class Line(NamedTuple):
    """A non-blank line: its number (from 1) and its event, or its rejection."""

    number: int
    event: dict[str, Any] | None
    rejection: Rejection | None


def max_line_depth() -> int:
    """How deep one line may nest: what the HTTP door takes in a batch (imported here, when a file is read: the
    door's module brings the web framework, which the CLI does not load to start)."""
    from producers.http.web_common import MAX_JSON_DEPTH

    return MAX_JSON_DEPTH - BATCH_WRAPPING_DEPTH


def read_lines(path: str) -> list[Line]:
    """Every non-blank line of ``path`` (``-``: stdin), in order; OSError when the file cannot be read, CliError
    when stdin is closed."""
    if path == "-":
        data = stdin_binary().read()
    else:
        with open(path, "rb") as stream:
            data = stream.read()
    depth = max_line_depth()
    parsed = (parse_line(number, raw, depth) for number, raw in enumerate(data.splitlines(), start=1))
    return [line for line in parsed if line is not None]


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
