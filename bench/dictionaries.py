"""The zstd dictionaries that chains and idempotency lanes are stored with, and what each stored form costs in
bytes.

``python -m bench.dictionaries`` replays examples/events.jsonl (the welcome workload ``make run`` replays; its
last event is refused by design and left out), ``--copies`` times under new source ids, through the engine in
this process on a private embedded Redis, reads back the JSON of every chain and lane it stored, and prints the
mean stored bytes of those values in each form: the deflate forms written before (chain 0x02, lane 0x01), the
frozen zstd forms (chain 0x03, lane 0x02) and a candidate: a zstd dictionary per kind made from the same frozen
vocabulary (DICTIONARY_V2, LANE_DICTIONARY_V1) with entropy tables fitted to these values (zstd's
``ZDICT_finalizeDictionary``, through ``backports.zstd``, a development dependency). ``--print`` adds the
candidates' base64, what a NEW format byte would freeze: the values carry the run's times and ids, so two runs
fit slightly different tables, and a frozen dictionary is never replaced (stored values must decode for their
whole retention).
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis import Redis

from bench._env import ROOT, cleanup, make_settings, private_redis_url
from producers import Producer
from worker.documents.chain_codec import DEFLATE_V2, DICTIONARY_V2, chain_json, deflate_json, encode_chain
from worker.documents.lane_codec import LANE_DICTIONARY_V1, decode_lane, encode_lane
from worker.documents.zstd_form import LEVEL, ZstdForm
from worker.intake.source_event import InvalidEvent
from worker.runtime.app import build_pipeline

EXAMPLES = ROOT / "examples" / "events.jsonl"
DICTIONARY_CAPACITY = 4096  # bytes a candidate may take: the vocabulary and its tables fit with room to spare


def stored_values(examples: Path, copies: int) -> tuple[list[bytes], list[bytes]]:
    """(chains, lanes): the compact JSON of every chain and lane the engine stored for ``copies`` replays of
    ``examples``."""
    events = [json.loads(line) for line in examples.read_text().splitlines() if line.strip()]
    with private_redis_url() as url:
        settings = make_settings(url)
        producer = Producer(settings)
        pipeline = build_pipeline(settings)
        prepared = []
        for copy in range(copies):
            for event in events:
                try:
                    prepared.append(
                        producer.emitter.validate(
                            {**event, "sourceId": f"{event['sourceId']}-{copy}"}, tenant=producer.tenant
                        )
                    )
                except InvalidEvent:
                    continue  # the example that shows a refusal
        producer.enqueue_prepared(prepared)
        for scope in sorted({p.scope_key for p in prepared}):
            while pipeline.drain_scope(scope).next == "again":
                pass
        raw = Redis.from_url(url)
        chains, lanes = [], []
        for key in raw.scan_iter(match=f"{settings.key_prefix}*", count=1000):
            name = key.decode()
            if raw.type(key) != b"string":
                continue
            if ":chain:" in name:
                chains.append(_text(chain_json(raw.get(key) or b"")))
            elif ":idem:" in name:
                lanes.append(_text(decode_lane(raw.get(key) or b"")))
        cleanup(raw, settings.key_prefix)
        raw.close()
        producer.close()
    return chains, lanes


def _text(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def candidate(vocabulary: bytes, values: list[bytes]) -> bytes:
    """A zstd dictionary: ``vocabulary`` as its content, with entropy tables fitted to ``values``."""
    if sys.version_info >= (3, 14):
        from compression import zstd  # type: ignore[import-not-found, unused-ignore]
    else:
        from backports import zstd  # type: ignore[import-not-found, unused-ignore]
    raw = zstd.ZstdDict(vocabulary, is_raw=True)
    return bytes(zstd.finalize_dict(raw, values, DICTIONARY_CAPACITY, LEVEL).dict_content)


def mean_bytes(encode: Callable[[bytes], bytes], values: list[bytes]) -> float:
    return statistics.fmean(len(encode(v)) for v in values)


def report(chains: list[bytes], lanes: list[bytes], *, show: bool) -> dict[str, Any]:
    """Rows of mean stored bytes per form and kind (and the candidates' base64 when ``show``)."""
    out: dict[str, Any] = {"chains": len(chains), "lanes": len(lanes)}
    kinds: list[tuple[str, list[bytes], bytes, Callable[[bytes], bytes], Callable[[bytes], bytes]]] = [
        ("chain", chains, DICTIONARY_V2, lambda v: deflate_json(v, DICTIONARY_V2, DEFLATE_V2), encode_chain),
        ("lane", lanes, LANE_DICTIONARY_V1, lambda v: deflate_json(v, LANE_DICTIONARY_V1), _lane),
    ]
    for kind, values, vocabulary, deflated, frozen in kinds:
        fitted = candidate(vocabulary, values)
        out[kind] = {
            "json": statistics.fmean(len(v) for v in values),
            "deflate": mean_bytes(deflated, values),
            "zstd": mean_bytes(frozen, values),
            "candidate": mean_bytes(ZstdForm(0, fitted).encode, values),
        }
        if show:
            out[kind]["candidateBase64"] = base64.b64encode(fitted).decode("ascii")
    return out


def _lane(value: bytes) -> bytes:
    return encode_lane(value.decode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dictionaries", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--copies", type=int, default=20, help="replays of the examples (default 20)")
    parser.add_argument("--print", action="store_true", help="print the candidate dictionaries' base64")
    args = parser.parse_args(argv)
    if args.copies < 1:
        parser.error("--copies must be at least 1")
    chains, lanes = stored_values(EXAMPLES, args.copies)
    result = report(chains, lanes, show=args.print)
    print(
        f"{result['chains']} chains and {result['lanes']} lanes of {args.copies} replays of {EXAMPLES.name}"
    )
    print(f"{'mean bytes':<10} {'json':>7} {'deflate':>8} {'zstd':>7} {'candidate':>10}")
    for kind in ("chain", "lane"):
        row = result[kind]
        print(
            f"{kind:<10} {row['json']:>7.1f} {row['deflate']:>8.1f} {row['zstd']:>7.1f} {row['candidate']:>10.1f}"
        )
    if args.print:
        for kind in ("chain", "lane"):
            print(f"{kind} candidate: {result[kind]['candidateBase64']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
