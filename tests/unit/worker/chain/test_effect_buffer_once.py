"""EffectBuffer.call_once: a SET NX and the commands that run only when it writes (staged.lua's THEN), checked when
staged; and the journal keeps a THEN beside its commands when it splits a commit's writes by slot."""

from __future__ import annotations

import pytest

from worker.chain.context import EffectBuffer
from worker.core.errors import PermanentFailure
from worker.keys.layout import Keys
from worker.store.journal import _split

KEYS = Keys("as:", buckets=4)
HOME = KEYS.for_tenant(KEYS.tenant)  # the receipts' keys: the tenant's home slot
SCOPE = KEYS.for_scope("topic:elsewhere")  # a scope in another bucket


def _mine(name: str) -> str:
    """A plugin's key in the scope's bucket."""
    return SCOPE.plugin("topic:elsewhere", name)


def test_call_once_stages_a_then_with_the_count_of_what_follows() -> None:
    effects = EffectBuffer(keys=SCOPE)
    one, two = HOME.user_receipts("u"), HOME.user_bytes("u")
    effects.call_once(
        ["SET", HOME.receipt("u", "r"), "{}", "NX", "EX", 60], ["ZADD", one, 1, "r"], ["DEL", one, two]
    )
    assert [c[0] for c in effects.to_json_list()] == ["SET", "THEN", "ZADD", "DEL"]
    assert effects.to_json_list()[1] == ["THEN", "2"]


@pytest.mark.parametrize(
    ("first", "why"),
    [
        (["SET", HOME.receipt("u", "r"), "{}", "EX", 60], "SET … NX"),
        (["HSET", HOME.receipt("u", "r"), "f", "v"], "SET … NX"),
    ],
)
def test_call_once_needs_a_set_nx_first(first: list[str | int], why: str) -> None:
    with pytest.raises(PermanentFailure, match=why):
        EffectBuffer(keys=SCOPE).call_once(first, ["ZADD", HOME.user_receipts("u"), 1, "r"])


def test_a_command_of_another_slot_is_refused_and_nothing_is_staged() -> None:
    effects = EffectBuffer(keys=SCOPE)
    with pytest.raises(PermanentFailure, match="in that key's slot"):
        effects.call_once(["SET", HOME.receipt("u", "r"), "{}", "NX"], ["SET", _mine("x"), "1"])
    assert not effects


def test_a_refused_command_after_the_set_unstages_the_set_too() -> None:
    effects = EffectBuffer(keys=SCOPE)
    with pytest.raises(PermanentFailure, match="cannot be staged"):
        effects.call_once(["SET", HOME.receipt("u", "r"), "{}", "NX"], ["FLUSHDB", HOME.user_receipts("u")])
    assert not effects


def test_then_cannot_be_staged_alone() -> None:
    with pytest.raises(PermanentFailure, match="call_once"):
        EffectBuffer(keys=SCOPE).call("THEN", "3")


def test_the_journal_split_keeps_then_beside_its_commands_and_recounts_a_split_del() -> None:
    scope = SCOPE
    one, two = HOME.user_receipts("u"), HOME.user_bytes("u")
    commands = [
        ["SET", _mine("x"), "1"],
        ["SET", HOME.receipt("u", "r"), "{}", "NX"],
        ["THEN", "2"],
        ["DEL", one, two],
        ["PUBLISH", HOME.receipts_feed("u"), "r"],
        ["SET", _mine("y"), "2"],
    ]
    local, other = _split(scope, commands)
    assert local == [["SET", _mine("x"), "1"], ["SET", _mine("y"), "2"]]
    (group,) = other.values()
    assert group == [
        ["SET", HOME.receipt("u", "r"), "{}", "NX"],
        ["THEN", "3"],
        ["DEL", one],
        ["DEL", two],
        ["PUBLISH", HOME.receipts_feed("u"), "r"],
    ]
