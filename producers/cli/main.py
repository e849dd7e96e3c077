"""``agent-signal``: the command line. ``agent-signal --help`` lists the commands; each has ``--help``.

Settings come from the environment (docs/settings.md). Logs go to stderr; machine-readable output to stdout.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Mapping, Sequence

import httpx

from producers.cli.admin.keys import add_keys_command
from producers.cli.admin.migrate import add_migrate_command
from producers.cli.admin.probe import add_probe_commands
from producers.cli.admin.pseudonym import add_pseudonym_command
from producers.cli.admin.tenants import add_tenants_command
from producers.cli.console import add_console_commands
from producers.cli.console.api import positive_int
from producers.cli.enqueue import add_enqueue_command
from producers.cli.inputs import any_bytes, check_text_arguments, tcp_port
from producers.cli.inspection import add_inspection_commands
from producers.cli.reach.direct import stack_settings
from producers.cli.reach.target import CliError, transport_reason
from producers.cli.version import VersionAction

__all__ = ["main"]

SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a command whose reader went away
LOGLEVEL_HELP = (
    "the log level: DEBUG, INFO, WARNING (WARN), ERROR or CRITICAL (FATAL), in any case (default INFO)"
)
# --loglevel's names (any case) → the name passed on: those both the stdlib's logging and Celery's --loglevel take,
# and the stdlib's WARN, which the web took (Celery does not: it becomes WARNING).
LOG_LEVELS = {
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "WARNING": "WARNING",
    "WARN": "WARNING",
    "ERROR": "ERROR",
    "CRITICAL": "CRITICAL",
    "FATAL": "FATAL",
}


def log_level(text: str) -> str:
    """argparse's type for ``--loglevel``: a level's name in any case, upper-cased (else a usage error naming the
    flag, exit 2, where a ValueError from logging's setLevel used to end the command)."""
    level = LOG_LEVELS.get(text.upper())
    if level is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level: give DEBUG, INFO, WARNING, ERROR or CRITICAL"
        )
    return level


# ---- inspect, status, dlq ----------------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    """One worker: on ``REDIS_URL``, else on the running ``make run`` stack of this checkout (stack.py)."""
    from click.exceptions import ClickException

    from producers.cli.reach.stack import join_stack
    from worker.runtime.main import run_worker

    settings, joined = join_stack(stack_settings())
    if joined is not None:
        print(f"agent-signal worker: {joined}", file=sys.stderr, flush=True)
    try:
        return run_worker(
            settings, concurrency=args.concurrency, loglevel=args.loglevel, extra_argv=args.celery_flags
        )
    except ClickException as exc:  # Celery's parser refused a flag given after --: its one line names it
        raise CliError(f"celery worker: {exc.format_message()}") from None


def cmd_web(args: argparse.Namespace) -> int:
    from producers.http.serve import serve_web
    from producers.http.settings import door_settings

    settings = stack_settings()
    tcp_port(door_settings(settings).port)  # PORT=99999 is one line here, not an OverflowError from bind()
    return serve_web(settings, loglevel=args.loglevel)


def cmd_run(args: argparse.Namespace) -> int:
    from producers.cli.run import run_stack

    return run_stack(examples=args.examples, replay=not args.no_replay)


def cmd_route(args: argparse.Namespace) -> int:
    from producers.cli.route import run_route

    return run_route(args.config, args.request, batch=args.batch, check=args.check, protocol=args.protocol)


