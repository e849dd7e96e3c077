"""Where a CLI verb sends its work, and the small HTTP client it uses to get there.

Every verb that reads or changes state resolves one :class:`Target`, in this order:

1. ``--url URL``, else ``AGENT_SIGNAL_URL``: the HTTP API at that URL;
2. a running ``agent-signal run`` of this checkout (its stack file, producers/cli/reach/stack.py): its HTTP API;
3. ``REDIS_URL``: straight to Redis, as the operator (``--tenant`` picks the tenant); a ``--token`` (or
   ``AGENT_SIGNAL_TOKEN``) there is refused, exit 2: it was meant for the HTTP API, whose routes check it;
4. none of these: one line saying how to get a stack, exit 2.

Verbs that exist over HTTP only (the console's: producers/cli/console/) skip step 3.

The bearer credential is ``--token``, else ``AGENT_SIGNAL_TOKEN``, else the deprecated
``AGENT_SIGNAL_API_TOKEN``; a stack with no credential configured, on loopback, needs none. Whitespace around it
(the CR of ``"$(cat key.txt)"`` from a CRLF file) is dropped; one holding a space, a control character or
non-ASCII is refused naming where it came from. Failures are :class:`CliError` (one line on stderr and an exit
code, never a traceback): a URL that is not one (or holds a user name or password), a bad credential, a server that
cannot be reached, a request whose whole answer did not come within the deadline (``no answer … within N s``: the
SDK's, worker/outbox/deadline.py, so a server trickling its answer is cut off too) and a success answer that is no
JSON object (``… answered 200 without a JSON object; is that the Agent Signal API?``: another service at that URL,
a proxy's page) are exit 2; an HTTP error answer prints its ``message`` and ``field`` and is exit 1. Tokens are
sent, never printed (nor the text of a failed request, which may quote its headers).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from producers.sdk.http_door import (
    NOTHING_SENT,
    UnexpectedAnswer,
    error_code,
    json_object,
    origin,
    unexpected_answer,
)
from producers.sdk.http_door import bearer_token as sdk_bearer_token
from worker.outbox.deadline import Deadline, deadline_transport, send_within

__all__ = [
    "HTTP_TIMEOUT_S",
    "Api",
    "Busy",
    "CliError",
    "Target",
    "add_target_options",
    "bearer_token",
    "checked_url",
    "format_http_error",
    "given_value",
    "http_error_message",
    "no_such_route",
    "not_the_api",
    "objects_in",
    "quote_id",
    "resolve_target",
    "unreachable",
]

HTTP_TIMEOUT_S = 30.0
START_HINT = "is the stack running? (make run)"


class CliError(Exception):
    """A one-line failure of a verb: printed as ``agent-signal VERB: MESSAGE``, exit ``exit_code``.
    ``maybe_stored``: the request was on its way when it failed (no answer in time, a dropped connection, an answer
    that is not the API's), so what it carried may have been acted on."""

    def __init__(self, message: str, exit_code: int = 2, *, maybe_stored: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.maybe_stored = maybe_stored


class Busy(CliError):
    """A 429: the server asks to be called again in ``retry_after_s`` (its ``Retry-After``; 1 when it gives none).
    Exit 1 for a verb that does not wait for it."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, exit_code=1)
        self.retry_after_s = retry_after_s


STACK_VIA = "the stack file"  # Target.via of the stack's URL (followed by the file's path)
# A local stack answers 401 to a caller without a token once any key exists there (docs/security.md).
STACK_LOCKED_HINT = (
    "a key was created on this stack, so it needs one now: `agent-signal keys create --tenant default --role "
    "admin --redis` makes an admin key straight in the stack's Redis"
)


@dataclass(frozen=True)
class Target:
    """The HTTP API at ``url`` (with ``token``), or Redis directly when ``url`` is None."""

    url: str | None
    token: str | None = None
    via: str = ""  # where the URL came from: "--url", "AGENT_SIGNAL_URL", "the stack file PATH"

    @property
    def http(self) -> bool:
        return self.url is not None

    @property
    def from_stack(self) -> bool:
        """The URL is the running ``make run`` stack's of this checkout (its stack file)."""
        return self.via.startswith(STACK_VIA)


def add_target_options(p: argparse.ArgumentParser, *, tenant: bool = True) -> None:
    """``--url``, ``--token`` (and ``--tenant`` for direct Redis access) on a verb's parser."""
    p.add_argument(
        "--url",
        default=None,
        type=given_value("--url"),
        help="the HTTP API (default: AGENT_SIGNAL_URL, else the stack `make run` started in this checkout, "
        "else straight to REDIS_URL)",
    )
    p.add_argument(
        "--token",
        default=None,
        type=given_value("--token"),
        help="bearer API key or token (default: AGENT_SIGNAL_TOKEN, else the deprecated AGENT_SIGNAL_API_TOKEN); "
        "never printed",
    )
    if tenant:
        p.add_argument(
            "--tenant",
            default=None,
            help="the tenant to use when talking to Redis directly (default: default); over HTTP the "
            "credential decides",
        )


def given_value(flag: str) -> Callable[[str], str]:
    """argparse's type for a flag that has a default when left out: given empty or blank, it is refused (exit 2)
    rather than read as left out, which sent ``--url ''`` to the stack and ``--token ''`` with no credential."""

    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"empty; leave {flag} out for its default")
        return text

    return check


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def resolve_target(
    args: argparse.Namespace, *, tenant_is_direct: bool = True, http_only: bool = False
) -> Target:
    """The target of this invocation (module doc); raises CliError when there is none, when its URL or
    credential is unusable, or when ``--tenant`` (a direct-Redis option when ``tenant_is_direct``) is given with
    an HTTP target. With ``http_only`` the target is always an HTTP API (``REDIS_URL`` is not one)."""
    found = _http_url(args, http_only)
    if found is None:
        _refuse_token_for_redis(args)
        return Target(None)
    url, via = found
    target = Target(url, _credential(args), via)
    if tenant_is_direct and getattr(args, "tenant", None):
        raise CliError(
            f"--tenant is for direct Redis access; over HTTP ({target.via}) the credential decides"
        )
    return target


def _http_url(args: argparse.Namespace, http_only: bool) -> tuple[str, str] | None:
    """(URL, where it came from) of the HTTP target, or None for straight to ``REDIS_URL``."""
    from producers.cli.reach.stack import read_stack, stack_path

    for url, via in ((getattr(args, "url", None), "--url"), (_env("AGENT_SIGNAL_URL"), "AGENT_SIGNAL_URL")):
        if url:
            return checked_url(url, via), via
    otherwise = "" if http_only else " or REDIS_URL"
    path = stack_path()
    stack = read_stack(path)
    if stack is not None and stack.running:
        return stack.url, f"{STACK_VIA} {path}"
    if not http_only and (_env("REDIS_URL") or _env("AGENT_SIGNAL_REDIS_URL")):
        return None
    if stack is not None:
        raise CliError(
            f"the stack file {path} names process {stack.pid}, which is not running; start the stack "
            f"(make run), or give --url URL (AGENT_SIGNAL_URL){otherwise}"
        )
    raise CliError(
        f"no stack found: start one in this checkout (make run), or give --url URL (AGENT_SIGNAL_URL){otherwise}"
    )


def _refuse_token_for_redis(args: argparse.Namespace) -> None:
    """Straight to ``REDIS_URL`` there is no credential to check: the verb acts as the operator of ``--tenant``.
    A ``--token`` (or ``AGENT_SIGNAL_TOKEN``) given there meant the HTTP API, whose routes hold the roles and
    tenants: CliError (exit 2) rather than acting with rights the token does not have. (The deprecated
    ``AGENT_SIGNAL_API_TOKEN`` is also the server's own setting, set where the operator works: not refused.)"""
    for value, source in (
        (getattr(args, "token", None), "--token"),
        (_env("AGENT_SIGNAL_TOKEN"), "AGENT_SIGNAL_TOKEN"),
    ):
        if value and value.strip():
            raise CliError(
                f"{source} is for the HTTP API: give --url URL (or AGENT_SIGNAL_URL); straight to REDIS_URL "
                f"there is no credential (the verb acts as the operator of --tenant), so drop {source} for that"
            )


def _credential(args: argparse.Namespace) -> str | None:
    """The bearer credential of this invocation (module doc), checked by :func:`bearer_token`."""
    for value, source in (
        (getattr(args, "token", None), "--token"),
        (_env("AGENT_SIGNAL_TOKEN"), "AGENT_SIGNAL_TOKEN"),
        (_env("AGENT_SIGNAL_API_TOKEN"), "AGENT_SIGNAL_API_TOKEN"),
    ):
        if value:
            return bearer_token(value, source)
    return None


def bearer_token(token: str, source: str) -> str | None:
    """``token`` without the whitespace around it (None when nothing is left); CliError (exit 2) naming
    ``source``, never quoting the secret, when it holds a space, a control character or non-ASCII, which an
    ``Authorization`` header cannot carry (the SDK's check: producers/sdk/http_door.py)."""
    try:
        return sdk_bearer_token(token, source)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def checked_url(url: str, source: str) -> str:
    """``url`` when it is an http(s) URL with a host; else CliError (exit 2) naming ``source`` (``--url``,
    ``AGENT_SIGNAL_URL``), e.g. for ``http://localhost:800o``."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise CliError(f"{source} is not a valid URL ({exc}); give http://HOST:PORT") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise CliError(f"{source} must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000")
    if parsed.userinfo:  # not shown: it holds a password
        raise CliError(
            f"{source} holds a user name or password; give the credential as --token (the URL is not shown)"
        )
    if parsed.port is not None and not 1 <= parsed.port <= 65535:  # httpx parses 99999; sockets refuse it
        raise CliError(f"{source} has port {parsed.port}: a port is 1 to 65535")
    if parsed.query or parsed.fragment:
        raise CliError(
            f"{source} is the API's base URL, http://HOST:PORT[/PATH], without ?query or #fragment"
        )
    return url


def display_url(url: str) -> str:
    """``url`` without user:password, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def quote_id(value: str) -> str:
    """An id as one path segment (``chain:m1`` stays readable). The ids ``.`` and ``..`` are sent as ``%2E`` and
    ``%2E%2E``: as they are, a URL reads them as "this" and "the parent" segment (``status .`` would ask for
    ``GET /v1/events``, the list); encoded, the server looks them up as ids and answers its 404."""
    if value in (".", ".."):
        return value.replace(".", "%2E")
    return quote(value, safe=":@")


def transport_reason(exc: httpx.TransportError) -> str:
    """A few words for why a request did not get an answer."""
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.LocalProtocolError):  # its text may quote a header of ours: the credential
        return "the request could not be sent (LocalProtocolError)"
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "refused" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        return "unknown host"
    return text.splitlines()[0][:200]


