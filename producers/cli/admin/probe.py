"""``agent-signal probe worker|web`` and ``agent-signal drain``: what Kubernetes and compose run inside a pod.

* ``probe worker [--max-age-s N] [--liveness]``: reads the heartbeat file the worker's main process writes
  (``AGENT_SIGNAL_HEARTBEAT_FILE``, worker/runtime/heartbeat_file.py); no broker, no Redis. Exit 0 when the beat is
  fresh and, unless ``--liveness``, the beat says ready (the worker has connected to its broker since it started)
  and the worker is not draining; else 1. One line on stderr either way.
* ``probe web [--timeout-s N] [--without-broker]``: ``GET /readyz`` on this pod's own port over loopback. A deployment keeps its
  operations routes behind a credential (``AGENT_SIGNAL_OPS_OPEN=never``, the default), so the probe sends a bearer:
  ``AGENT_SIGNAL_TOKEN``, else the bootstrap key of its own environment (an exec probe sees the container's
  environment; an httpGet probe could not read a Secret). Exit 0 on 200, else 1: an error answer worded as every
  verb words one (``HTTP 401 unauthorized: …``), a 503 with the checks that failed, and an answer that has not all
  come within ``--timeout-s`` (the SDK's whole-answer deadline: a /readyz trickling its answer is cut off too)
  ``no answer from URL within N s``. ``--without-broker`` (a deployment's readiness probe): a 503 whose checks
  fail on the broker alone is exit 0, since the door stores events while the broker is away and the reconcile
  sweep sends their drains once it is back; one broker restart took every web pod out of its Service.
* ``drain [--timeout-s N]``: the worker's preStop hook. Sets the drain flag (readiness goes false at once),
  then asks this worker's node, named in its heartbeat file, to cancel its consumer of the task queue
  (Celery remote control through the broker), so it takes no new drain while the SIGTERM that follows lets
  the running ones finish (Celery's warm shutdown). Exit 0 when the node confirmed (or is not consuming
  yet), 1 when it did not answer: Kubernetes then sends SIGTERM anyway, which stops consuming too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from producers.cli.inputs import positive_seconds, tcp_port
from producers.cli.reach.target import (
    CliError,
    bearer_token,
    http_error_message,
    transport_reason,
    unreachable,
)
from producers.sdk.http_door import NOTHING_SENT
from worker.outbox.deadline import Deadline, deadline_transport, send_within
from worker.runtime import heartbeat_file

__all__ = ["add_probe_commands", "drain", "probe_web", "probe_worker", "readyz_url"]

Cancel = Callable[[str, str], list[dict[str, Any]]]  # (queue, node) -> Celery's control replies
Reach = Callable[[], str | None]  # None: the broker answers; else why not, in one line

# The flags' bounds (producers/cli/inputs.py positive_seconds: finite and above 0 as well). An hour outlasts any
# probe or preStop hook; beyond a few days (``inf`` above all) a timeout overflows the clock arithmetic below it.
TIMEOUT_MAX_S = 3600.0
MAX_AGE_MAX_S = 7 * 24 * 3600.0


def probe_worker(
    path: str | None, max_age_s: float, now_s: float, *, liveness: bool = False
) -> tuple[int, str]:
    """(exit code, line) for the heartbeat file at ``path``."""
    if not path:
        return 1, "AGENT_SIGNAL_HEARTBEAT_FILE is not set: the worker writes no heartbeat to probe"
    verdict = heartbeat_file.check(path, max_age_s, now_s, ready=not liveness)
    return (0 if verdict.ok else 1), verdict.reason


def readyz_url(host: str, port: int) -> str:
    """This pod's own ``/readyz``: 127.0.0.1 when the app binds every address, else the host it binds."""
    if host.strip("[]") in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}/readyz"


