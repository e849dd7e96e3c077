"""bench/dictionaries.py: a candidate zstd dictionary keeps the frozen vocabulary as its content, reads back what
it wrote, and the report compares the stored forms on the same values."""

from __future__ import annotations

import base64
import json

from bench.dictionaries import candidate, report
from worker.documents.chain_codec import DICTIONARY_V2
from worker.documents.lane_codec import LANE_DICTIONARY_V1
from worker.documents.zstd_form import ZstdForm


def _chain(i: int) -> bytes:
    nodes = {
        "actions": [{"actionId": f"m{i}:signal:s:action:a", "actionType": "action.note", "payload": {}}],
        "metadata": {"attempt": 1, "status": "completed"},
        "results": [{"status": "applied", "detail": f"noted {i}"}],
        "signals": [{"signalId": f"m{i}:signal:s", "signalType": "signal.note", "payload": {"n": i}}],
        "source": {"sourceId": f"m{i}", "sourceType": "agent.user.message", "scopeKey": f"topic:{i % 3}"},
    }
    return json.dumps({"nodes": nodes, "durationMs": i / 7}, separators=(",", ":")).encode()


def _lane(i: int) -> bytes:
    attempt = {"current": 1, "max": 5, "startedAt": 1796000000000 + i, "completedAt": 1796000000009 + i}
    return json.dumps({"status": "applied", "attempt": attempt, "detail": f"done {i}"}).encode()


def test_a_candidate_keeps_the_vocabulary_and_reads_back_what_it_wrote() -> None:
    values = [_chain(i) for i in range(60)]
    fitted = candidate(DICTIONARY_V2, values)
    assert fitted.endswith(DICTIONARY_V2) and len(fitted) > len(DICTIONARY_V2)
    form = ZstdForm(0x7E, fitted)
    for value in values[:5]:
        stored = form.encode(value)
        assert stored[0] == 0x7E and len(stored) < len(value) / 2
        assert form.decode(stored, "value") == value


def test_the_report_compares_every_form_on_the_same_values() -> None:
    chains, lanes = [_chain(i) for i in range(60)], [_lane(i) for i in range(60)]
    result = report(chains, lanes, show=True)
    assert (result["chains"], result["lanes"]) == (60, 60)
    for kind, vocabulary in (("chain", DICTIONARY_V2), ("lane", LANE_DICTIONARY_V1)):
        row = result[kind]
        assert (
            row["json"] > row["deflate"] > 0 and row["zstd"] < row["json"] and row["candidate"] < row["json"]
        )
        assert base64.b64decode(row["candidateBase64"]).endswith(vocabulary)
