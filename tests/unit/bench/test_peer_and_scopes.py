"""The bench's peer and scopes sections: the peer task's body, its app and workers' command line, row formatting,
the fill/window plan and --scope-counts (no worker is started and nothing is timed)."""

from __future__ import annotations

import json

import pytest
from redis import Redis
from redis.lock import Lock

from bench.__main__ import SECTIONS, parse_args
from bench.peer_app import (
    PEER_TASK,
    PREFIX_ENV,
    REDIS_URL_ENV,
    Outcome,
    PeerKeys,
    apply_event,
    create_peer_app,
)
from bench.peer_bench import PeerComparison, peer_env, worker_argv
from bench.scopes_bench import DEFAULT_SCOPE_COUNTS, ScopeGrowth, parse_scope_counts, scope_shapes


class TestApplyEvent:
    def test_an_event_writes_its_effect_receipt_index_and_done_once(
        self, redis_client: Redis, prefix: str
    ) -> None:
        """Applied: counter +1, a receipt with a TTL, the index entry, done +1, and the lock is free again."""
        keys = PeerKeys(prefix)
        assert apply_event(redis_client, keys, "e1", "topic:a", "task-1") is Outcome.APPLIED
        assert redis_client.hget(keys.activity, "topic:a") == "1"
        assert json.loads(str(redis_client.get(keys.receipt("e1"))))["scope"] == "topic:a"
        assert 0 < int(redis_client.ttl(keys.receipt("e1")))
        assert redis_client.lrange(keys.receipts("topic:a"), 0, -1) == ["e1"]
        assert redis_client.get(keys.done) == "1"
        assert not redis_client.exists(keys.lock("topic:a"))

    def test_a_second_delivery_of_the_same_event_writes_nothing(
        self, redis_client: Redis, prefix: str
    ) -> None:
        """The SET NX claim is taken: DUPLICATE, and the counter stays at one."""
        keys = PeerKeys(prefix)
        apply_event(redis_client, keys, "e1", "topic:a", "task-1")
        assert apply_event(redis_client, keys, "e1", "topic:a", "task-1") is Outcome.DUPLICATE
        assert redis_client.hget(keys.activity, "topic:a") == "1"
        assert redis_client.get(keys.done) == "1"

    def test_a_locked_scope_gives_the_claim_back_so_the_retry_applies(
        self, redis_client: Redis, prefix: str
    ) -> None:
        """BUSY drops the dedupe key and counts the retry; once the lock is free the same event applies."""
        keys = PeerKeys(prefix)
        holder = Lock(redis_client, keys.lock("topic:a"), timeout=5)
        assert holder.acquire()
        assert apply_event(redis_client, keys, "e1", "topic:a", "task-1") is Outcome.BUSY
        assert not redis_client.exists(keys.dedupe("e1"))
        assert not redis_client.exists(keys.activity)
        assert redis_client.get(keys.busy) == "1"
        holder.release()
        assert apply_event(redis_client, keys, "e1", "topic:a", "task-1") is Outcome.APPLIED


class TestPeerApp:
    def test_the_app_is_acks_late_json_under_its_prefix(self) -> None:
        """One registered task; acks-late, prefetch 1, its own queue and broker keys under the prefix."""
        app = create_peer_app("unix:///tmp/redis.sock?db=0", "peer-test:")
        conf = app.conf
        assert PEER_TASK in app.tasks
        assert conf.task_acks_late and conf.task_reject_on_worker_lost
        assert conf.worker_prefetch_multiplier == 1
        assert conf.accept_content == ["json"]
        assert conf.task_default_queue == "peer-test"
        assert conf.broker_transport_options["global_keyprefix"] == "peer-test:broker:"
        assert conf.broker_url == "redis+socket:///tmp/redis.sock?virtual_host=0"

    def test_every_key_is_under_the_prefix(self) -> None:
        """Cleanup deletes by prefix, so no key may fall outside it."""
        keys = PeerKeys("peer-test:")
        names = [keys.dedupe("e"), keys.lock("s"), keys.receipt("e"), keys.receipts("s"), keys.activity]
        names += [keys.done, keys.busy, keys.ready, keys.broker_prefix]
        assert all(name.startswith("peer-test:") for name in names)

    def test_workers_run_like_ours_and_get_the_url_and_prefix_from_the_environment(self) -> None:
        """prefork, one child, their queue; the two variables main() reads are set for the subprocess."""
        argv = worker_argv(PeerKeys("peer-test:"), 0)
        assert argv[1:4] == ["-m", "bench.peer_app", "worker"]
        flags = dict(zip(argv[4::2], argv[5::2], strict=False))
        assert flags["--pool"] == "prefork" and flags["--concurrency"] == "1"
        assert flags["--queues"] == "peer-test"
        env = peer_env("redis://example:6379/0", "peer-test:")
        assert env[REDIS_URL_ENV] == "redis://example:6379/0" and env[PREFIX_ENV] == "peer-test:"