def probe_web(
    url: str,
    token: str | None,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
    *,
    without_broker: bool = False,
) -> tuple[int, str]:
    """(exit code, line) for ``GET url`` with ``token`` as the bearer (the whitespace around it dropped; one
    holding a space or a control character is not sent, and the line says so without quoting it), its whole
    answer within ``timeout_s``. ``without_broker``: a 503 whose checks name the broker alone is ready (the door
    stores events while the broker is away, and the reconcile sweep sends their drains once it is back)."""
    try:
        bearer = bearer_token(token, "AGENT_SIGNAL_TOKEN or the bootstrap key") if token else None
    except CliError as exc:
        return 1, f"{url}: not probed: {exc}"
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    deadline = Deadline(timeout_s)
    try:
        with httpx.Client(timeout=timeout_s, transport=transport or deadline_transport(url)) as client:
            with deadline.applied():
                response = send_within(client, client.build_request("GET", url, headers=headers), deadline)
    except httpx.TransportError as exc:  # transport_reason never quotes the request's headers
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, NOTHING_SENT):
            return 1, str(unreachable(url, exc, timeout_s=timeout_s))  # "no answer from URL within N s"
        return 1, f"{url}: {type(exc).__name__}: {transport_reason(exc)}"
    except httpx.HTTPError as exc:
        return 1, f"{url}: {type(exc).__name__}"
    except ValueError as exc:  # a proxy variable that is no URL (deadline_transport; not quoted)
        return 1, f"{url}: not probed: {exc}"
    if response.status_code == 200:
        return 0, f"{url}: ready"
    if without_broker and _failed_checks(response) == ["broker"]:
        return 0, f"{url}: ready without the broker ({_not_ready(response)}): events are stored meanwhile"
    return 1, f"{url}: {_not_ready(response)}"


def _failed_checks(response: httpx.Response) -> list[str] | None:
    """The checks a 503 of /readyz names as failed; None when the answer shows none (no credential, or no /readyz
    answer at all)."""
    try:
        body = response.json()
    except ValueError:
        return None
    checks = body.get("checks") if isinstance(body, dict) and response.status_code == 503 else None
    if not isinstance(checks, dict):
        return None
    return sorted(str(name) for name, value in checks.items() if str(value).startswith("error"))


def _not_ready(response: httpx.Response) -> str:
    """``HTTP 503: not ready (redis: error: ConnectionError, broker: ok)`` for /readyz's own answer (its checks
    when the bearer may see them); any other answer as every verb words one (``HTTP 401 unauthorized: …``, without
    the verbs' hint to give ``--token``: the probe has no such flag)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "ready" in body and "error" not in body:
        checks = body.get("checks")
        listed = (
            ", ".join(f"{name}: {value}" for name, value in checks.items())
            if isinstance(checks, dict)
            else ""
        )
        return f"HTTP {response.status_code}: not ready" + (f" ({listed})" if listed else "")
    return http_error_message(response, had_token=True)


def drain(path: str | None, queue: str, cancel: Cancel, reach: Reach = lambda: None) -> tuple[int, str]:
    """Set the drain flag beside the heartbeat file ``path``, then ``cancel(queue, node)`` for its node. A broker
    that does not answer (``reach``) is exit 2 before the flag: a worker is never left unready and consuming."""
    if not path:
        return 1, "AGENT_SIGNAL_HEARTBEAT_FILE is not set: nothing names this pod's worker"
    unreachable = reach()
    if unreachable is not None:
        return 2, f"the broker did not answer ({unreachable}); the drain flag is not set (check BROKER_URL)"
    heartbeat_file.mark_draining(path)
    try:
        beat = heartbeat_file.read(path)
    except (OSError, ValueError) as exc:
        return 1, f"drain flag set; {exc}"
    if beat is None or not beat.ready:  # not connected to its broker since its start: nothing to cancel
        return 0, "drain flag set; the worker has not connected to its broker yet, so it is not consuming"
    replies = cancel(queue, beat.node)
    for reply in replies:
        answer = reply.get(beat.node)
        if isinstance(answer, dict) and "ok" in answer:
            return 0, f"{beat.node}: {answer['ok']}"
        if isinstance(answer, dict) and "error" in answer:
            return 1, f"{beat.node}: {answer['error']}"
    return 1, f"drain flag set; {beat.node} did not confirm cancelling its consumer of {queue!r}"


def _celery_control(settings: Any, timeout_s: float) -> tuple[Cancel, Reach]:
    """The broker calls ``drain`` makes, their app made now: settings that name no broker (no ``REDIS_URL``) raise
    here, before ``drain`` sets its flag, so the worker is left as it was rather than unready but consuming; a
    broker that does not answer is found by ``reach``, before the flag too. A broker lost between the two is the
    node's error line (the flag stays: its worker reads unready, as one whose broker went away)."""
    from kombu.exceptions import OperationalError

    from worker.runtime.app import create_app
    from worker.telemetry.log_privacy import describe_error

    app = create_app(settings)

    def reach() -> str | None:
        try:
            with app.connection_for_write() as connection:
                connection.ensure_connection(
                    max_retries=1, interval_start=0, interval_step=0, timeout=timeout_s
                )
        except (OperationalError, OSError) as exc:
            app.close()
            return describe_error(exc)
        return None

    def cancel(queue: str, node: str) -> list[dict[str, Any]]:
        try:
            replies = app.control.cancel_consumer(queue, destination=[node], reply=True, timeout=timeout_s)
            return list(replies or [])
        except (OperationalError, OSError) as exc:
            return [{node: {"error": f"the broker did not answer ({describe_error(exc)})"}}]
        finally:
            app.close()

    return cancel, reach


