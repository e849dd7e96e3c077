"""The compact stored forms of an event's body (worker/documents/event_body.py) and of an idempotency lane's result
(worker/documents/lane_codec.py): nothing the hash already holds is stored twice, what a reader gets is the whole
thing, and values written before these forms still read."""

from __future__ import annotations

import hashlib
import json
import zlib

import pytest

from worker.core.nodes import ChainRef, ExecutorResult, Source
from worker.documents.chain_codec import DEFLATE_V1, deflate_json
from worker.documents.event_body import body_of, full_body, stored_body
from worker.documents.event_records import attempts_history
from worker.documents.lane_codec import (
    LANE_DICTIONARY_V1,
    LANE_DICTIONARY_V2,
    ZSTD_V2,
    decode_lane,
    encode_lane,
    lane_json,
    lane_result,
)
from worker.drain.ports import BatchLane

EVENT_ID = "evt_0123456789abcdef01234567"


def _source(*, chain: ChainRef | None = None, **extra: str) -> Source:
    return Source(
        source_id="msg-1",
        source_type="agent.user.message",
        scope_key="topic:t-1",
        timestamp=1_796_000_000_000,
        payload={"message": "naïve → ok", "sourceId": "not the identity", "n": 1.5},
        chain=chain or ChainRef(chain_id="chain:msg-1", root_source_id="msg-1"),
        event_id=EVENT_ID,
        **extra,
    )


def _hash(stored: str) -> dict[str, str]:
    return {"event": stored, "scopeKey": "topic:t-1", "sourceType": "agent.user.message", "sourceId": "msg-1"}


