"""Two writes moving one session to different users at once: it ends in the last writer's user's session index
only (each write used to read the user before the other wrote, and the session stayed in both indexes, so an
erasure of the earlier user dropped the later one's session). Real Redis; the race is made to happen: the
first read of the session's user lets the other write in right after it."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from sessions.store import SessionLimits, SessionStore
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration


class _Interleaved:
    """The client, but the first read of the session's user (HGET or HGETALL, in a pipeline or not) runs
    ``meanwhile`` right after it."""

    def __init__(self, client: Redis, meanwhile: Any) -> None:
        self._client, self._meanwhile, self._done = client, meanwhile, False

    def _after_first_read(self, value: Any) -> Any:
        if not self._done:
            self._done = True
            self._meanwhile()
        return value

    def hgetall(self, *args: Any) -> Any:
        return self._after_first_read(self._client.hgetall(*args))

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        pipe = self._client.pipeline(*args, **kwargs)
        hget = pipe.hget

        def read(*a: Any) -> Any:
            return self._after_first_read(hget(*a))

        pipe.hget = read  # type: ignore[method-assign]
        return pipe

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_session_moved_by_two_writes_is_in_one_users_index(redis_client: Redis, keys: BucketKeys) -> None:
    honest = SessionStore(redis_client, keys, SessionLimits())
    honest.update_settings("s-race", {"userId": "alice"})
    racing = SessionStore(
        _Interleaved(redis_client, lambda: honest.update_settings("s-race", {"userId": "bob"})),  # type: ignore[arg-type]
        keys,
        SessionLimits(),
        scripts=honest.scripts,
    )
    racing.update_settings("s-race", {"userId": "carol"})
    assert honest.get_settings("s-race").user_id == "carol"
    indexed = {
        u for u in ("alice", "bob", "carol") if redis_client.sismember(keys.user_sessions(u), "s-race")
    }
    assert indexed == {"carol"}


def test_a_settings_write_that_never_gets_through_ends_in_contention(
    redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session script refreshes the settings' TTL, so a busy session keeps invalidating the write's WATCH:
    it retried for ever; it now gives up with ContentionError (the door's 503) after its tries."""
    from sessions import store as store_module

    monkeypatch.setattr(store_module, "SETTINGS_RETRIES", 3)
    honest = SessionStore(redis_client, keys, SessionLimits())
    honest.update_settings("s-busy", {"userId": "alice"})
    touches = 0

    def touch() -> None:
        nonlocal touches
        touches += 1
        redis_client.expire(keys.session("session:s-busy"), 60)

    class Always(_Interleaved):
        def _after_first_read(self, value: Any) -> Any:
            touch()
            return value

    busy = SessionStore(Always(redis_client, touch), keys, SessionLimits(), scripts=honest.scripts)  # type: ignore[arg-type]
    with pytest.raises(store_module.ContentionError):
        busy.update_settings("s-busy", {"userId": "bob"})
    assert touches == 3 and honest.get_settings("s-busy").user_id == "alice"


class _MovedAfterRead(_Interleaved):
    """The client, but the first plain HGET (the session's user, read before a session script) runs
    ``meanwhile`` right after it."""

    def hget(self, *args: Any) -> Any:
        return self._after_first_read(self._client.hget(*args))


def _counted(redis_client: Redis, keys: BucketKeys, user: str) -> int:
    return sum(int(v) for v in redis_client.hgetall(keys.user_bytes(user)).values())


def test_a_write_to_a_session_moved_meanwhile_counts_for_its_new_user(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """A session script took the user it read before it ran: a session moved to another user in between had
    that write's bytes counted for the previous one (and refused or let through by the previous one's quota). The
    script now finds the move, writes nothing, and the store reads the user again."""
    honest = SessionStore(redis_client, keys, SessionLimits())
    honest.update_settings("s-moved", {"userId": "alice"})
    moving = SessionStore(
        _MovedAfterRead(redis_client, lambda: honest.update_settings("s-moved", {"userId": "bob"})),  # type: ignore[arg-type]
        keys,
        SessionLimits(),
        scripts=honest.scripts,
    )
    moving.append("s-moved", [{"role": "user", "content": "x" * 400}])
    assert _counted(redis_client, keys, "alice") == 0
    assert _counted(redis_client, keys, "bob") >= 400
    assert [r["content"] for r in honest.records("s-moved")] == ["x" * 400]  # written once, not twice


def test_a_session_that_keeps_moving_ends_in_contention(
    redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session moved to another user before every try writes nothing, and the store gives up with
    ContentionError (the door's 503) after its tries instead of looping for ever."""
    from sessions import store as store_module

    monkeypatch.setattr(store_module, "MOVE_RETRIES", 3)
    honest = SessionStore(redis_client, keys, SessionLimits())
    honest.update_settings("s-moving", {"userId": "u0"})
    moves = 0

    def move() -> None:
        nonlocal moves
        moves += 1
        honest.update_settings("s-moving", {"userId": f"u{moves}"})

    class Always(_MovedAfterRead):
        def _after_first_read(self, value: Any) -> Any:
            move()
            return value

    busy = SessionStore(Always(redis_client, move), keys, SessionLimits(), scripts=honest.scripts)  # type: ignore[arg-type]
    with pytest.raises(store_module.ContentionError):
        busy.append("s-moving", [{"role": "user", "content": "hi"}])
    assert moves == 3 and honest.records("s-moving") == []