def http_error_message(response: httpx.Response, *, had_token: bool) -> str:
    """``HTTP 401 unauthorized: message (field: F)`` from the ``{"error": {...}}`` body (or its text)."""
    code, message, field = "", "", None
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code, message = str(error.get("code") or ""), str(error.get("message") or "")
        field = str(error["field"]) if error.get("field") else None
    elif isinstance(body, dict) and "detail" in body:
        message = str(body["detail"])
    else:
        message = " ".join(response.text.split())[:200] or response.reason_phrase
    return format_http_error(response.status_code, code, message, field, had_token=had_token)


def no_such_route(url: str, method: str, path: str, status: int, code: str | None) -> CliError | None:
    """The line (exit 2) for the API's own 404 or 405 answer (``code``) to a route it does not have (its app words
    those ``http_404``/``http_405``; every route's own not-found is ``not_found``): a base URL with a path, or a
    server older than the CLI. None for any other answer."""
    if status not in (404, 405) or code != f"http_{status}":
        return None
    return CliError(
        f"{origin(httpx.URL(url))} {method} {path} answered HTTP {status}: the API has no such route; give its "
        "base URL (http://HOST:PORT), and a server as new as this CLI"
    )


def _api_shaped(response: httpx.Response) -> bool:
    """An error answer as the API (FastAPI) words one: a JSON object with ``error`` (or FastAPI's ``detail``)."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and ("error" in body or "detail" in body)


def format_http_error(status: int, code: str, message: str, field: str | None, *, had_token: bool) -> str:
    """One line: status, code, message, field; a 401 without a token says how to give one."""
    line = f"HTTP {status}" + (f" {code}" if code else "") + f": {message}"
    if field:
        line += f" (field: {field})"
    if status == 401 and not had_token:
        line += "; give --token KEY (or AGENT_SIGNAL_TOKEN)"
    return line


class Api:
    """JSON over HTTP for one verb; every failure is a :class:`CliError`. Each call's whole answer must come
    within ``timeout_s`` (default :data:`HTTP_TIMEOUT_S`, read when the Api is made): the SDK's deadline
    (worker/outbox/deadline.py), since httpx's own timeout is per read and a server sending a byte a second never
    trips it. A success answer must be a JSON object, as every route's is."""

    def __init__(self, target: Target, *, timeout_s: float | None = None) -> None:
        assert target.url is not None
        self.target = target
        self.url = target.url.rstrip("/")
        self.timeout_s = HTTP_TIMEOUT_S if timeout_s is None else timeout_s
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        try:
            transport = deadline_transport(self.url)
        except ValueError as exc:  # a proxy variable that is no URL: the message does not quote it
            raise CliError(str(exc)) from None
        self.client = httpx.Client(
            base_url=self.url, headers=headers, timeout=self.timeout_s, transport=transport
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    @overload
    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        missing_ok: Literal[False] = False,
        require: tuple[str, ...] = (),
    ) -> dict[str, Any]: ...

    @overload
    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        missing_ok: bool,
        require: tuple[str, ...] = (),
    ) -> dict[str, Any] | None: ...

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        missing_ok: bool = False,
        require: tuple[str, ...] = (),
    ) -> dict[str, Any] | None:
        """The answer's JSON object, holding each name of ``require``; None for a 404 when ``missing_ok``."""
        deadline = Deadline(self.timeout_s)
        request = self.client.build_request(method, path, json=body, params=params)
        try:
            with deadline.applied():
                response = send_within(self.client, request, deadline)
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc, timeout_s=self.timeout_s) from None
        if response.status_code == 404 and not _api_shaped(response):  # a page of another server, not ours
            raise CliError(
                f"{origin(httpx.URL(self.url))} {method} {response.request.url.path} answered HTTP 404 without the "
                "API's error object; is that the Agent Signal API?"
            )
        status, path = response.status_code, response.request.url.path
        if (no_route := no_such_route(self.url, method, path, status, error_code(response))) is not None:
            raise no_route
        if response.status_code == 404 and missing_ok:
            return None
        if response.status_code >= 400:
            line = http_error_message(response, had_token=bool(self.target.token))
            if response.status_code == 401 and not self.target.token and self.target.from_stack:
                line += f" ({STACK_LOCKED_HINT})"
            if response.status_code == 429:
                wait = response.headers.get("retry-after", "")
                raise Busy(line, int(wait) if wait.isdigit() else 1)
            raise CliError(line, exit_code=1)
        try:
            answer = json_object(response, "a JSON object")
            if missing := [repr(name) for name in require if name not in answer]:
                raise unexpected_answer(response, ", ".join(missing))
        except UnexpectedAnswer as exc:  # another service at that URL, or a proxy's page
            raise CliError(str(exc), maybe_stored=True) from None
        return answer

    def objects(self, answer: dict[str, Any], key: str, method: str, path: str) -> list[dict[str, Any]]:
        """:func:`objects_in` ``answer`` (the answer to ``method path``); CliError (exit 2) naming what answered
        when ``answer[key]`` is no list of objects."""
        try:
            return objects_in(answer, key)
        except ValueError as exc:
            raise not_the_api(self.url, method, path, f"with {exc}") from None


