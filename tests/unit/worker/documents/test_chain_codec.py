"""The chain document's stored form (worker/documents/chain_codec.py): a zstd frame made with a frozen dictionary,
and the deflate and plain JSON documents written before it still read."""

from __future__ import annotations

import hashlib
import json
import threading
import zlib
from typing import Any

import pytest

from worker.documents.chain_codec import (
    DEFLATE_V1,
    DEFLATE_V2,
    DICTIONARY_V1,
    DICTIONARY_V2,
    DICTIONARY_V3,
    ZSTD_V3,
    chain_json,
    decode_chain,
    deflate_json,
    encode_chain,
    inflate_json,
)
from worker.documents.event_records import status_record
from worker.documents.lane_codec import LANE_DICTIONARY_V1
from worker.documents.zstd_form import ZstdForm


def _compact(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def _document() -> dict[str, Any]:
    """A chain document as the projection writes it: one source, a signal, an action and its result."""
    source_id, action_id = "msg-42", "msg-42:signal:received:action:note"
    chain = {"chainId": f"chain:{source_id}", "rootSourceId": source_id}
    attempt = {"current": 1, "max": 5, "startedAt": 1796145192559, "completedAt": 1796145192561}
    return {
        "envelope": {
            "actions": [{"actionId": action_id, "actionType": "action.note.write", "chain": chain}],
            "chainId": chain["chainId"],
            "edges": [{"from": source_id, "relation": "produced", "to": f"{source_id}:signal:received"}],
            "handlerRuns": [{"attempt": {**attempt, "status": "succeeded"}, "status": "ok", "durationMs": 2}],
            "metadata": {"scopeKey": "topic:t-1", "eventId": "evt_0123456789abcdef01234567", "attempt": 1},
            "results": [{"actionId": action_id, "status": "applied", "detail": "Noted: café ☕ 注意"}],
            "rootSourceId": source_id,
            "signals": [],
            "source": {"sourceId": source_id, "payload": {"message": "naïve → ok", "n": 1.5, "x": None}},
            "version": 1,
        },
        "record": {"chainId": chain["chainId"], "durationMs": 1.144, "summary": {"totalSignals": 0}},
    }


class TestRoundTrip:
    def test_a_document_decodes_to_what_was_encoded(self) -> None:
        """Encoding the compact JSON and decoding it gives the same document (unicode, floats, null kept)."""
        document = _document()
        stored = encode_chain(_compact(document).encode("utf-8"))
        assert stored[0] == ZSTD_V3
        assert decode_chain(stored) == document

    def test_the_stored_form_is_much_smaller_than_the_json_and_than_deflate(self) -> None:
        """The point of it: a small chain stores in well under half its JSON (the dictionary's field names), and
        in no more than the deflate form it replaced."""
        text = _compact(_document()).encode("utf-8")
        stored = encode_chain(text)
        assert len(stored) < len(text) / 2
        assert len(stored) <= len(deflate_json(text, DICTIONARY_V2, DEFLATE_V2))

    def test_threads_encode_and_decode_side_by_side(self) -> None:
        """Each thread has its own compressor and decompressor (python-zstandard's are not to be shared): chains
        encoded in several threads at once each decode whole, here and in another form object."""
        texts = [_compact({**_document(), "n": i}).encode("utf-8") for i in range(8)]
        stored: dict[int, bytes] = {}

        def encode(i: int) -> None:
            for _ in range(50):
                stored[i] = encode_chain(texts[i])

        threads = [threading.Thread(target=encode, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fresh = ZstdForm(ZSTD_V3, DICTIONARY_V3)
        assert [chain_json(stored[i]) for i in range(8)] == texts
        assert [fresh.decode(stored[i], "chain") for i in range(8)] == texts

    def test_the_dictionaries_are_frozen(self) -> None:
        """Documents written with format 0x01, 0x02 or 0x03 must decode for their whole retention: a changed
        dictionary needs a new format byte, not an edit of one. The zstd one holds 0x02's vocabulary."""
        digest = hashlib.sha256(DICTIONARY_V1).hexdigest()
        assert digest == "0eef77ebb039088a8f9c708229e27aa59c5888526207e9981775fe7d669378e5"
        assert (
            hashlib.sha256(DICTIONARY_V2).hexdigest()
            == "9f32b6f81b5d520613caac574b0c22994b8e860f1aaa98d40a22b352c1f69d77"
        )
        assert (
            hashlib.sha256(DICTIONARY_V3).hexdigest()
            == "e5b43ec2f73433cc74beca449bb8add5592480812cdda9e57036ca066a80b6fb"
        )
        assert DICTIONARY_V3.endswith(DICTIONARY_V2)


class TestOldDocuments:
    def test_a_document_of_format_1_still_reads(self) -> None:
        """A chain written with the first dictionary (format 0x01, before issue 29) decodes as it was."""
        document = _document()
        old = deflate_json(_compact(document), DICTIONARY_V1)
        assert old[0] == DEFLATE_V1
        assert decode_chain(old) == document
        assert decode_chain(old) == decode_chain(encode_chain(_compact(document).encode("utf-8")))

    def test_a_document_of_format_2_still_reads(self) -> None:
        """A chain written with deflate and the nodes form's dictionary (format 0x02, issue 29's first step)
        decodes as it was."""
        document = _document()
        old = deflate_json(_compact(document), DICTIONARY_V2, DEFLATE_V2)
        assert old[0] == DEFLATE_V2
        assert decode_chain(old) == document

    def test_the_deflate_setting_writes_format_2_as_before_the_zstd_form(self) -> None:
        """``stored_form="deflate"`` (a rolling upgrade's first phase) writes what the version before read."""
        text = _compact(_document()).encode("utf-8")
        stored = encode_chain(text, "deflate")
        assert stored == _written_before(text, DICTIONARY_V2, DEFLATE_V2)
        assert inflate_json(stored, {DEFLATE_V1: DICTIONARY_V1, DEFLATE_V2: DICTIONARY_V2}, "chain") == text

    def test_a_plain_json_document_still_reads(self) -> None:
        """A document stored before the format byte (plain JSON) decodes, as bytes or as a decoded str."""
        document = _document()
        old = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
        assert decode_chain(old.encode("utf-8")) == document
        assert decode_chain(old) == document

    def test_unknown_or_broken_forms_are_value_errors(self) -> None:
        """An unknown format byte, a truncated stream or a non-object is a ValueError, never garbage."""
        stored = encode_chain(_compact(_document()).encode("utf-8"))
        broken = stored[:1] + bytes([stored[1] ^ 0xFF]) + stored[2:]
        # a frame header that claims 1 TiB: refused before anything is allocated (not a MemoryError)
        huge = b"\x03\xe0" + (1 << 40).to_bytes(8, "little") + b"\x01\x00\x00"
        trailing = stored + b"junk"
        for bad in (
            b"\x7fxyz",
            stored[:20],
            broken,
            huge,
            trailing,
            b"\x03",
            b"[1,2]",
            b"\x01" + b"\x00" * 5,
        ):
            with pytest.raises(ValueError):
                decode_chain(bad)


class TestEventRecordId:
    def test_the_id_comes_from_the_key_when_the_hash_does_not_store_it(self) -> None:
        """New hashes have no eventId field (it is their key's suffix); old ones still carry it."""
        assert status_record({"state": "done"}, "evt_1")["eventId"] == "evt_1"
        assert status_record({"state": "done", "eventId": "evt_old"}, "evt_old")["eventId"] == "evt_old"
        assert status_record({"state": "done", "sourceId": "s1"}, "evt_1")["chainId"] == "chain:s1"


def _written_before(data: bytes, dictionary: bytes, form: int) -> bytes:
    """What the codec wrote before the zstd forms (4e47942), with its parameters spelled out: level 3, an 8 KiB
    raw window, memLevel 2, the frozen dictionary."""
    deflate = zlib.compressobj(3, zlib.DEFLATED, -13, 2, zdict=dictionary)
    return bytes([form]) + deflate.compress(data) + deflate.flush()


def _deflate_32k(data: bytes, dictionary: bytes) -> bytes:
    """What the codec wrote before it used an 8 KiB window: zlib's default 32 KiB one, level 6."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=dictionary)
    return bytes([DEFLATE_V1]) + deflate.compress(data) + deflate.flush()


_LANE_RESULT = {
    "status": "applied",
    "attempt": {
        "current": 1,
        "max": 5,
        "startedAt": 1764770000000,
        "completedAt": 1764770000123,
        "status": "ok",
    },
    "detail": "recorded activity for user u1",
}


@pytest.mark.parametrize(
    ("dictionary", "document"),
    [
        (DICTIONARY_V1, _document()),
        (LANE_DICTIONARY_V1, _LANE_RESULT),
        (DICTIONARY_V1, {"status": "applied"}),
    ],
    ids=["chain", "lane", "small"],
)
def test_the_small_compressor_writes_about_what_the_default_one_wrote(
    dictionary: bytes, document: dict[str, Any]
) -> None:
    """The 8 KiB window, the small hash table and zlib's fast matcher (level 3) change the CPU a lot and the
    bytes stored by at most 5% (and a byte) against zlib's defaults at level 6 (a chain: 241 bytes against 233).
    Every form reads back whole."""
    text = _compact(document).encode("utf-8")
    stored, default = deflate_json(text, dictionary), _deflate_32k(text, dictionary)
    assert len(stored) <= len(default) * 1.05 + 1
    assert inflate_json(stored, {DEFLATE_V1: dictionary}, "value") == text


def test_a_value_larger_than_the_window_still_reads_back() -> None:
    """A chain whose matches lie further back than 8 KiB compresses a little differently, and decodes whole."""
    document = _document()
    document["envelope"]["source"]["payload"]["message"] = "".join(f"word{i} " for i in range(4000))
    stored = encode_chain(_compact(document).encode("utf-8"))
    assert stored[0] == ZSTD_V3
    assert decode_chain(stored) == document
