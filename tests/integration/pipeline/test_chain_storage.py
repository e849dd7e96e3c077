"""Compact storage against a real Redis and a real worker: the chain document is stored compressed (format byte
0x03; 0x02 with AGENT_SIGNAL_STORED_FORM=deflate), the event hash no longer stores its own id or start time, and what the API answers is the same JSON
shape as before (``GET /v1/chains/{id}``, ``GET /v1/events/{id}``, the listing); a chain stored in the old
plain-JSON form still reads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from tests.support.chain_forms import inputs_json
from worker.documents.chain_codec import (
    DEFLATE_V1,
    DEFLATE_V2,
    DICTIONARY_V1,
    DICTIONARY_V2,
    ZSTD_V3,
    decode_chain,
    deflate_json,
    inflate_json,
)
from worker.documents.chain_nodes import nodes_of
from worker.documents.chain_storage import rebuilt_chain
from worker.documents.lane_codec import LANE_DICTIONARY_V1
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

ENVELOPE_FIELDS = {
    "actions",
    "chainId",
    "edges",
    "handlerRuns",
    "metadata",
    "results",
    "rootSourceId",
    "signals",
    "source",
    "version",
}
RECORD_FIELDS = {"chainId", "conclusionChain", "createdAt", "id", "rootSourceId", "scopeKey", "sourceId"}
RECORD_FIELDS |= {"sourceType", "summary"}


@pytest.fixture
def api(make_settings: Any, start_worker: Any) -> Iterator[TestClient]:
    settings = make_settings(max_attempts=1)
    start_worker(settings)
    with TestClient(create_web_app(settings)) as client:
        yield client


@pytest.fixture
def raw_redis(redis_url: str) -> Iterator[Redis]:
    """A client that does not decode replies: the stored bytes as they are."""
    client = Redis.from_url(redis_url)
    yield client
    client.close()


def _done(api: TestClient, keys: BucketKeys, source_id: str) -> dict[str, Any]:
    """Send one test.counter event (a signal, an action, its result) and wait until it is done."""
    payload = {"counterKey": f"{keys.bucket_prefix}test:compact-counter"}
    answer = api.post(
        "/v1/events",
        json={
            "sourceType": "test.counter",
            "sourceId": source_id,
            "scopeKey": "topic:compact",
            "payload": payload,
        },
    )
    assert answer.status_code == 202, answer.text
    event_id = answer.json()["results"][0]["eventId"]
    return dict(
        wait_for(
            lambda: (s := api.get(f"/v1/events/{event_id}").json())["status"] == "done" and s,
            timeout_s=60,
            what=f"{event_id} to be done",
        )
    )


class TestCompactChain:
    def test_the_chain_is_stored_compressed_and_answered_as_before(
        self, api: TestClient, raw_redis: Redis, keys: BucketKeys
    ) -> None:
        """The stored value starts with the format byte and holds the projection's inputs only (the nodes form);
        GET /v1/chains/{id} is LobeHub's shape, projected again from them."""
        status = _done(api, keys, "compact-1")
        stored = raw_redis.get(keys.chain(status["eventId"]))
        assert isinstance(stored, bytes) and stored[0] == ZSTD_V3
        inputs = decode_chain(stored)
        assert set(inputs) <= {"nodes", "durationMs", "traceId"} and "edges" not in inputs["nodes"]
        assert "eventId" not in inputs["nodes"]["metadata"]  # the key's suffix: the reader passes it back
        document = rebuilt_chain(inputs, status["eventId"])
        assert len(stored) < len(json.dumps(document, separators=(",", ":"))) / 4
        answer = api.get(f"/v1/chains/{status['chainId']}")
        assert answer.status_code == 200, answer.text
        chain = answer.json()
        assert chain == document
        assert set(chain) == {"envelope", "record"}
        assert ENVELOPE_FIELDS <= set(chain["envelope"]) and RECORD_FIELDS <= set(chain["record"])
        assert chain["envelope"]["source"]["sourceId"] == "compact-1"
        assert chain["envelope"]["metadata"]["eventId"] == status["eventId"]

    def test_a_chain_in_the_old_plain_json_form_still_reads(
        self, api: TestClient, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A document written before the format byte (plain JSON) is answered unchanged."""
        status = _done(api, keys, "compact-old")
        chain = api.get(f"/v1/chains/{status['chainId']}").json()
        redis_client.set(keys.chain(status["eventId"]), json.dumps(chain, separators=(",", ":")))
        again = api.get(f"/v1/chains/{status['chainId']}")
        assert again.status_code == 200 and again.json() == chain
        missing = api.get("/v1/chains/chain:no-such-run").json()["error"]  # named as an event's 404 is
        assert (missing["code"], missing["field"]) == ("not_found", "chainId")

    def test_a_chain_in_the_inputs_form_of_format_1_still_reads(
        self, api: TestClient, raw_redis: Redis, keys: BucketKeys
    ) -> None:
        """A chain written before issue 29 (whole nodes under ``inputs``, dictionary V1) is answered as the
        same chain stored now."""
        status = _done(api, keys, "compact-v1")
        chain = api.get(f"/v1/chains/{status['chainId']}").json()
        key = keys.chain(status["eventId"])
        stored = raw_redis.get(key)
        assert isinstance(stored, bytes)
        source, signals, actions, results, metadata = nodes_of(
            decode_chain(stored)["nodes"], status["eventId"]
        )
        kept = decode_chain(stored)
        old = inputs_json(
            source,
            signals,
            actions,
            results,
            duration_ms=kept.get("durationMs"),
            trace_id=kept.get("traceId"),
            metadata=metadata,
        )
        raw_redis.set(key, deflate_json(old, DICTIONARY_V1), keepttl=True)
        assert raw_redis.get(key)[:1] == bytes([DEFLATE_V1])  # type: ignore[index]
        again = api.get(f"/v1/chains/{status['chainId']}")
        assert again.status_code == 200 and again.json() == chain


class TestDeflateFormForARollingUpgrade:
    """``AGENT_SIGNAL_STORED_FORM=deflate``: a worker writes the forms a version before the zstd ones reads (the
    first phase of a rolling upgrade, docs/operations.md), and reads them as it reads its own."""

    @pytest.fixture
    def deflate_api(self, make_settings: Any, start_worker: Any) -> Iterator[TestClient]:
        settings = make_settings(max_attempts=1, stored_form="deflate")
        start_worker(settings)
        with TestClient(create_web_app(settings)) as client:
            yield client

    def test_chains_and_lanes_are_written_in_the_deflate_forms_older_code_reads(
        self, deflate_api: TestClient, raw_redis: Redis, keys: BucketKeys
    ) -> None:
        status = _done(deflate_api, keys, "compact-deflate")
        chain = raw_redis.get(keys.chain(status["eventId"]))
        assert isinstance(chain, bytes) and chain[0] == DEFLATE_V2
        # what the version before the zstd forms decoded with: deflate and its two chain dictionaries only
        older_chain = json.loads(
            inflate_json(chain, {DEFLATE_V1: DICTIONARY_V1, DEFLATE_V2: DICTIONARY_V2}, "c")
        )
        assert older_chain == decode_chain(chain) and "nodes" in older_chain
        lanes = list(raw_redis.scan_iter(match=keys.idempotency("topic:compact", "*"), count=1000))
        assert lanes, "the applied action's lane"
        for key in lanes:
            lane = raw_redis.get(key)
            assert isinstance(lane, bytes) and lane[0] == DEFLATE_V1
            assert (
                json.loads(inflate_json(lane, {DEFLATE_V1: LANE_DICTIONARY_V1}, "lane"))["status"]
                == "applied"
            )
        answer = deflate_api.get(f"/v1/chains/{status['chainId']}")
        assert (
            answer.status_code == 200 and answer.json()["envelope"]["source"]["sourceId"] == "compact-deflate"
        )


class TestTrimmedEventHash:
    def test_the_status_shape_is_unchanged_without_the_duplicated_fields(
        self, api: TestClient, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """The hash has no eventId and no startedAt (the key and the history hold them); the status record,
        the run detail and the listing still answer eventId, chainId and the attempt's start."""
        status = _done(api, keys, "compact-2")
        stored = redis_client.hgetall(keys.event(status["eventId"]))
        assert "eventId" not in stored and "startedAt" not in stored
        # a done event's body is kept in its chain (test_done_runs_stored_lean.py), and the chain's source does
        # not repeat the default chain either; the detail answers them whole
        assert "event" not in stored
        assert "chainId" not in stored and stored["history"].isdigit()
        detail = api.get(f"/v1/events/{status['eventId']}").json()
        assert detail["event"]["sourceId"] == "compact-2" and detail["event"]["eventId"] == status["eventId"]
        assert detail["event"]["chain"] == {"chainId": "chain:compact-2", "rootSourceId": "compact-2"}
        assert status["chainId"] == "chain:compact-2"
        assert {"eventId", "status", "attempts", "chainId", "scopeKey", "enqueuedAt", "finishedAt"} <= set(
            status
        )
        assert status["attemptsHistory"][0]["startedAt"] > 0
        listed = api.get("/v1/events", params={"scopeKey": "topic:compact"}).json()["events"]
        assert [e["eventId"] for e in listed] == [status["eventId"]]
        assert listed[0]["chainId"] == "chain:compact-2" and listed[0]["sourceId"] == "compact-2"

    def test_an_old_hash_with_its_own_id_still_reads(
        self, api: TestClient, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A hash written before the trim (with eventId and startedAt fields) answers the same record."""
        status = _done(api, keys, "compact-3")
        key = keys.event(status["eventId"])
        redis_client.hset(key, mapping={"eventId": status["eventId"], "startedAt": "1"})
        assert api.get(f"/v1/events/{status['eventId']}").json() == status
