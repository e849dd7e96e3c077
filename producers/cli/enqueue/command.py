"""The ``enqueue`` verb: read every line (lines.py), send the events in batches of ``--batch`` (senders.py),
print each rejection on stderr as ``line N: message (field: F)`` (no field when the line as a whole is refused), ``--ids`` rows on stdout, and the summary
``{"accepted":n,"duplicate":n,"rejected":n}`` (compact, as CONTRACT.md writes it; ``"gated":n`` added when an
admission hook held events back) last, whatever happened. Exit 1 when a line was rejected or the sending stopped
(the error's own code: 2 when the server could not be reached, did not answer in time or is not the API), else 0.
A batch that got no answer (a timeout, a dropped connection, an answer not the API's) may be stored: the stop's
line names its lines. Stopped partway by Ctrl-C (exit 130) or by stdout's reader going away (``--ids | head -1``,
exit 141), it says on stderr the summary so far and the last line sent (then, after Ctrl-C, the summary on stdout
as always). The target and the tenant are resolved before the file is read, so a wrong one is the only line."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

from producers.cli.enqueue.lines import Line, Rejection, count_lines, open_lines
from producers.cli.enqueue.senders import DirectSender, HttpSender, Pending, Sent, Stopped
from producers.cli.inputs import any_bytes
from producers.cli.reach.target import CliError, add_target_options, resolve_target
from producers.cli.stopped import STOPS, say_stopped, why_stopped

__all__ = ["add_enqueue_command", "cmd_enqueue", "positive_int", "summary_json"]

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
    p.add_argument(
        "file",
        type=any_bytes,
        metavar="FILE.jsonl",
        help="one source event (a JSON object) per line; '-' reads stdin",
    )
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

    def __init__(self, total: int | None, stream: TextIO = sys.stderr) -> None:
        self.total = None if total is None else max(total, 1)  # None: not known (stdin), a count alone
        self.stream = stream
        self.enabled = stream.isatty()

    def update(self, done: int, note: str = "") -> None:
        if not self.enabled:
            return
        if self.total is None:
            self.stream.write(f"\r{done} lines {note}")
        else:
            width = 30
            filled = int(width * min(done, self.total) / self.total)
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r[{bar}] {done}/{self.total} {note}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class Tally:
    """How far the verb got: the summary's counts, the last line whose outcome is known (0: none yet) and the
    lines of the batch on its way (None: none), which may be stored without their answer having come back."""

    summary: dict[str, int] = field(default_factory=lambda: {"accepted": 0, "duplicate": 0, "rejected": 0})
    last_line: int = 0
    in_flight: tuple[int, int] | None = None


def cmd_enqueue(args: argparse.Namespace) -> int:
    # the target and the tenant first: a wrong one is the only line, before any line of the file is reported
    target = resolve_target(args)
    sender = HttpSender(target) if target.http else DirectSender(args.tenant or "default")
    tally = Tally()
    try:
        return _read_and_send(sender, args, tally)
    except STOPS as exc:  # Ctrl-C, or stdout's reader gone: say how far it got, then main's exit code
        _say_how_far(tally, exc)
        raise
    finally:
        sender.close()


def _read_and_send(sender: DirectSender | HttpSender, args: argparse.Namespace, tally: Tally) -> int:
    summary = tally.summary
    try:
        # a bar's total, when a bar is shown: one quick pass over a regular file (a pipe read twice is drained)
        counted = sys.stderr.isatty() and args.file != "-" and stat.S_ISREG(os.stat(args.file).st_mode)
        progress = Progress(count_lines(args.file) if counted else None)
        lines = open_lines(args.file)  # read as they are sent: a file of any size in bounded memory
    except OSError as exc:
        print(f"agent-signal enqueue: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        _send_all(sender, _readable(lines), args, tally, progress)
    except CliError as exc:  # e.g. a 401, or the server went away: nothing more will pass
        progress.close()
        print(f"agent-signal enqueue: {exc}{_maybe_stored(exc)}", file=sys.stderr)
        print(summary_json(summary))
        return exc.exit_code
    except STOPS:
        progress.close()
        raise
    progress.close()
    print(summary_json(summary))
    return 1 if summary["rejected"] else 0


class _ReadFailed(Exception):
    """A read of the input that failed partway (a disk error, a file cut short under us): ``cause``."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _readable(lines: Iterator[Line]) -> Iterator[Line]:
    """``lines``, an OSError partway raised as :class:`_ReadFailed` (``_send_all`` sends what it read first)."""
    try:
        yield from lines
    except OSError as exc:
        raise _ReadFailed(exc) from None


def summary_json(summary: dict[str, int]) -> str:
    """The summary as CONTRACT.md writes it: ``{"accepted":n,"duplicate":n,"rejected":n}``, compact."""
    return json.dumps(summary, separators=(",", ":"))


def _maybe_stored(exc: CliError) -> str:
    """``; lines X-Y may be stored (…)`` for a batch that stopped on its way, naming the lines it did not settle."""
    if not isinstance(exc, Stopped) or not exc.maybe_stored or not exc.unsettled:
        return ""
    first, last = exc.unsettled[0], exc.unsettled[-1]
    lines = f"line {first}" if first == last else f"lines {first}-{last}"
    return f"; {lines} may be stored (a rerun counts them as duplicates)"


