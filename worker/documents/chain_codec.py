"""How a chain document is stored (``chain:<id>``, written by the COMMIT script as an opaque string).

One format byte, then the payload. ``0x03`` (written since issue 29's second step): the compact JSON (UTF-8) as a
zstd frame (:class:`~worker.documents.zstd_form.ZstdForm`) made with :data:`DICTIONARY_V3`, a zstd dictionary
whose content is :data:`DICTIONARY_V2`'s vocabulary, with entropy tables fitted to the engine's own chains.
``0x02`` (written before, and with ``AGENT_SIGNAL_STORED_FORM=deflate`` for a rolling upgrade's first phase;
always read): the same JSON as raw deflate with the preset dictionary
:data:`DICTIONARY_V2`, the field names and vocabulary of the ``nodes`` form (:mod:`worker.documents.chain_nodes`)
in the order it writes them. ``0x01`` (older, still read): deflate with :data:`DICTIONARY_V1`, made for LobeHub's
whole document. The ids, types and times a chain repeats are back-references, the field names come from the
dictionary. A value that starts with ``{`` is a document written before the format byte existed (plain JSON)
and still reads. The dictionaries are frozen: a document written with one must decode for as long as it is
retained, so a better dictionary is a new format byte, never an edit (a unit test pins their digests). Readers
get the bytes without the client's UTF-8 decoding (:meth:`worker.store.events.EventStore.get_chain`) and call
:func:`decode_chain`.

Why bytes and not base64/base85 text: the clients decode replies as UTF-8 (``decode_responses=True``), but
redis-py reads one command's reply undecoded when it is given ``NEVER_DECODE`` (as its own ``DUMP`` does), on
a plain client, a pipeline and a cluster client alike; so a chain costs its compressed size, not a third more,
and no second connection pool is needed. Writes need nothing: bytes arguments are sent as they are.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from typing import Any, Literal

from worker.documents.zstd_form import ZstdForm

__all__ = [
    "DEFLATE_V1",
    "DEFLATE_V2",
    "DICTIONARY_V1",
    "DICTIONARY_V2",
    "DICTIONARY_V3",
    "ZSTD_V3",
    "StoredForm",
    "chain_json",
    "decode_chain",
    "deflate_json",
    "encode_chain",
    "inflate_json",
]

DEFLATE_V1 = 0x01  # format byte: raw deflate of the compact JSON with DICTIONARY_V1 (lanes: their own V1)
DEFLATE_V2 = 0x02  # format byte of a chain: raw deflate with DICTIONARY_V2 (stored_form deflate)
ZSTD_V3 = 0x03  # format byte of a chain: a zstd frame with DICTIONARY_V3 (stored_form zstd)
# What chains and lanes are written as (the setting AGENT_SIGNAL_STORED_FORM): "deflate" writes the forms a
# version before the zstd ones reads (chain 0x02, lane 0x01), for the first phase of a rolling upgrade.
StoredForm = Literal["zstd", "deflate"]
_LEVEL = 3  # zlib's fast matcher: ~40% fewer instructions than 6 for ~3% more bytes per chain (decisions.md)
# The compressor's window: 8 KiB (2**13) holds the dictionary and a typical value together, so what it writes
# is byte for byte what the default 32 KiB window writes for them (a unit test compares), and it is read the same
# way (raw deflate names no window; the reader's 32 KiB is enough for any). Its state is 4 times smaller, which
# halves the cost of a small value: with 32 KiB, zlib's state is large enough that every compressor is a fresh
# mapping of pages (a lane's 237 bytes: 35 -> 18 us; a chain's 2.2 KB: 43 -> 29 us).
_WINDOW_BITS = 13
# Its hash table: 2**(2 + 7) heads instead of the default 2**(8 + 7). Every compressor zeroes its table, and for a
# value of a few KB the default's 64 KiB of zeroing cost more than compressing it (callgrind: 66 k instructions of
# ~210 k per chain); a chain and a lane compress to the same bytes (a unit test compares).
_MEM_LEVEL = 2
# The LobeHub shapes' field names and fixed vocabulary, no values of any workload: FROZEN (see the docstring).
DICTIONARY_V1 = (
    b'"error":{"code":"","message":"","retriable":false},"output":{},"terminal":{},"traceId":"",'
    b'"agentId":"","operationId":"","topicId":"","status":"failed","status":"skipped",'
    b'{"envelope":{"actions":[{"actionId":"","actionType":"","signal":{"signalId":"","signalType":""},'
    b'"source":{"sourceId":"","sourceType":""},"chain":{"chainId":"chain:","rootSourceId":"","parentNodeId":"",'
    b'"parentSignalId":""},"timestamp":0,"payload":{}}],"chainId":"chain:","edges":[{"from":"",'
    b'"relation":"produced","to":""},{"from":"","relation":"triggered","to":""},{"from":"",'
    b'"relation":"resulted-in","to":":result"}],"handlerRuns":[{"attempt":{"current":1,"max":0,"startedAt":0,'
    b'"completedAt":0,"status":"succeeded"},"handlerType":"action.","id":":attempt:1","inputRefIds":[""],'
    b'"outputRefIds":[":result"],"startedAt":"T00:00:00.000Z","status":"ok","durationMs":0,"reasoning":""}],'
    b'"metadata":{"scopeKey":"","eventId":"evt_","attempt":1,"status":"completed"},"results":[{"actionId":"",'
    b'"status":"applied","attempt":{"current":1,"max":0,"startedAt":0,"completedAt":0,"status":"succeeded"},'
    b'"detail":""}],"rootSourceId":"","signals":[{"signalId":":signal:","signalType":"signal.","source":'
    b'{"sourceId":"","sourceType":""},"chain":{"chainId":"chain:","rootSourceId":"","parentNodeId":""},'
    b'"timestamp":0,"payload":{}},{"signalId":":action::result","signalType":"signal.action.applied","source":'
    b'{"sourceId":"","sourceType":""},"chain":{"chainId":"chain:","rootSourceId":"","parentNodeId":"",'
    b'"parentActionId":""},"timestamp":0,"payload":{"actionId":"","actionType":"","attempt":{"current":1,'
    b'"max":0,"startedAt":0,"completedAt":0,"status":"succeeded"},"detail":""}}],"source":{"sourceId":"",'
    b'"sourceType":"","scopeKey":"","timestamp":0,"payload":{},"chain":{"chainId":"chain:","rootSourceId":""},'
    b'"eventId":"evt_"},"version":1},"record":{"chainId":"chain:","conclusionChain":{"compressedSignals":'
    b'{"action":{"outcomes":{"applied":1},"total":1}},"dominantPath":["","signal.action.applied",""],'
    b'"finalReason":""},"createdAt":"T00:00:00.000Z","id":"agent-signal:","rootSourceId":"","scopeKey":"",'
    b'"sourceId":"","sourceType":"","summary":{"attemptBreakdown":{"failed":0,"retriableFailures":0,'
    b'"skipped":0,"succeeded":1,"total":1},"domains":["","action"],"outcomes":["","applied"],'
    b'"statusBreakdown":{"applied":1,"failed":0,"skipped":0},"totalActions":1,"totalSignals":2},'
    b'"finalActionId":"","finalActionType":"action.","finalStatus":"applied","durationMs":0}}'
)

# The nodes form's field names and the engine's own vocabulary (ids' suffixes, statuses), no values of any
# workload; what is most common last (deflate's nearest distances are the cheapest): FROZEN (the docstring).
DICTIONARY_V2 = (
    b'"error":{"code":"","message":"","retriable":false,"retryAfterMs":},"output":{},"terminal":{"kind":"",'
    b'"reason":""},"traceId":"","status":"failed","status":"skipped","agentId":"","operationId":"","topicId":"",'
    b'"userId":"","workspaceId":"","traceparent":"","parentActionId":"","parentSignalId":"",'
    b'"chain":{"chainId":"chain:","rootSourceId":"","parentNodeId":""},"signal":{"signalId":"","signalType":""},'
    b'{"nodes":{"actions":[{"actionId":":signal::action:","actionType":"action.","payload":{}}],'
    b'"metadata":{"eventId":"evt_","attempt":1,"status":"completed"},"results":[{"status":"applied",'
    b'"attempt":{"current":1,"max":5,"startedAt":,"completedAt":,"status":"succeeded"},"detail":""}],'
    b'"signals":[{"signalId":":signal:","signalType":"signal.","payload":{}},{"timestamp":}],'
    b'"source":{"sourceId":"","sourceType":"","scopeKey":"","timestamp":,"payload":{"message":"","messageId":""}}},'
    b'"durationMs":'
)
_CHAIN_DICTIONARIES = {DEFLATE_V1: DICTIONARY_V1, DEFLATE_V2: DICTIONARY_V2}

# A zstd dictionary: DICTIONARY_V2 as its content, with entropy tables fitted to the chains of the welcome
# workload (examples/events.jsonl), made by ``python -m bench.dictionaries``: FROZEN (see the docstring).
DICTIONARY_V3 = base64.b64decode(
    "N6Qw7BoO9Gk0EMCTpA0zMAMzMAMzBOSzRdZ2kkSSQvaRjVBK2fJHh2xc/w8eNzZsTMrfSGuSSMhS2cA8JYMAGBQQExAPEPsRAAAEYIhJ"
    "CQSKCgnFBGbJUApCEI5CIRACihAAACQEEAZEEpgAAADUE2SJHCpF1BjIQB5ACBQoGQIAAAAAAQAAAAQAAAAIAAAAImVycm9yIjp7ImNv"
    "ZGUiOiIiLCJtZXNzYWdlIjoiIiwicmV0cmlhYmxlIjpmYWxzZSwicmV0cnlBZnRlck1zIjp9LCJvdXRwdXQiOnt9LCJ0ZXJtaW5hbCI6"
    "eyJraW5kIjoiIiwicmVhc29uIjoiIn0sInRyYWNlSWQiOiIiLCJzdGF0dXMiOiJmYWlsZWQiLCJzdGF0dXMiOiJza2lwcGVkIiwiYWdl"
    "bnRJZCI6IiIsIm9wZXJhdGlvbklkIjoiIiwidG9waWNJZCI6IiIsInVzZXJJZCI6IiIsIndvcmtzcGFjZUlkIjoiIiwidHJhY2VwYXJl"
    "bnQiOiIiLCJwYXJlbnRBY3Rpb25JZCI6IiIsInBhcmVudFNpZ25hbElkIjoiIiwiY2hhaW4iOnsiY2hhaW5JZCI6ImNoYWluOiIsInJv"
    "b3RTb3VyY2VJZCI6IiIsInBhcmVudE5vZGVJZCI6IiJ9LCJzaWduYWwiOnsic2lnbmFsSWQiOiIiLCJzaWduYWxUeXBlIjoiIn0seyJu"
    "b2RlcyI6eyJhY3Rpb25zIjpbeyJhY3Rpb25JZCI6IjpzaWduYWw6OmFjdGlvbjoiLCJhY3Rpb25UeXBlIjoiYWN0aW9uLiIsInBheWxv"
    "YWQiOnt9fV0sIm1ldGFkYXRhIjp7ImV2ZW50SWQiOiJldnRfIiwiYXR0ZW1wdCI6MSwic3RhdHVzIjoiY29tcGxldGVkIn0sInJlc3Vs"
    "dHMiOlt7InN0YXR1cyI6ImFwcGxpZWQiLCJhdHRlbXB0Ijp7ImN1cnJlbnQiOjEsIm1heCI6NSwic3RhcnRlZEF0IjosImNvbXBsZXRl"
    "ZEF0IjosInN0YXR1cyI6InN1Y2NlZWRlZCJ9LCJkZXRhaWwiOiIifV0sInNpZ25hbHMiOlt7InNpZ25hbElkIjoiOnNpZ25hbDoiLCJz"
    "aWduYWxUeXBlIjoic2lnbmFsLiIsInBheWxvYWQiOnt9fSx7InRpbWVzdGFtcCI6fV0sInNvdXJjZSI6eyJzb3VyY2VJZCI6IiIsInNv"
    "dXJjZVR5cGUiOiIiLCJzY29wZUtleSI6IiIsInRpbWVzdGFtcCI6LCJwYXlsb2FkIjp7Im1lc3NhZ2UiOiIiLCJtZXNzYWdlSWQiOiIi"
    "fX19LCJkdXJhdGlvbk1zIjo="
)
_V3 = ZstdForm(ZSTD_V3, DICTIONARY_V3)


def deflate_json(text: str | bytes, dictionary: bytes, form: int = DEFLATE_V1) -> bytes:
    """``text`` as the format byte ``form`` and its raw deflate with ``dictionary``: the form chains and lanes
    were stored in before their zstd forms, written now only with ``AGENT_SIGNAL_STORED_FORM=deflate`` (a
    rolling upgrade's first phase); ``python -m bench.dictionaries`` compares with it."""
    deflate = zlib.compressobj(_LEVEL, zlib.DEFLATED, -_WINDOW_BITS, _MEM_LEVEL, zdict=dictionary)
    data = text.encode("utf-8") if isinstance(text, str) else text
    return bytes([form]) + deflate.compress(data) + deflate.flush()


def inflate_json(raw: bytes | str, dictionaries: Mapping[int, bytes], what: str) -> str | bytes:
    """The JSON text of a stored value: a format byte of ``dictionaries`` (format byte -> its dictionary), or
    plain JSON (written before the format byte, and what a decoding client hands over for it). ValueError naming
    ``what`` for anything else."""
    if isinstance(raw, str) or raw[:1] == b"{":
        return raw
    dictionary = dictionaries.get(raw[0]) if raw else None
    if dictionary is None:
        raise ValueError(f"{what} of unknown format {raw[:1]!r}")
    inflate = zlib.decompressobj(-15, zdict=dictionary)
    try:
        return inflate.decompress(raw[1:]) + inflate.flush()
    except zlib.error as exc:
        raise ValueError(f"{what} does not inflate: {exc}") from None


def encode_chain(document_json: bytes, form: StoredForm = "zstd") -> bytes:
    """The stored form of a chain document given as its compact JSON (see the module docstring): format
    ``0x03``, or ``0x02`` when ``form`` is ``"deflate"``."""
    if form == "deflate":
        return deflate_json(document_json, DICTIONARY_V2, DEFLATE_V2)
    return _V3.encode(document_json)


def chain_json(raw: bytes | str) -> str | bytes:
    """The compact JSON of a stored chain of any form: format byte ``0x03``, ``0x02`` or ``0x01``, or plain JSON
    (documents written before the format byte; also what a decoding client hands over for them). ValueError
    for anything else."""
    if isinstance(raw, bytes) and raw[:1] == _V3.first_byte:
        return _V3.decode(raw, "chain document")
    return inflate_json(raw, _CHAIN_DICTIONARIES, "chain document")


def decode_chain(raw: bytes | str) -> dict[str, Any]:
    """The chain document from its stored form (:func:`chain_json`). ValueError for anything else."""
    document = json.loads(chain_json(raw))
    if not isinstance(document, dict):
        raise ValueError("chain document is not a JSON object")
    return document