def cmd_functions(args: argparse.Namespace) -> int:
    from producers.cli.functions import run_check, run_simulate

    if args.functions_command == "check":
        return run_check(args.directory)
    return run_simulate(args.functions, args.script)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-signal", description="Agent Signal: out-of-band control signals."
    )
    parser.add_argument(
        "--version", action=VersionAction, help="print the version and the code's revision, and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_process_commands(sub)
    add_enqueue_command(sub)
    _add_route_command(sub)
    _add_functions_command(sub)
    add_inspection_commands(sub)
    add_console_commands(sub)
    add_keys_command(sub)
    add_tenants_command(sub)
    add_probe_commands(sub)
    add_migrate_command(sub)
    add_pseudonym_command(sub)
    _describe_from_help(parser)
    return parser


def _describe_from_help(parser: argparse.ArgumentParser) -> None:
    """A command's own ``--help`` says what it does: each subcommand without a description gets its line of the
    command list (``agent-signal web --help`` said only its usage and options)."""
    for action in parser._actions:  # argparse keeps the subcommands' help lines on the subparsers action
        if isinstance(action, argparse._SubParsersAction):
            for listed in action._choices_actions:
                command = action.choices[listed.dest]
                if command.description is None and listed.help:
                    command.description = listed.help
                _describe_from_help(command)


def _add_process_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``run``, ``worker``, ``web``: the long-running processes."""
    p = sub.add_parser(
        "run", help="the whole stack: embedded Redis (if REDIS_URL unset), a worker, the web app"
    )
    p.add_argument(
        "--examples", type=any_bytes, default="examples/events.jsonl", help="events to replay once at start"
    )
    p.add_argument("--no-replay", action="store_true", help="do not replay the examples")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("worker", help="one Celery worker process (Procfile: worker)")
    p.add_argument(
        "--concurrency",
        type=positive_int,
        default=None,
        help="child processes, 1 or more (AGENT_SIGNAL_WORKER_CONCURRENCY)",
    )
    p.add_argument("--loglevel", type=log_level, default="INFO", metavar="L", help=LOGLEVEL_HELP)
    p.add_argument(
        "celery_flags",
        nargs="*",
        type=any_bytes,
        metavar="-- CELERY_FLAGS",
        help="`celery worker` flags after `--`, added last so they win (e.g. -- --concurrency 3 -E -n w1@%%h)",
    )
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("web", help="the HTTP API on HOST:PORT (Procfile: web)")
    p.add_argument("--loglevel", type=log_level, default="INFO", metavar="L", help=LOGLEVEL_HELP)
    p.set_defaults(func=cmd_web)


def _add_route_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "route", help="route chat requests with a vLLM Semantic Router config (no server needed)"
    )
    p.add_argument("--config", required=True, type=any_bytes, help="the router YAML")
    p.add_argument(
        "request",
        nargs="?",
        type=any_bytes,
        metavar="REQUEST.json",
        help="REQUEST.json (a chat request or {request, protocol, externalSignals}) or -",
    )
    p.add_argument(
        "--batch",
        type=any_bytes,
        metavar="REQUESTS.jsonl",
        help="one {request, protocol?, externalSignals?} per line",
    )
    p.add_argument(
        "--check", action="store_true", help="only validate the config (exit 2, one error per line)"
    )
    p.add_argument(
        "--protocol", default="openai-chat", help="protocol when a request does not say (default openai-chat)"
    )
    p.set_defaults(func=cmd_route)


def _add_functions_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``functions check`` and ``functions simulate``."""
    p = sub.add_parser(
        "functions", help="rolebox function definitions: check them, simulate a session offline"
    )
    fsub = p.add_subparsers(dest="functions_command", required=True, metavar="SUBCOMMAND")
    f = fsub.add_parser("check", help="validate every *.md definition in DIR (exit 2, one error per line)")
    f.add_argument(
        "directory",
        type=any_bytes,
        metavar="DIR",
        help="the folder of definitions (*.md), e.g. examples/functions",
    )
    f = fsub.add_parser(
        "simulate",
        help="run definitions against STEPS.jsonl; one JSON line per step",
        description=(
            'Steps, one JSON object a line: {"activate": NAME}, {"deactivate": NAME}, '
            '{"signal": {"type", "payload"?, "nowMs"?}}, {"tool": {"name", "args"?, "output"?}}, '
            '{"artifact": {"name", "content"}}, {"turn": {"userMessaged"}}, {"idle": {"nowMs"?, '
            '"lastTwoOutputsIdentical"?, "modelAskedQuestion"?}}, {"set": {"key", "value"}}. nowMs is Unix ms: when '
            "a signal happens, and 'now' for the blocked backstop at idle; a signal without one runs at the last "
            "nowMs a step gave (else the wall clock), an idle without one at the wall clock. "
            "See docs/control-signals.md."
        ),
    )
    f.add_argument(
        "--functions",
        required=True,
        type=any_bytes,
        metavar="DIR",
        help="the folder of definitions (*.md) to run, as `functions check` reads it",
    )
    f.add_argument("--script", required=True, type=any_bytes, metavar="STEPS.jsonl", help="'-' for stdin")
    p.set_defaults(func=cmd_functions)


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, except that an argument no parser knows is refused by the verb's own parser: its
    usage line lists the verb's flags, where the top level's said only ``COMMAND ...`` (``runs list --bogus``)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        given = sys.argv[1:] if argv is None else list(argv)
        _verb_parser(parser, given).error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def _verb_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the verb ``argv`` names (``runs list`` → the ``list`` parser under ``runs``)."""
    current = parser
    for token in argv:
        groups = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if groups and token in groups[0].choices:
            current = groups[0].choices[token]
    return current


# The variables a verb over HTTP reads itself (worker/settings.py OTHER_ENV_NAMES has them too); the settings'
# own names are checked by every process that loads them, which such a verb does not.
CLI_ENV_NAMES = ("AGENT_SIGNAL_URL", "AGENT_SIGNAL_TOKEN")


def misspelled_cli_names(environ: Mapping[str, str]) -> list[str]:
    """A line per variable that is one of :data:`CLI_ENV_NAMES` misspelled (``AGENT_SIGNAL_TOKN``) while the name
    itself is unset: the verb would go on without it, and its 401 would not say why."""
    lines = []
    for name in CLI_ENV_NAMES:
        if name in environ:
            continue
        close = [
            given
            for given in environ
            if given.upper().startswith("AGENT_SIGNAL_")
            and given != name
            and difflib.SequenceMatcher(None, given.upper(), name).ratio()
            >= 0.92  # one letter off; not API_TOKEN (0.9)
        ]
        lines += [f"{given} is set, {name} is not: did you mean {name}?" for given in sorted(close)]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    verb = _verb(args)
    for line in misspelled_cli_names(os.environ):
        print(f"agent-signal {verb}: warning: {line}", file=sys.stderr)
    try:
        check_text_arguments(parser, args)  # bytes that are not UTF-8: one line naming the flag or argument
        code = int(args.func(args))
        sys.stdout.flush()  # here, not at exit: a reader gone meanwhile is a BrokenPipeError we can handle
        return code
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        return 130
    except CliError as exc:
        print(f"agent-signal {verb}: {exc}", file=sys.stderr)
        return exc.exit_code
    except httpx.TransportError as exc:  # a request outside the verbs' own handling: still one line
        print(
            f"agent-signal {verb}: cannot reach the server ({transport_reason(exc)}); is the stack running? "
            "(make run)",
            file=sys.stderr,
        )
        return 2
    except Exception as exc:  # a clear one-line error, never a stack trace, for operator mistakes
        from redis import exceptions as redis_errors

        from worker.settings import SettingsError

        # redis-py's texts name the host and port, or the server's refusal, never a password
        if type(exc) in (redis_errors.ConnectionError, redis_errors.TimeoutError):  # not its subclasses
            print(f"agent-signal {verb}: cannot reach the store: {exc}; check REDIS_URL", file=sys.stderr)
            return 2
        if isinstance(exc, redis_errors.AuthenticationError):
            print(
                f"agent-signal {verb}: the store refused the login: {exc}; check REDIS_URL", file=sys.stderr
            )
            return 2
        if isinstance(exc, SettingsError | ValueError | ConnectionError | OSError | httpx.InvalidURL) or type(
            exc
        ).__module__.startswith("redis"):
            # what redis-py says of a URL it could not use names no variable: say which one holds it
            said = str(exc)
            if any(words in said for words in ("DB index", "connection URL", "Redis URL")):
                said = said.rstrip(".") + "; check REDIS_URL"
            print(f"agent-signal {verb}: {type(exc).__name__}: {said}", file=sys.stderr)
            return 2
        raise


def _verb(args: argparse.Namespace) -> str:
    """The words of the verb run (``dlq list``), for its error lines."""
    return " ".join(
        v
        for v in (
            args.command,
            getattr(args, "dlq_command", None),
            getattr(args, "runs_command", None),
            getattr(args, "scopes_command", None),
            getattr(args, "events_command", None),
            getattr(args, "receipts_command", None),
            getattr(args, "keys_command", None),
            getattr(args, "tenants_command", None),
            getattr(args, "outbox_command", None),
            getattr(args, "probe_target", None),
            getattr(args, "migrate_command", None),
            getattr(args, "functions_command", None),
        )
        if v
    )


def _reader_gone() -> int:
    """stdout's reader closed the pipe (``| head``): the rest of the output goes to /dev/null, quietly, and the
    exit code is the shell's for a command stopped by SIGPIPE (128 + 13), as ``yes | head`` reports it. The
    recipe of the Python docs (signal module, "Note on SIGPIPE"): Python would otherwise fail flushing at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return SIGPIPE_EXIT
