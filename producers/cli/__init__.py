"""The ``agent-signal`` command line: ``main`` and one module per verb group; how a verb reaches the service
(``reach``: over HTTP, straight in Redis, or through the ``make run`` stack file) and the operator's verbs
(``admin``)."""

from producers.cli.main import main

__all__ = ["main"]
