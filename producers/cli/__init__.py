"""The ``agent-signal`` command line: ``main`` and one module per verb group; where a verb sends its work (``target``) and the ``make run`` stack file."""

from producers.cli.main import main

__all__ = ["main"]
