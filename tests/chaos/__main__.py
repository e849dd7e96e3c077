"""``python -m tests.chaos [--short] [scenario ...]``: run the fault battery and print its table.

Runs every long scenario (or the named ones) one after the other, prints each row as it finishes (stderr)
and the whole table at the end (stdout); exits 1 when any scenario lost an event, applied one twice, broke
a scope's order, let a stale commit land, dead-lettered a healthy event (or kept a poisoned one alive), lost
an external effect or applied one twice at the receiver, or missed its own expectation.
"""

from __future__ import annotations

import argparse
import sys

from tests.chaos.checker import Row, format_table
from tests.chaos.scenarios import SCENARIOS, run_scenario


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the scenarios, print the table; the exit status says whether all held."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument(
        "scenarios", nargs="*", metavar="scenario", help=f"which ones (default: all): {', '.join(SCENARIOS)}"
    )
    parser.add_argument("--short", action="store_true", help="the short variants (one fault each)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    names = args.scenarios or list(SCENARIOS)
    rows: list[Row] = []
    for name in names:
        print(f"chaos: {name} ({'short' if args.short else 'long'}) ...", file=sys.stderr, flush=True)
        row = run_scenario(name, long=not args.short)
        rows.append(row)
        print(format_table([row]), file=sys.stderr, flush=True)
    print(format_table(rows))
    failed = [row.scenario for row in rows if not row.ok]
    if failed:
        print(f"chaos: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(
        f"chaos: {len(rows)} scenario(s) held: nothing lost, nothing applied twice, order kept, only the"
        " poisoned dead, each effect once"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
