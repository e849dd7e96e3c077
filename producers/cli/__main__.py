"""``python -m producers.cli``: the ``agent-signal`` command, for subprocesses started from this interpreter."""

import sys

from producers.cli.main import main

sys.exit(main())
