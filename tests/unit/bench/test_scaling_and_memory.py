"""The bench's scaling and memory sections: key families, row formatting and section selection (no timing)."""

from __future__ import annotations

from bench.__main__ import SECTIONS, parse_args
from bench.memory_bench import Family, ReceiptMemory, RetainedMemory, family_of, sample_receipt
from bench.scaling_bench import Scaling
from worker.keys.layout import BucketKeys

PREFIX = "bench-test:"


class TestFamilyOf:
    def test_tenant_key_families_are_the_segment_after_the_tenant(self) -> None:
        """ev:, chain:, inbox: and runs: name the part after ``<prefix>t:<tenant>:``, whatever the tenant."""
        for keys in (BucketKeys(PREFIX), BucketKeys(PREFIX, "acme")):
            assert family_of(keys.event("evt_1"), PREFIX) == "ev:"
            assert family_of(keys.chain("c1"), PREFIX) == "chain:"
            assert family_of(keys.inbox("topic:a"), PREFIX) == "inbox:"
            assert family_of(keys.runs("status", "done"), PREFIX) == "runs:"

    def test_a_key_without_a_colon_after_the_family_is_named_bare(self) -> None:
        """The tenant's stats hash is the family ``stats``."""
        assert family_of(BucketKeys(PREFIX).stats, PREFIX) == "stats"

    def test_engine_wide_and_foreign_keys_are_marked(self) -> None:
        """Keys after the prefix alone are ``(engine)``; keys of another prefix are outside it."""
        keys = BucketKeys(PREFIX)
        assert family_of(keys.broker_queue("q"), PREFIX) == "broker: (engine)"
        assert family_of(keys.workers, PREFIX) == "workers (engine)"
        assert family_of(BucketKeys("other:").event("evt_1"), PREFIX) == "(outside the prefix)"


class TestRetainedMemory:
    def test_rows_give_bytes_per_event_and_the_unattributed_rest(self) -> None:
        """Delta / events is the headline; families and what no key holds are per event too."""
        memory = RetainedMemory(
            events=100, scopes=10, used_memory_delta=500_000, families=[Family("chain:", 100, 300_000)]
        )
        rows = memory.rows()
        assert rows[0][:2] == ("memory per retained event", "5,000 bytes")
        assert rows[1][:2] == ("  of which chain:", "3,000 bytes")
        assert rows[-1][:2] == ("  not in any key", "2,000 bytes")
        figures = memory.figures()
        assert figures["memory_per_retained_event_bytes"] == 5000
        assert figures["memory_family_chain_bytes_per_event"] == 3000

    def test_receipts_get_their_own_row_and_figure(self) -> None:
        """Memory per receipt is the receipts' delta over their number, printed after the event rows."""
        memory = RetainedMemory(100, 10, 500_000, [], ReceiptMemory(receipts=10, used_memory_delta=4_000))
        assert memory.rows()[-1][:2] == ("memory per receipt", "400 bytes")
        assert "10 receipts" in memory.rows()[-1][3]
        assert memory.figures()["memory_per_receipt_bytes"] == 400

    def test_sample_receipts_share_an_index_ten_at_a_time(self) -> None:
        """The sample receipts have distinct ids and LobeHub's owner fields, ten per user/agent/topic."""
        first, tenth, eleventh = (sample_receipt(i, 0) for i in (0, 9, 10))
        assert len({first["id"], tenth["id"], eleventh["id"]}) == 3
        assert (first["userId"], first["topicId"]) == (tenth["userId"], tenth["topicId"])
        assert first["userId"] != eleventh["userId"]

    def test_engine_families_get_json_safe_names(self) -> None:
        """``by-source:`` and ``metrics: (engine)`` become identifier-like figure names."""
        memory = RetainedMemory(1, 1, 10, [Family("by-source:", 1, 4), Family("metrics: (engine)", 1, 2)])
        assert "memory_family_by_source_bytes_per_event" in memory.figures()
        assert "memory_family_metrics_engine_bytes_per_event" in memory.figures()


class TestScaling:
    def test_ratios_are_to_one_process_and_oversubscription_is_labelled(self) -> None:
        """Each shape's rows divide by its 1-process rate; counts above the cores say they cannot scale."""
        scaling = Scaling(
            spread_events=50,
            burst_events=100,
            spread={1: 100.0, 2: 183.0, 4: 210.0},
            burst={1: 200.0, 2: 300.0, 4: 300.0},
            cpu_count=2,
        )
        rows = {label: (ratio, note) for label, _value, ratio, note in scaling.rows()}
        assert rows["scale 1 proc, spread"][0] == "1.00x"
        assert "2 CPU cores" in rows["scale 1 proc, spread"][1]
        assert rows["scale 2 procs, spread"] == ("1.83x", "")
        assert rows["scale 4 procs, spread"][0] == "2.10x"
        assert "cannot pass ~2x" in rows["scale 4 procs, spread"][1]
        assert rows["scale 2 procs, burst (8 scopes)"][0] == "1.50x"
        assert scaling.figures()["scale_spread_2_procs_ratio"] == 1.83
        assert "2 CPU cores" in scaling.notes()[0]


class TestSectionSelection:
    def test_only_and_skip_name_sections(self) -> None:
        """--only keeps the named sections, --skip drops them; the memory size has its own flag."""
        args = parse_args(["--only", "scaling", "--only", "memory", "--memory-events", "500"])
        assert args.only == ["scaling", "memory"] and args.memory_events == 500
        assert parse_args(["--skip", "scaling"]).skip == ["scaling"]
        assert {"pipeline", "routing", "ingest", "scaling", "memory"} <= set(SECTIONS)  # and newer ones
