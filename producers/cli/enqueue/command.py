"""The ``enqueue`` verb: read every line (lines.py), send the events in batches of ``--batch`` (senders.py),
print each rejection on stderr as ``line N: message (field: F)``, ``--ids`` rows on stdout, and the summary
``{"accepted":n,"duplicate":n,"rejected":n}`` last, whatever happened. Exit 1 when a line was rejected or the
sending stopped (the error's own code: 2 when the server could not be reached), else 0."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from producers.cli.enqueue.lines import Line, Rejection, read_lines
from producers.cli.enqueue.senders import DirectSender, HttpSender, Pending, Sent, Stopped
from producers.cli.target import CliError, add_target_options, resolve_target

__all__ = ["add_enqueue_command", "cmd_enqueue", "positive_int"]

DEFAULT_BATCH = 200


def positive_int(text: str) -> int:
    """``--batch``'s type: an integer of at least 1 (argparse prints the error with the option's name)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


def add_enqueue_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("enqueue", help="enqueue one source event per line of a JSONL file ('-' for stdin)")
    p.add_argument("file")
    p.add_argument(
        "--batch",
        type=positive_int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"events per round trip (default {DEFAULT_BATCH}); over HTTP a batch the server finds too large "
        "is split",
    )
    p.add_argument(
        "--ids",
        action="store_true",
        help='print {"line","eventId","sourceId","status"} per enqueued event before the summary',
    )
    add_target_options(p)
    p.set_defaults(func=cmd_enqueue)


class Progress:
    """A one-line progress bar on stderr, shown only on a terminal."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.enabled = stream.isatty()

    def update(self, done: int, note: str = "") -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * done / self.total)
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r[{bar}] {done}/{self.total} {note}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        lines = read_lines(args.file)
    except OSError as exc:
        print(f"agent-signal enqueue: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    target = resolve_target(args)
    summary = {"accepted": 0, "duplicate": 0, "rejected": 0}
    valid = _report_unreadable(lines, summary)
    sender = HttpSender(target) if target.http else DirectSender(args.tenant or "default")
    progress = Progress(len(lines))
    try:
        _send_all(sender, valid, args, summary, progress, done=summary["rejected"])
    except CliError as exc:  # e.g. a 401, or the server went away: nothing more will pass
        progress.close()
        print(f"agent-signal enqueue: {exc}", file=sys.stderr)
        print(json.dumps(summary))
        return exc.exit_code
    finally:
        sender.close()
    progress.close()
    print(json.dumps(summary))
    return 1 if summary["rejected"] else 0


def _report_unreadable(lines: list[Line], summary: dict[str, int]) -> list[Pending]:
    """The lines that hold an event; each other one is counted and reported."""
    valid: list[Pending] = []
    for number, event, rejection in lines:
        if event is None:
            assert rejection is not None
            _reject(number, rejection, summary)
        else:
            valid.append((number, event))
    return valid


def _reject(number: int, rejection: Rejection, summary: dict[str, int]) -> None:
    summary["rejected"] += 1
    print(f"line {number}: {rejection.message} (field: {rejection.field or '-'})", file=sys.stderr)


def _report(sent: list[Sent], args: argparse.Namespace, summary: dict[str, int]) -> None:
    """Each line's outcome: a rejection to stderr, an ``--ids`` line to stdout, a count to ``summary``."""
    for number, result, rejection in sent:
        if result is None:
            assert rejection is not None
            _reject(number, rejection, summary)
            continue
        summary[result.status] = summary.get(result.status, 0) + 1
        if args.ids:
            line = {"line": number, "eventId": result.event_id, "sourceId": result.source_id}
            print(json.dumps({**line, "status": result.status}), flush=True)


def _send_all(
    sender: DirectSender | HttpSender,
    valid: list[Pending],
    args: argparse.Namespace,
    summary: dict[str, int],
    progress: Progress,
    done: int,
) -> None:
    """Send ``valid`` in batches; rejections go to stderr, ``--ids`` lines to stdout, counts to ``summary``."""
    for start in range(0, len(valid), args.batch):
        chunk = valid[start : start + args.batch]
        try:
            sent = sender.send(chunk)
        except Stopped as exc:  # what the batch settled before it stopped is reported, then the failure
            _report(exc.done, args, summary)
            raise
        _report(sent, args, summary)
        done += len(chunk)
        progress.update(done, f"accepted={summary['accepted']} duplicate={summary['duplicate']}")
