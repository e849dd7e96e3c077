"""Print one ``agent.nightly_review.requested`` event per agent as JSON lines, for ``agent-signal enqueue``.

``--agents FILE`` is a JSON array of ``{"userId", "agentId", "timezone"?}`` (timezone: an IANA name, default
UTC). Each agent is reviewed for its last local day that has ended (``--date YYYY-MM-DD`` forces one), with
``sourceId = nightly-review:<userId>:<agentId>:<localDate>``: the same night gives the same ids, so a rerun is
a duplicate at the door, and the review's own guard refuses it for three days after that.

Run by the nightly CronJob (deploy/k8s/base/nightly-review.yaml); tests/unit/deploy runs it too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Sequence
from typing import Any
from zoneinfo import ZoneInfo

SOURCE_TYPE = "agent.nightly_review.requested"


def _zone(name: str) -> dt.tzinfo:
    return dt.UTC if name in ("UTC", "Etc/UTC") else ZoneInfo(name)


def review_day(now: dt.datetime, timezone: str) -> dt.date:
    """The last day that has ended in ``timezone`` at ``now`` (an aware datetime)."""
    return now.astimezone(_zone(timezone)).date() - dt.timedelta(days=1)


def event(agent: dict[str, Any], local_date: dt.date, requested_at_ms: int) -> dict[str, Any]:
    """The review request for ``agent`` and ``local_date`` (its window: that local day, in UTC)."""
    user_id, agent_id = str(agent["userId"]), str(agent["agentId"])
    timezone = str(agent.get("timezone") or "UTC")
    start = dt.datetime.combine(local_date, dt.time(), tzinfo=_zone(timezone))
    end = dt.datetime.combine(local_date + dt.timedelta(days=1), dt.time(), tzinfo=_zone(timezone))

    def iso(moment: dt.datetime) -> str:
        return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    return {
        "sourceType": SOURCE_TYPE,
        "sourceId": f"nightly-review:{user_id}:{agent_id}:{local_date.isoformat()}",
        "userId": user_id,
        "agentId": agent_id,
        "payload": {
            "agentId": agent_id,
            "userId": user_id,
            "localDate": local_date.isoformat(),
            "requestedAt": requested_at_ms,
            "reviewWindowStart": iso(start),
            "reviewWindowEnd": iso(end),
            "timezone": timezone,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", required=True, help="JSON array of {userId, agentId, timezone?}")
    parser.add_argument(
        "--date", type=dt.date.fromisoformat, help="review this local date (default: the last one)"
    )
    args = parser.parse_args(argv)
    with open(args.agents, encoding="utf-8") as handle:
        agents = json.load(handle)
    now = dt.datetime.now(dt.UTC)
    requested_at_ms = int(time.time() * 1000)
    for agent in agents:
        day = args.date or review_day(now, str(agent.get("timezone") or "UTC"))
        print(json.dumps(event(agent, day, requested_at_ms), separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
