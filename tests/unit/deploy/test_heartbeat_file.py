"""worker/runtime/heartbeat_file.py: the worker's beat on disk, atomic writes, and what a probe concludes from it."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from worker.runtime import heartbeat_file as hb
from worker.runtime.app import _sweep_forever

BEAT = hb.Beat(node="agent-signal-1@pod-a", pid=1, at_ms=1_000_000)


class TestWriteAndRead:
    def test_a_written_beat_reads_back(self, tmp_path: Path) -> None:
        """write then read returns the same beat, in a directory write creates."""
        path = tmp_path / "sub" / "heartbeat.json"
        hb.write(path, BEAT)
        assert hb.read(path) == BEAT

    def test_write_replaces_atomically_and_leaves_no_temp_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The new beat reaches the path through os.replace; only the heartbeat file remains."""
        path = tmp_path / "heartbeat.json"
        hb.write(path, BEAT)
        replaced: list[tuple[Any, Any]] = []
        real_replace = os.replace

        def spy(src: Any, dst: Any) -> None:
            replaced.append((src, dst))
            assert hb.read(path) == BEAT  # until the replace, readers see the whole old beat
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", spy)
        hb.write(path, hb.Beat(BEAT.node, BEAT.pid, BEAT.at_ms + 1))
        assert [Path(dst) for _, dst in replaced] == [path]
        assert hb.read(path) == hb.Beat(BEAT.node, BEAT.pid, BEAT.at_ms + 1)
        assert [p.name for p in tmp_path.iterdir()] == ["heartbeat.json"]

    def test_a_failed_write_keeps_the_old_beat_and_no_temp_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """When the replace fails, the old beat stays and the temporary file is removed."""
        path = tmp_path / "heartbeat.json"
        hb.write(path, BEAT)

        def fail(src: Any, dst: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "replace", fail)
        with pytest.raises(OSError):
            hb.write(path, hb.Beat(BEAT.node, BEAT.pid, BEAT.at_ms + 1))
        assert hb.read(path) == BEAT
        assert [p.name for p in tmp_path.iterdir()] == ["heartbeat.json"]

    def test_missing_is_none_and_garbage_is_an_error(self, tmp_path: Path) -> None:
        """No file reads as None; a file that is not a beat raises ValueError naming the path."""
        assert hb.read(tmp_path / "none.json") is None
        (tmp_path / "bad.json").write_text('{"node": "x"}')
        with pytest.raises(ValueError, match=r"bad\.json"):
            hb.read(tmp_path / "bad.json")


class TestCheck:
    def test_fresh_is_ok(self, tmp_path: Path) -> None:
        """A beat younger than the maximum age passes, and the line names the node."""
        hb.write(tmp_path / "hb", BEAT)
        verdict = hb.check(tmp_path / "hb", max_age_s=60, now_s=1_030)
        assert verdict.ok and BEAT.node in verdict.reason

    def test_stale_missing_and_unreadable_fail(self, tmp_path: Path) -> None:
        """An old beat, no file and a garbled file each fail with their own reason."""
        hb.write(tmp_path / "hb", BEAT)
        assert hb.check(tmp_path / "hb", max_age_s=60, now_s=1_061) == hb.Verdict(
            False, f"{BEAT.node}: stale heartbeat, 61.0 s old (max 60 s)"
        )
        assert "no heartbeat" in hb.check(tmp_path / "none", max_age_s=60, now_s=1_000).reason
        (tmp_path / "bad").write_text("not json")
        assert "unreadable" in hb.check(tmp_path / "bad", max_age_s=60, now_s=1_000).reason

    def test_draining_fails_readiness_not_liveness(self, tmp_path: Path) -> None:
        """With the drain flag set, readiness fails and liveness still passes."""
        hb.write(tmp_path / "hb", BEAT)
        hb.mark_draining(tmp_path / "hb")
        assert not hb.check(tmp_path / "hb", max_age_s=60, now_s=1_001).ok
        assert hb.check(tmp_path / "hb", max_age_s=60, now_s=1_001, ready=False).ok

    def test_a_new_process_clears_an_old_drain_flag(self, tmp_path: Path) -> None:
        """start (a process's first beat) removes the flag a previous process in the pod left."""
        hb.mark_draining(tmp_path / "hb")
        hb.start(tmp_path / "hb", BEAT)
        assert not hb.is_draining(tmp_path / "hb")
        assert hb.check(tmp_path / "hb", max_age_s=60, now_s=1_001).ok

    def test_default_max_age_spans_several_beats(self) -> None:
        """A beat counts as stale only after several loop intervals."""
        assert hb.default_max_age_s(15.0) == 60.0


class TestWorkerLoop:
    def test_the_sweep_loop_writes_the_heartbeat_file(self, make_settings: Any, tmp_path: Path) -> None:
        """The worker's background loop beats into AGENT_SIGNAL_HEARTBEAT_FILE at start, clearing a drain flag."""
        path = tmp_path / "agent-signal" / "heartbeat.json"
        hb.mark_draining(path)
        settings = make_settings(heartbeat_file=str(path))
        stop = threading.Event()
        stop.set()  # one pass: the first beat, then the loop ends
        _sweep_forever(None, settings, stop, "agent-signal-7@pod-b")  # type: ignore[arg-type]
        beat = hb.read(path)
        assert beat is not None and beat.node == "agent-signal-7@pod-b" and beat.pid == os.getpid()
        assert not hb.is_draining(path)

    def test_redis_down_at_start_does_not_end_the_loop(
        self, make_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A deploy audit: the first heartbeat to Redis ran outside the loop's ``try``, so a Redis error at start
        ended the thread and the heartbeat file was never written again (the probe then restarted the pod). Now
        the loop goes on and beats into the file at its next pass."""
        import worker.runtime.app as runtime

        path = tmp_path / "heartbeat.json"
        settings = make_settings(
            heartbeat_file=str(path), reconcile_interval_s=0.01, redis_url="redis://127.0.0.1:1/0"
        )
        beats: list[bool] = []
        real_beat = runtime._beat
        stop = threading.Event()

        def beat(p: str, hostname: str, *, first: bool = False) -> None:
            real_beat(p, hostname, first=first)
            beats.append(first)
            if len(beats) >= 3:
                stop.set()

        monkeypatch.setattr(runtime, "_beat", beat)
        _sweep_forever(None, settings, stop, "agent-signal-7@pod-b")  # type: ignore[arg-type]
        assert beats[:3] == [True, False, False]  # the loop's beats came after the failed first one
        assert hb.read(path) is not None

    def test_no_setting_writes_nothing(self, make_settings: Any, tmp_path: Path) -> None:
        """With the setting unset (the default) the loop writes no file."""
        stop = threading.Event()
        stop.set()
        _sweep_forever(None, make_settings(), stop, "agent-signal-7@pod-b")  # type: ignore[arg-type]
        assert list(tmp_path.iterdir()) == []
