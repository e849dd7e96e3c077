"""What a JSON request body may be, checked in time linear in its size: no deeper than a limit, no ``NaN`` or
``Infinity`` (nor a number too large for a float), no lone surrogate.

**Depth, without decoding.** The decoder recurses, so nesting is checked before it runs, by C loops only
(:func:`scan_depth`): escaped backslashes are removed, then escaped quotes, which leaves exactly the quotes that
open and close strings; every byte but quotes and brackets is dropped; the strings (now ``"`` + brackets + ``"``)
are cut out; then each pass of ``replace(b"[]", b"")`` removes the innermost level, at most ``limit`` passes.
Each step is one pass over its input, which is never longer than the body, so the work is at most
``(limit + 5) * len(body)`` byte visits (:class:`DepthScan` counts them; the regression test checks the count
for bodies of growing size). The string cut is the regular expression ``"[^"]*"``: once escapes are gone a
string cannot hold a quote, so each match ends at the next quote and no position is scanned more than twice
(the one unterminated string a broken body may end with is scanned forward once and back once). The previous
check cut strings out with an escape-aware expression that rescanned to the end from every quote of an
unterminated string, quadratic in the body (issue 26, finding 1).

**Numbers and text.** ``json`` accepts ``NaN``, ``Infinity``, ``-Infinity`` and turns ``1e999`` into infinity;
none of them is JSON (RFC 8259) and the stored event would not round-trip. An integer of more digits than the
interpreter converts (``sys.get_int_max_str_digits()``, 4300: the conversion is quadratic) is refused as too long,
naming its field; the decoder's own error would name Python's setting instead. A ``\\ud800`` escape decodes to a
lone surrogate, which cannot be encoded as UTF-8, so storing it failed with a 500. Both are refused as
:class:`NotStrictJson` naming the field (a dotted path, ``payload.score``). Raw bytes are decoded strictly
(``json.loads`` would let UTF-8-encoded surrogates through with ``surrogatepass``), so a lone surrogate can
only come from an escape: the decoded value is searched for one only when the text holds an escape of a
surrogate without its pair (so emoji written as escaped pairs, as ``json.dumps`` does, cost nothing more).

**One decoder for the door and the CLI.** :func:`decode_json` (the body, or :class:`InvalidBody` carrying the
``{code, message, field}`` to answer) lives here, not in web_common.py, so that the CLI, which reads its input
as the door reads a body, starts without importing FastAPI (about 165 ms of a CLI command's 1.1 s).
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any, NamedTuple

from worker.intake.json_paths import dotted, first_path

__all__ = [
    "MAX_JSON_DEPTH",
    "DepthScan",
    "FieldError",
    "InvalidBody",
    "NotStrictBody",
    "NotStrictJson",
    "body_field",
    "decode_json",
    "loads_strict",
    "nested_deeper_than",
    "scan_depth",
]

_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_BRACES_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")
_STRING = re.compile(rb'"[^"]*"')  # linear: see the module docstring
# A \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF one, or the reverse: the only way to write a lone
# surrogate (fixed-width lookarounds: linear). An escaped backslash before "u" may match too; the walk decides.
_LONE_SURROGATE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json pairs high+low into one code point: any left is lone


class DepthScan(NamedTuple):
    """The answer of :func:`scan_depth` and the work it took: bytes visited by its C loops, summed."""

    deeper: bool
    bytes_scanned: int


def scan_depth(raw: bytes, limit: int) -> DepthScan:
    """Whether ``raw``'s arrays and objects nest deeper than ``limit`` (see the module docstring). Brackets that
    do not pair up are left to the decoder to name (the answer is then False)."""
    unescaped = raw.replace(b"\\\\", b"")
    delimiting = unescaped.replace(b'\\"', b"")
    kept = delimiting.translate(_BRACES_AS_BRACKETS, _NOT_STRUCTURE)
    structure = _STRING.sub(b"", kept)
    scanned = len(raw) + len(unescaped) + len(delimiting) + 2 * len(kept)
    for _ in range(limit):
        scanned += len(structure)
        inner_removed = structure.replace(b"[]", b"")
        if len(inner_removed) == len(structure):
            return DepthScan(False, scanned)  # nothing left, or unbalanced (not JSON)
        structure = inner_removed
    return DepthScan(bool(structure), scanned)


def nested_deeper_than(raw: bytes, limit: int) -> bool:
    """True when ``raw``'s arrays and objects nest deeper than ``limit`` (:func:`scan_depth`)."""
    return scan_depth(raw, limit).deeper


class NotStrictJson(ValueError):
    """``NaN``, ``Infinity``, a float overflow, an integer too long or a lone surrogate; ``field`` is its dotted
    path (None: the body itself)."""

    def __init__(self, message: str, field: str | None) -> None:
        super().__init__(message)
        self.field = field