def _say_how_far(tally: Tally, exc: BaseException) -> None:
    """The summary so far and the last line sent, on stderr; after Ctrl-C the summary on stdout too, last, as
    always (stdout's reader gone: stderr only)."""
    where = (
        f"after line {tally.last_line}, the last line sent" if tally.last_line else "before any line was sent"
    )
    line = f"agent-signal enqueue: {why_stopped(exc)} {where}: {summary_json(tally.summary)}"
    if tally.in_flight is not None:
        first, last = tally.in_flight
        line += (
            f"; lines {first}-{last} were on their way and may be stored (a rerun counts them as duplicates)"
        )
    say_stopped(line)
    if isinstance(exc, KeyboardInterrupt):
        try:
            print(summary_json(tally.summary), flush=True)
        except BrokenPipeError:  # the reader went too: stderr has said it
            pass


def _say_rejection(number: int, rejection: Rejection | None) -> None:
    assert rejection is not None
    print(f"line {number}: {rejection.described()}", file=sys.stderr)


def _report(
    sent: list[Sent], args: argparse.Namespace, summary: dict[str, int], held: list[Sent] | None = None
) -> None:
    """Each line's outcome: a count to ``summary`` (all of them first, so that an interruption while printing
    leaves the counts whole), then a rejection to stderr, an ``--ids`` line to stdout, in line order with the
    lines ``held`` (read and refused before the batch went, counted then; emptied here)."""
    for _, result, _ in sent:
        status = "rejected" if result is None else result.status
        summary[status] = summary.get(status, 0) + 1
    ordered = sorted([*sent, *(held or [])], key=lambda one: one[0])
    if held:
        held.clear()
    for number, result, rejection in ordered:
        if result is None:
            _say_rejection(number, rejection)
        elif args.ids:
            line = {"line": number, "eventId": result.event_id, "sourceId": result.source_id}
            print(json.dumps({**line, "status": result.status}, separators=(",", ":")), flush=True)


def _send_all(
    sender: DirectSender | HttpSender,
    lines: Iterable[Line],
    args: argparse.Namespace,
    tally: Tally,
    progress: Progress,
) -> None:
    """Send the events of ``lines`` in batches of ``args.batch`` as they are read; a line that holds no event is
    counted when it is met and reported with the batch around it (stderr in line order), rejections of the server
    go to stderr, ``--ids`` lines to stdout, counts to the tally."""
    batch: list[Pending] = []
    held: list[Sent] = []  # lines refused as read, said with the batch around them: the output in line order
    handled, last_read = (
        0,
        0,
    )  # lines whose outcome is known (rejected as read, sent per batch); the last read
    try:
        for number, event, rejection in lines:
            last_read = number
            if event is None:
                tally.summary["rejected"] += 1
                held.append((number, None, rejection))
                handled += 1
                continue
            batch.append((number, event))
            if len(batch) == args.batch:
                handled += _send_batch(sender, batch, args, tally, progress, handled, held)
                batch = []
    except _ReadFailed as failed:  # what was read is sent, then the failure names where the reading stopped
        where = f"after line {last_read}" if last_read else "before any line was read"
        unread = f"cannot read {args.file} {where}: {failed.cause.strerror or failed.cause}"
        if batch:
            try:
                _send_batch(sender, batch, args, tally, progress, handled, held)
            except (
                CliError
            ) as exc:  # the send failed too: both are said (a Stopped keeps its unsettled lines)
                exc.args = (f"{exc}; and {unread}",)
                raise
        _report([], args, tally.summary, held)
        raise CliError(unread) from None
    except BaseException:  # stopped (Ctrl-C, a failed send): the lines refused as read are said all the same
        _report([], args, tally.summary, held)
        raise
    if batch:
        _send_batch(sender, batch, args, tally, progress, handled, held)
    _report([], args, tally.summary, held)  # refused lines after the last batch


def _send_batch(
    sender: DirectSender | HttpSender,
    chunk: list[Pending],
    args: argparse.Namespace,
    tally: Tally,
    progress: Progress,
    handled: int,
    held: list[Sent],
) -> int:
    """Send one batch and report it with the lines ``held`` (what it settled before a failure too); how many lines
    it handled."""
    summary = tally.summary
    tally.in_flight = (chunk[0][0], chunk[-1][0])
    try:
        sent = sender.send(chunk)
    except Stopped as exc:  # what the batch settled before it stopped is reported, then the failure
        tally.in_flight = None
        settled = {number for number, _, _ in exc.done}
        exc.unsettled = [number for number, _ in chunk if number not in settled]
        _report(exc.done, args, summary, held)
        raise
    tally.in_flight, tally.last_line = None, chunk[-1][0]
    _report(sent, args, summary, held)
    progress.update(handled + len(chunk), f"accepted={summary['accepted']} duplicate={summary['duplicate']}")
    return len(chunk)
