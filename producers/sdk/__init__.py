"""The Python SDK: Producer (straight to Redis and the broker), HttpProducer (over HTTP), SessionClient (agent runtimes), and the dead-letter operations the CLI and the HTTP API share."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from producers.lazy_names import install as _install

if _TYPE_CHECKING:
    from producers.sdk.http_door import NoAnswer, UnexpectedAnswer
    from producers.sdk.producer import HttpProducer, Producer
    from producers.sdk.session_client import SessionClient

__all__ = ["HttpProducer", "NoAnswer", "Producer", "SessionClient", "UnexpectedAnswer"]

# imported when first asked for, as producers/__init__.py does: the CLI's HTTP commands import one module of here
_HOMES = {
    "HttpProducer": "producers.sdk.producer",
    "NoAnswer": "producers.sdk.http_door",
    "Producer": "producers.sdk.producer",
    "SessionClient": "producers.sdk.session_client",
    "UnexpectedAnswer": "producers.sdk.http_door",
}


_install(globals(), _HOMES)