class TestEventBody:
    @pytest.mark.parametrize(
        "source",
        [
            _source(),
            _source(user_id="u1", traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            _source(chain=ChainRef(chain_id="chain:root", root_source_id="root", parent_node_id="root:a")),
        ],
        ids=["root", "user and trace", "follow-up chain"],
    )
    def test_the_stored_body_reads_back_whole(self, source: Source) -> None:
        """What the worker validates and what readers answer is the Source as it was admitted."""
        stored = stored_body(source.to_json_dict())
        for name in ("sourceType", "scopeKey", "eventId"):
            assert f'"{name}":' not in stored
        whole = full_body(
            stored,
            event_id=EVENT_ID,
            scope_key="topic:t-1",
            source_type="agent.user.message",
            source_id="msg-1",
        )
        assert Source.model_validate_json(whole) == source
        assert body_of(_hash(stored), EVENT_ID) == source.to_json_dict()

    def test_the_default_chain_is_not_stored_and_a_follow_ups_is(self) -> None:
        assert '"chain"' not in stored_body(_source().to_json_dict())
        follow_up = _source(chain=ChainRef(chain_id="chain:root", root_source_id="root", parent_node_id="p"))
        assert stored_body(follow_up.to_json_dict()).startswith('{"chain":')

    def test_a_whole_body_written_before_reads_unchanged(self) -> None:
        old = json.dumps(_source().to_json_dict(), separators=(",", ":"))
        assert body_of(_hash(old), EVENT_ID) == _source().to_json_dict()
        assert full_body(old, event_id=EVENT_ID, scope_key="x", source_type="y", source_id="msg-1") == old

    def test_an_erased_body_reads_as_none(self) -> None:
        assert body_of({**_hash(""), "event": ""}, EVENT_ID) is None


class TestCompactHistory:
    def test_one_first_attempt_that_succeeded_is_its_start_time(self) -> None:
        assert attempts_history("1796000000010", 1796000000020) == [
            {
                "attempt": 1,
                "run": 0,
                "startedAt": 1796000000010,
                "status": "succeeded",
                "finishedAt": 1796000000020,
            }
        ]

    def test_the_json_list_still_reads(self) -> None:
        raw = '[{"attempt":1,"run":0,"startedAt":5,"status":"failed","finishedAt":6,"error":"boom"}]'
        assert attempts_history(raw, 9)[0]["error"] == "boom"


class TestLane:
    RESULT = (
        '{"actionId":"msg-1:signal:received:action:note","status":"applied","attempt":{"current":1,"max":5,'
        '"startedAt":1796000000010,"completedAt":1796000000011,"status":"succeeded"},"detail":"Noted: café"}'
    )

    def test_a_lane_reads_back_what_was_stored_and_is_smaller(self) -> None:
        stored = encode_lane(self.RESULT)
        assert stored[0] == ZSTD_V2 and len(stored) < len(self.RESULT.encode("utf-8")) / 2
        assert json.loads(decode_lane(stored)) == json.loads(self.RESULT)

    def test_a_deflated_lane_written_before_still_reads(self) -> None:
        """Format 0x01 (deflate with LANE_DICTIONARY_V1), written until issue 29's second step."""
        old = deflate_json(self.RESULT, LANE_DICTIONARY_V1)
        assert old[0] == DEFLATE_V1
        assert decode_lane(old) == self.RESULT.encode("utf-8")
        result = ExecutorResult.model_validate_json(self.RESULT)
        assert lane_result(old, result.action_id) == result

    def test_the_deflate_setting_writes_format_1_as_before_the_zstd_form(self) -> None:
        """What the codec wrote before the zstd forms (4e47942: level 3, an 8 KiB raw window, memLevel 2), byte for
        byte, through the lane encoder and through a batch commit's lane."""
        deflate = zlib.compressobj(3, zlib.DEFLATED, -13, 2, zdict=LANE_DICTIONARY_V1)
        before = bytes([DEFLATE_V1]) + deflate.compress(self.RESULT.encode("utf-8")) + deflate.flush()
        assert encode_lane(self.RESULT, "deflate") == before
        assert decode_lane(before) == self.RESULT.encode("utf-8")
        batch_lane = BatchLane("idem-key", self.RESULT, "[]")
        assert batch_lane.layout("deflate").result_json == before
        assert batch_lane.layout("zstd").result_json[0] == ZSTD_V2

    def test_a_broken_zstd_lane_is_refused_by_name(self) -> None:
        stored = encode_lane(self.RESULT)
        for bad in (stored[:-3], bytes([ZSTD_V2])):
            with pytest.raises(ValueError, match="idempotency lane"):
                decode_lane(bad)

    def test_a_lane_keyed_by_its_action_id_stores_no_action_id_and_reads_it_back(self) -> None:
        """The default key is the action's id: the stored JSON leaves it out (issue 29), the read puts it back."""
        result = ExecutorResult.model_validate_json(self.RESULT)
        stored = lane_json(result, result.action_id)
        assert "actionId" not in json.loads(stored)
        assert len(encode_lane(stored)) < len(encode_lane(self.RESULT)) - 20
        assert lane_result(encode_lane(stored), result.action_id) == result

    def test_a_lane_under_a_shared_key_keeps_its_writer_s_action_id(self) -> None:
        """A planner's idempotencyKey may be shared: the result keeps the id of the action that wrote it, and a
        lane written before (whole JSON, deflated or plain) reads as it was."""
        result = ExecutorResult.model_validate_json(self.RESULT)
        stored = lane_json(result, "root:memory:msg-1")
        assert json.loads(stored)["actionId"] == result.action_id
        assert lane_result(encode_lane(stored), "root:memory:msg-1") == result
        for old in (deflate_json(self.RESULT, LANE_DICTIONARY_V1), self.RESULT.encode("utf-8")):
            assert lane_result(old, "root:memory:msg-1") == result
        assert lane_result(None, "k") is None

    def test_a_plain_json_lane_written_before_still_reads(self) -> None:
        assert decode_lane(self.RESULT.encode("utf-8")) == self.RESULT.encode("utf-8")
        assert decode_lane(self.RESULT) == self.RESULT

    def test_an_unknown_form_is_refused_by_name(self) -> None:
        with pytest.raises(ValueError, match="idempotency lane of unknown format"):
            decode_lane(b"\x07abc")

    def test_the_dictionary_is_frozen(self) -> None:
        """Lanes written with format 0x01 or 0x02 must decode for the idempotency TTL: a new dictionary is a new
        byte. The zstd one holds 0x01's vocabulary."""
        digest = hashlib.sha256(LANE_DICTIONARY_V1).hexdigest()
        assert digest == "cb028c055c3ad352076ff716a829b0d6bd078d450a367391ee600ed2838484e5"
        digest = hashlib.sha256(LANE_DICTIONARY_V2).hexdigest()
        assert digest == "be61666ddd5f1254e639005844dbf7ecb656025d70628d84aef1bcb57b5fdf4f"
        assert LANE_DICTIONARY_V2.endswith(LANE_DICTIONARY_V1)
