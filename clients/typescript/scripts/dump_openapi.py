"""Print the OpenAPI document the Python web app serves (``create_web_app(settings).openapi()``) as JSON.

Run by ``npm run generate`` with the repository's virtualenv; the repository root is put on ``sys.path`` so
the script works from any directory. Settings are the defaults with every ``AGENT_SIGNAL_*`` variable of the
caller's shell ignored, so the snapshot does not depend on who generated it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    root = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(root))
    for name in [n for n in os.environ if n.startswith("AGENT_SIGNAL_") or n in ("REDIS_URL", "BROKER_URL")]:
        del os.environ[name]
    from producers.http.app import create_web_app
    from worker.settings import Settings

    document = create_web_app(Settings()).openapi()
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