class _NonFinite(ValueError):
    """Raised inside the decoder at the first non-finite number (its path is found afterwards)."""


def _refuse_constant(text: str) -> Any:
    raise _NonFinite(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NonFinite(text)
    return value


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def loads_strict(raw: bytes) -> Any:
    """``raw`` decoded (UTF-8, or UTF-16/32 as ``json.loads`` detects them); ValueError when it is not JSON,
    :class:`NotStrictJson` for a non-finite number, an integer too long or a lone surrogate."""
    text = raw.decode(json.detect_encoding(raw))  # strict: no surrogatepass, unlike json.loads
    try:
        data = _STRICT.decode(text)
    except _NonFinite as exc:
        raise _non_finite(text, str(exc)) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # not the syntax: int() refused a number's digits (its one other error)
        raise _too_long(text) from None
    if _LONE_SURROGATE_ESCAPE.search(text) is not None:
        path = first_path(data, lambda v: isinstance(v, str) and _LONE_SURROGATE.search(v) is not None)
        if path is not None:
            field = body_field(path)
            where = f"{field} holds" if field else "the body is"
            raise NotStrictJson(
                f"{where} a lone surrogate (\\ud800-\\udfff without its pair): not text", field
            )
    return data


def body_field(path: list[str | int]) -> str | None:
    """A body's field path as the door names it: dotted (``messages.0.content``), except a batch's event,
    which is ``events[i]`` as in every other answer about a batch (``events[1].payload.score``, as the SDK says)."""
    if len(path) >= 2 and path[0] == "events" and isinstance(path[1], int):
        rest = dotted(path[2:])
        return f"events[{path[1]}]" + (f".{rest}" if rest else "")
    return dotted(path)


_MARK = object()


def _non_finite(text: str, literal: str) -> NotStrictJson:
    """The error for the first non-finite number, its path found by decoding again with a marker."""
    marker = json.JSONDecoder(parse_constant=lambda _: _MARK, parse_float=_float_or_mark)
    path = first_path(marker.decode(text), lambda v: v is _MARK)
    field = body_field(path) if path is not None else None
    where = f"{field} is" if field else "the body holds"
    return NotStrictJson(f"{where} {literal[:40]}: JSON numbers must be finite (no NaN or Infinity)", field)


def _float_or_mark(text: str) -> Any:
    value = float(text)
    return _MARK if math.isinf(value) else value


def _too_long(text: str) -> NotStrictJson:
    """The error for the first integer too long to convert, its path found by decoding again with a marker."""
    marker = json.JSONDecoder(parse_int=_int_or_mark)
    path = first_path(marker.decode(text), lambda v: v is _MARK)
    field = body_field(path) if path is not None else None
    where = f"{field} is" if field else "the body holds"
    limit = sys.get_int_max_str_digits()
    return NotStrictJson(f"{where} a number too long: integers may have at most {limit} digits", field)


def _int_or_mark(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return _MARK


MAX_JSON_DEPTH = 64  # arrays and objects inside each other; chat requests and events use about ten


class FieldError(NamedTuple):
    """What is wrong with a request: ``code``, a readable ``message``, and the ``field`` (a path) or None."""

    code: str
    message: str
    field: str | None = None


class InvalidBody(ValueError):
    """The body is not JSON (or not an object where one is required); ``detail`` is the decoder's reason."""

    def __init__(self, error: FieldError, detail: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.detail = detail


class NotStrictBody(InvalidBody):
    """The body is JSON to Python but not to RFC 8259: ``NaN``, ``Infinity`` or a lone surrogate; or an integer too
    long to read (always 422)."""


def decode_json(raw: bytes, *, require_object: bool = True) -> Any:
    """The decoded body (an empty body is ``{}``), or raise InvalidBody (code ``invalid_json``); nesting
    deeper than ``MAX_JSON_DEPTH`` is refused before decoding (the decoder recurses, and would fail with a
    RecursionError at about a thousand levels), and ``NaN``, ``Infinity``, integers too long and lone surrogates
    after it, naming their field (producers/http/strict_json.py: all of it linear in the body)."""
    if nested_deeper_than(raw, MAX_JSON_DEPTH):
        detail = f"nested deeper than {MAX_JSON_DEPTH} levels"
        raise InvalidBody(FieldError("invalid_json", f"request body is {detail}"), detail)
    try:
        data = loads_strict(raw or b"{}")
    except NotStrictJson as exc:
        raise NotStrictBody(FieldError("invalid_json", str(exc), exc.field), str(exc)) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        error = FieldError("invalid_json", f"request body is not valid JSON: {exc}")
        raise InvalidBody(error, str(exc)) from None
    if require_object and not isinstance(data, dict):
        error = FieldError("invalid_json", "request body must be a JSON object")
        raise InvalidBody(error, "must be a JSON object")
    return data
