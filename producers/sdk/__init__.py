"""The Python SDK: Producer (straight to Redis and the broker), HttpProducer (over HTTP), SessionClient (agent runtimes), and the dead-letter operations the CLI and the HTTP API share."""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

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


def _lazy(name: str) -> _Any:
    """The module's ``__getattr__`` (PEP 562): a name of ``_HOMES`` imported when first asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


# Set by name, not defined as ``def __getattr__``: mypy reads a module-level __getattr__ as "any name exists" and
# then let ``from producers import HttpProduer`` pass; this way it checks every name against the imports above.
globals()["__getattr__"] = _lazy
