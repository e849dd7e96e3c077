"""What an erasure reads of a stored chain (worker/ops/erasure.py): the event that wrote it and the lanes of its
actions. A chain that does not read, whatever it fails with, names neither; the erasure goes on (it deletes the
chain all the same) and says so without the user, nor what the chain holds."""

from __future__ import annotations

import json
import logging

import pytest

from worker.documents.chain_codec import DEFLATE_V2, ZSTD_V3, encode_chain
from worker.keys.layout import Keys
from worker.ops.erasure import _chain_lanes, _chain_owner

TENANT = Keys("p:", "t", 2)
USER = "u-corrupt-chain"

CORRUPT = {
    "a zstd frame that does not decompress": bytes([ZSTD_V3]) + USER.encode() * 4,
    "a deflate stream that does not inflate": bytes([DEFLATE_V2, 0xFF, 0xFF]) + USER.encode(),
    "JSON nested too deep for the decoder": encode_chain(b"[" * 100_000 + b"]" * 100_000),
    "nodes that are no object": encode_chain(json.dumps({"nodes": [USER], "userId": USER}).encode()),
    "a source that is no object": encode_chain(json.dumps({"nodes": {"source": USER}}).encode()),
    "an envelope's actions that are no list": encode_chain(json.dumps({"envelope": {"actions": 1}}).encode()),
}


@pytest.mark.parametrize("raw", CORRUPT.values(), ids=CORRUPT.keys())
def test_a_chain_that_does_not_read_names_no_lane_nor_writer_and_the_erasure_goes_on(
    raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A zlib or zstd failure, a RecursionError or an AttributeError of the rebuild aborted the erasure midway
    (only ValueError, KeyError and TypeError were caught): each now reads as no lane and no writer, logged by its
    kind alone."""
    with caplog.at_level(logging.WARNING, logger="worker.ops.erasure"):
        assert _chain_lanes(TENANT, "topic:x", raw, "evt_1") == ([], [])
        assert _chain_lanes(TENANT, None, raw, "evt_1") == ([], [])
        assert _chain_owner(raw) is None
    assert caplog.records, "the erasure says it could not read the chain"
    assert all(USER not in record.getMessage() for record in caplog.records)
