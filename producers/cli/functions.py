"""``agent-signal functions check DIR`` and ``agent-signal functions simulate --functions DIR --script F``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from producers.cli.inputs import stdin_binary
from sessions.fsm import FunctionMachine
from sessions.functions import FunctionLoadError, load_function_dir
from sessions.simulate import run_script

__all__ = ["run_check", "run_simulate"]


def run_check(directory: str) -> int:
    """Exit 0 (warnings on stderr), or 2 with one ``<file>: <field>: <problem>`` line per error, or one line
    saying the folder holds no definition (a mistyped folder passed as "ok, 0 functions")."""
    try:
        defs, warnings = load_function_dir(directory)
    except FunctionLoadError as exc:
        for line in exc.errors:
            print(line)
        for line in exc.warnings:
            print(f"warning: {line}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    if not defs:  # a mistyped folder passed: "ok (0 functions: )"
        print(f"{directory}: no *.md definition found")  # an error line, as the others
        return 2
    print(f"{directory}: ok ({len(defs)} functions: {', '.join(sorted(defs))})", file=sys.stderr)
    return 0


def run_simulate(directory: str, script: str) -> int:
    """One JSON line per step on stdout; errors on stderr; exit 1 if a step was malformed."""
    try:
        defs, warnings = load_function_dir(directory)
    except FunctionLoadError as exc:
        for line in exc.errors:
            print(line, file=sys.stderr)
        return 2
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    try:
        stream = stdin_binary() if script == "-" else open(script, "rb")
    except OSError as exc:
        print(f"agent-signal functions simulate: cannot read {script}: {exc.strerror}", file=sys.stderr)
        return 2
    failed = False
    with stream:
        machine = FunctionMachine(defs, session_id="simulation")
        for output, error in run_script(machine, _text_lines(stream), parse=_step_parser()):
            if error:
                failed = True
                print(error, file=sys.stderr)
            sys.stdout.write(json.dumps(output, ensure_ascii=False, allow_nan=False) + "\n")
    return 1 if failed else 0


def _text_lines(stream: BinaryIO) -> Iterator[str]:
    """The script's lines, split as a text file splits them (``\\n``, ``\\r\\n``, ``\\r``) and decoded one by one,
    as they come: bytes that are not UTF-8 stay in their line as lone surrogates (``surrogateescape``), for the
    parser to refuse that line alone (one bad line used to end the whole run, and lose the output before it)."""
    for chunk in stream:
        for raw in chunk.splitlines() or [b""]:
            yield raw.decode("utf-8", "surrogateescape")


def _step_parser() -> Callable[[str], Any]:
    """A script line read as the HTTP door reads a body (producers/http/strict_json.py): ValueError naming the
    field for ``NaN``, ``Infinity`` or a lone surrogate, or for nesting deeper than the door takes, and for
    bytes that are not UTF-8 (as ``enqueue`` names them); so every output line is JSON that can be written."""
    from producers.http.strict_json import MAX_JSON_DEPTH, loads_strict, nested_deeper_than

    def parse(line: str) -> Any:
        raw = line.encode("utf-8", "surrogateescape")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from None
        if nested_deeper_than(raw, MAX_JSON_DEPTH):
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        return loads_strict(raw)

    return parse