def _stack_readyz() -> str | None:
    """Without ``PORT`` (a pod always sets it), the ``/readyz`` of the ``make run`` stack of this checkout when
    one runs: it asked port 8000 there, whatever port the stack took."""
    if os.environ.get("PORT") or os.environ.get("AGENT_SIGNAL_PORT"):
        return None
    from producers.cli.reach.stack import read_stack

    stack = read_stack()
    return f"{stack.url.rstrip('/')}/readyz" if stack is not None and stack.running else None


def _token(door: Any) -> str | None:
    """``AGENT_SIGNAL_TOKEN``, else the bootstrap key (or its deprecated alias) of this environment."""
    token = os.environ.get("AGENT_SIGNAL_TOKEN")
    if token:
        return token
    if door.bootstrap_key is not None and door.bootstrap_key.get_secret_value():
        return str(door.bootstrap_key.get_secret_value())
    return door.api_token or None


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def cmd_probe(args: argparse.Namespace) -> int:
    from worker.settings import load_settings

    settings = load_settings()
    if args.probe_target == "worker":
        max_age_s = args.max_age_s
        if max_age_s is None:  # not `or`: a flag given is the flag's, whatever its value
            max_age_s = heartbeat_file.default_max_age_s(settings.reconcile_interval_s)
        code, line = probe_worker(settings.heartbeat_file, max_age_s, time.time(), liveness=args.liveness)
    else:
        from producers.http.settings import door_settings

        door = door_settings(settings)
        url = _stack_readyz() or readyz_url(door.host, tcp_port(door.port))
        code, line = probe_web(url, _token(door), args.timeout_s, without_broker=args.without_broker)
    _say(line)
    return code


def cmd_drain(args: argparse.Namespace) -> int:
    from producers.cli.reach.stack import join_stack
    from worker.settings import load_settings

    settings, _ = join_stack(load_settings())  # as `worker` does: on the make run stack of this checkout too
    cancel, reach = _celery_control(settings, args.timeout_s)
    code, line = drain(settings.heartbeat_file, settings.queue_name, cancel, reach)
    _say(line)
    return code


def add_probe_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``probe worker``, ``probe web`` and ``drain``."""
    p = sub.add_parser("probe", help="health probes run inside a pod or container (exit 0 healthy, 1 not)")
    psub = p.add_subparsers(dest="probe_target", required=True, metavar="TARGET")
    w = psub.add_parser("worker", help="the worker's heartbeat file (AGENT_SIGNAL_HEARTBEAT_FILE); no broker")
    w.add_argument(
        "--max-age-s",
        type=positive_seconds(MAX_AGE_MAX_S),
        default=None,
        help="oldest acceptable beat, seconds above 0, at most 604800 (7 days) (default: 4 x "
        "AGENT_SIGNAL_RECONCILE_INTERVAL_S, the beat's period)",
    )
    w.add_argument(
        "--liveness",
        action="store_true",
        help="only a fresh beat: a worker still connecting to its broker, or draining, counts as healthy",
    )
    web = psub.add_parser("web", help="GET /readyz on this host's PORT over loopback")
    web.add_argument(
        "--timeout-s",
        type=positive_seconds(TIMEOUT_MAX_S),
        default=3.0,
        help=f"seconds to wait for the answer, above 0 and at most {TIMEOUT_MAX_S:g} (default 3)",
    )
    web.add_argument(
        "--without-broker",
        action="store_true",
        help="ready when only the broker is unreachable: the door stores events meanwhile (needs the checks: "
        "AGENT_SIGNAL_TOKEN or the bootstrap key)",
    )
    p.set_defaults(func=cmd_probe)

    d = sub.add_parser(
        "drain", help="preStop: readiness false, and this pod's worker stops taking new drains"
    )
    d.add_argument(
        "--timeout-s",
        type=positive_seconds(TIMEOUT_MAX_S),
        default=5.0,
        help=f"seconds to wait for the worker's answer, above 0 and at most {TIMEOUT_MAX_S:g} (default 5)",
    )
    d.set_defaults(func=cmd_drain)
