"""Redis and broker URLs: what is wrong with one (named by its part, never quoted: it may hold a password), and a
redis-py URL spelled for kombu when the broker is the store's own Redis. Pure functions of the URL's text; the
settings (worker/settings.py) check with them, the Celery app (worker/runtime/app.py) builds its broker with them.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

__all__ = [
    "KOMBU_REDIS_OPTIONS",
    "broker_url_problem",
    "kombu_options_for",
    "kombu_url_for",
    "redis_url_option_problem",
    "redis_url_problem",
]


def redis_url_problem(url: str) -> str | None:
    """What is wrong with a Redis URL's scheme or database, or None (the rest is redis-py's to read)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        return f"must start with redis://, rediss:// or unix:// (got {parts.scheme or 'no scheme'!r})"
    encode = "a / in the password must be written %2F, a ? %3F, a # %23"  # none of the URL is ever quoted
    if "@" in parts.fragment or (parts.scheme != "unix" and not parts.hostname):
        return f"its host is missing (redis://host:6379/0); {encode}"  # the password's tail read as query
    if (
        parts.scheme == "unix" and "@" in parts.path
    ):  # redis-py would read the socket path from the password on
        return "a / in the password must be written %2F (unix://:password@/path/to/redis.sock)"
    databases = [value for name, value in parse_qsl(parts.query) if name == "db"]
    if parts.scheme != "unix" and parts.path not in ("", "/"):
        databases.append(parts.path[1:])
    if any(not database.isdigit() for database in databases):  # never quoted: a password may run into it
        return (
            "its database (after the last /, or ?db=) must be a number, as in redis://host:6379/0; a / in the "
            "password must be written %2F"
        )
    try:
        port = parts.port
    except ValueError:
        port = 0
    if parts.scheme != "unix" and (port == 0 or (port is not None and not 1 <= port <= 65535)):
        return (
            f"its port (after the host's :) must be a number 1 to 65535, as in redis://host:6379/0; {encode}"
        )
    return None


def redis_url_option_problem(url: str) -> str | None:
    """An option of a ``redis://``, ``rediss://`` or ``unix://`` URL's query that redis-py would pass to its
    connection, which has no parameter of that name (a TypeError when the first connection is made), or None."""
    import inspect  # here, not at import: the CLI starts without redis-py's connection module

    from redis import connection

    scheme = urlsplit(url).scheme
    classes = {
        "redis": connection.Connection,
        "rediss": connection.SSLConnection,
        "unix": connection.UnixDomainSocketConnection,
    }
    if scheme not in classes:
        return None
    known = set(connection.URL_QUERY_ARGUMENT_PARSERS)
    for klass in classes[scheme].__mro__:
        init = vars(klass).get("__init__")
        if init is not None:
            known |= set(inspect.signature(init).parameters) - {"self", "args", "kwargs"}
    query = urlsplit(url).query
    unknown = sorted({name for name, _ in parse_qsl(query)} - known)
    if not unknown:
        return None
    if "@" in query or not OPTION_NAME.fullmatch(
        unknown[0]
    ):  # a password's ? read as the query: never quoted
        return "its query (after ?) holds an option redis-py does not know; a ? in the password must be written %3F"
    return f"redis-py knows no option {unknown[0]!r} (in the URL's query after ?), e.g. socket_timeout=5"


OPTION_NAME = re.compile(r"[a-z_]{1,40}")


URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def broker_url_problem(url: str) -> str | None:
    """What is wrong with a broker URL's scheme (kombu has no transport of that name), or None; it names the
    scheme alone, never the rest of the URL, which may hold a password."""
    from kombu.transport import TRANSPORT_ALIASES  # here, not at import: the CLI starts without the engine

    scheme, found, _ = url.partition("://")
    if not found or not URL_SCHEME.fullmatch(scheme):
        return "not a URL with a scheme, e.g. amqp://host// or redis://host:6379/0"
    if scheme.partition("+")[0] not in TRANSPORT_ALIASES:  # kombu's own reading: redis+socket is redis
        known = ", ".join(sorted({name.lower() for name in TRANSPORT_ALIASES}))
        return f"unknown scheme {scheme!r} (one of {known})"
    return None


# The redis-py options of a Redis URL's query that kombu's Redis transport reads as transport options (kombu's
# Connection refuses them in its URL: a TypeError on the first connection, for a broker that is the store's Redis).
KOMBU_REDIS_OPTIONS = (
    "client_name",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "max_connections",
    "health_check_interval",
    "retry_on_timeout",
)


def _split_query(redis_url: str) -> tuple[str, list[tuple[str, str]]]:
    base, _, query = redis_url.partition("?")
    return base, parse_qsl(query, keep_blank_values=True)


def kombu_url_for(redis_url: str) -> str:
    """Spell a redis-py URL the way kombu wants it: ``unix://`` becomes ``redis+socket://`` (its ``db`` the
    virtual host), a ``?db=`` the path's database, a ``?username=``/``?password=`` the URL's user part (kombu
    would log in without them), and the query keeps only kombu's ``ssl_*`` options (the others are
    :func:`kombu_options_for`'s)."""
    base, query = _split_query(redis_url)
    named = dict(query)
    db = named.get("db", "")
    kept = urlencode([(name, value) for name, value in query if name.startswith("ssl_")])
    if base.startswith("unix://"):
        return f"redis+socket://{base[len('unix://') :]}" + (f"?virtual_host={db}" if db else "")
    parts = urlsplit(base)
    if db:  # redis-py reads ?db= before the path's
        parts = parts._replace(path=f"/{db}")
    if ("username" in named or "password" in named) and "@" not in parts.netloc:
        user = quote(named.get("username", ""), safe="")
        secret = f":{quote(named['password'], safe='')}" if "password" in named else ""
        parts = parts._replace(netloc=f"{user}{secret}@{parts.netloc}")
    return urlunsplit(parts) + (f"?{kept}" if kept else "")


def kombu_options_for(redis_url: str) -> dict[str, Any]:
    """The broker transport options a Redis URL's query names (``?socket_timeout=5``), typed as redis-py types
    them: what kombu reads from its transport options instead of its URL."""
    from redis.connection import URL_QUERY_ARGUMENT_PARSERS  # here, not at import: the CLI starts without it

    options: dict[str, Any] = {}
    for name, value in _split_query(redis_url)[1]:
        if name in KOMBU_REDIS_OPTIONS:
            parse = URL_QUERY_ARGUMENT_PARSERS.get(name)
            options[name] = parse(value) if callable(parse) else value
    return options
