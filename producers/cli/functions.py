"""``agent-signal functions check DIR`` and ``agent-signal functions simulate --functions DIR --script F``."""

from __future__ import annotations

import json
import sys

from sessions.fsm import FunctionMachine
from sessions.functions import FunctionLoadError, load_function_dir
from sessions.simulate import run_script

__all__ = ["run_check", "run_simulate"]


def run_check(directory: str) -> int:
    """Exit 0 (warnings on stderr), or 2 with one ``<file>: <field>: <problem>`` line per error."""
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
        stream = sys.stdin if script == "-" else open(script, encoding="utf-8")
    except OSError as exc:
        print(f"agent-signal functions simulate: cannot read {script}: {exc.strerror}", file=sys.stderr)
        return 2
    failed = False
    with stream:
        for output, error in run_script(FunctionMachine(defs, session_id="simulation"), stream):
            if error:
                failed = True
                print(error, file=sys.stderr)
            sys.stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
    return 1 if failed else 0