def objects_in(answer: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """``answer[key]``, the list of objects a listing holds (empty when absent or null); a ValueError saying
    ``'key' not a list of objects`` when it is anything else."""
    items = answer.get(key)
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"{key!r} not a list of objects")
    return items


def not_the_api(url: str, method: str, path: str, what: str) -> CliError:
    """``http://host:port GET /v1/x answered 200 <what>; is that the Agent Signal API?`` (exit 2), worded as
    the SDK words an answer without a JSON object (producers/sdk/http_door.py ``unexpected_answer``), for what a
    ``GET``'s success (a 200) held."""
    base = httpx.URL(url)
    full_path = httpx.URL(url.rstrip("/") + path).path
    return CliError(f"{origin(base)} {method} {full_path} answered 200 {what}; is that the Agent Signal API?")


def unreachable(url: str, exc: httpx.TransportError, *, timeout_s: float | None = None) -> CliError:
    """The one-line error (exit 2) for a request without an answer: "cannot reach" the server when nothing was
    sent; "no answer … within N s" for a request sent and then timed out (the server is up, but slow or stuck: no
    hint to start a stack). A request that was sent may have been acted on (``maybe_stored``)."""
    sent = not isinstance(exc, NOTHING_SENT)
    if sent and isinstance(exc, httpx.TimeoutException):
        within = f" within {timeout_s:g} s" if timeout_s is not None else " in time"
        return CliError(f"no answer from {display_url(url)}{within}", maybe_stored=True)
    # a proxy that refused the tunnel (its credentials, its rules) is no stack to start
    hint = (
        "check the proxy (HTTP_PROXY, HTTPS_PROXY, NO_PROXY)"
        if isinstance(exc, httpx.ProxyError)
        else START_HINT
    )
    return CliError(f"cannot reach {display_url(url)} ({transport_reason(exc)}); {hint}", maybe_stored=sent)