def comparison(applied: int = 3000) -> PeerComparison:
    return PeerComparison(
        burst_events=2000,
        spread_events=1000,
        peer_burst=800.0,
        peer_spread=500.0,
        ours_burst=2000.0,
        ours_spread=600.0,
        sent=3000,
        applied=applied,
        busy_retries=4,
        send_share=0.5,
    )


class TestPeerComparison:
    def test_peer_rows_are_baselines_and_ours_are_ratios_to_them(self) -> None:
        """The peer's own rows start with ``peer``; ours / peer is written N.NNx."""
        rows = {label: (value, ratio, note) for label, value, ratio, note in comparison().rows()}
        assert rows["peer task (SET NX + Lock), burst"][:2] == ("800 events/s", "1.00x")
        assert "2,000 events over 8 scopes" in rows["peer task (SET NX + Lock), burst"][2]
        assert rows["peer task (SET NX + Lock), spread"][:2] == ("500 events/s", "1.00x")
        assert rows["pipeline, burst vs peer"][:2] == ("2,000 vs 800 events/s", "2.50x")
        assert rows["pipeline, spread vs peer"][1] == "1.20x"
        assert rows["peer effects applied exactly once"][2].startswith("OK; 4 lock-busy")

    def test_a_double_apply_is_reported(self) -> None:
        """Counters above the events sent: the check row and a footnote say MISMATCH."""
        result = comparison(applied=3001)
        assert not result.exactly_once
        assert "MISMATCH" in result.rows()[-1][3]
        assert any("MISMATCH" in note for note in result.notes())
        assert "took 50% of the peer's measured time" in result.notes()[0]

    def test_figures_carry_both_sides_and_the_ratios(self) -> None:
        figures = comparison().figures()
        assert figures["peer_burst_events_per_s"] == 800.0
        assert figures["pipeline_burst_vs_peer_ratio"] == 2.5
        assert figures["peer_effects_applied"] == 3000.0


class TestScopeShapes:
    def test_fills_and_windows_bring_the_tenant_to_each_count(self) -> None:
        """Default counts: before + window (100); fill, before, window -> 10,000; again -> exactly 100,000."""
        shapes = scope_shapes(4000, DEFAULT_SCOPE_COUNTS)
        assert shapes == [
            ("before", (4000, 50)),
            ("window", (4000, 50)),
            ("fill", (9800, 9800)),
            ("before", (4000, 50)),
            ("window", (4000, 50)),
            ("fill", (89_900, 89_900)),
            ("before", (4000, 50)),
            ("window", (4000, 50)),
        ]
        assert sum(scopes for _kind, (_n, scopes) in shapes) == 100_000

    def test_counts_parse_and_must_rise_by_two_windows(self) -> None:
        """The first count is even (two windows' scopes); each next one leaves room for both windows."""
        assert parse_scope_counts("100,10_000, 100000") == (100, 10_000, 100_000)
        assert parse_scope_counts("100,200") == (100, 200)
        with pytest.raises(ValueError, match="at least 100"):
            parse_scope_counts("100,150")
        with pytest.raises(ValueError, match="even"):
            parse_scope_counts("101,1000")


class TestScopeGrowth:
    def test_windows_are_ratios_to_the_first_and_fills_to_the_first_fill(self) -> None:
        """Each row's note gives the window before it, as a ratio to the baseline too."""
        growth = ScopeGrowth(
            events=4000,
            counts=(100, 10_000),
            windows={100: 2000.0, 10_000: 1900.0},
            before={100: 1800.0, 10_000: 1000.0},
            fills=[(100, 9900, 1000.0)],
        )
        rows = {label: (value, ratio, note) for label, value, ratio, note in growth.rows()}
        assert rows["pipeline, 100 scopes"][:2] == ("2,000 events/s", "1.00x")
        assert "over 50 fresh scopes (80/scope), the last of 100" in rows["pipeline, 100 scopes"][2]
        assert "the first on fresh workers: 1,800 events/s (0.90x)" in rows["pipeline, 100 scopes"][2]
        assert rows["pipeline, 10,000 scopes"][1] == "0.95x"
        assert "right after the fill: 1,000 events/s (0.50x)" in rows["pipeline, 10,000 scopes"][2]
        assert rows["pipeline, fill 100 -> 9,900 scopes"][1:] == (
            "1.00x",
            "baseline, 9,800 events, 1 event/scope",
        )
        assert growth.figures()["scopes_10000_ratio"] == 0.95
        assert growth.figures()["scopes_10000_window_before_events_per_s"] == 1000.0


class TestArguments:
    def test_peer_and_scopes_are_sections_run_by_default(self) -> None:
        """Both are in SECTIONS (so no --only runs them); --scope-counts defaults to 100, 10,000, 100,000."""
        assert {"peer", "scopes"} <= set(SECTIONS)
        args = parse_args([])
        assert args.only is None and args.scope_counts == DEFAULT_SCOPE_COUNTS
        assert parse_args(["--only", "scopes", "--scope-counts", "100,1000"]).scope_counts == (100, 1000)

    def test_bad_scope_counts_are_an_argument_error(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit):
            parse_args(["--scope-counts", "100,150"])
        assert "at least 100" in capsys.readouterr().err
