"""The id rule: what a ``userId``, ``agentId``, ``workspaceId``, ``topicId``, ``scopeKey``, ``sourceId`` (and a
session id) may look like, checked at the door with a 422 naming the field.

An id is 1 to 256 characters from a safe printable ASCII set: letters, digits and ``_ . : @ / + = - #``. That
admits every id seen in real traffic (``msg_u1``, ``agt_1``, ``topic:tpc_1``, ``user@example.com``,
``tool-outcome:lobe-user-memory:addPreferenceMemory:succeeded:call_1``, base64 and URL-ish ids) and refuses
whitespace, control characters (``\\x1f`` is our own separator inside Redis members), quotes, backslashes,
brackets and non-ASCII look-alikes: ids end up in Redis keys and members, log lines, URLs and the UI.

Two forms of the same rule: :func:`id_problem` (a plain check naming the rule that failed) and :data:`Id`, a
pydantic ``Annotated`` str for models and FastAPI query or path parameters. A user id is never :data:`NO_USER`
(``-``), the user the store files data of no user under (receipts, byte counts). A payload's own ``userId``,
``agentId``, ``workspaceId`` and ``topicId`` (which derive scope keys and conversation members) are checked by
:func:`payload_id_errors`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = [
    "ID_ALLOWED",
    "ID_MAX_LENGTH",
    "NO_USER",
    "PAYLOAD_ID_FIELDS",
    "SCOPE_KEY_MAX_LENGTH",
    "Id",
    "IdProblem",
    "NameId",
    "StoredUserId",
    "UserId",
    "check_id",
    "check_name_id",
    "check_stored_user_id",
    "check_user_id",
    "id_problem",
    "payload_id_errors",
    "scope_key_problem",
    "user_id_problem",
]

ID_MAX_LENGTH = 256
# The user of data whose event named none: receipts are keyed and indexed under it and count toward no user's
# bytes. So no user may have it as an id: that user's token would read, and its erasure delete, every receipt of
# no user, and its own would never be counted.
NO_USER = "-"
ID_ALLOWED = "letters, digits and _ . : @ / + = - #"
NAME_ID_ALLOWED = "letters, digits and _ . @ / + = - #"
USER_ID_ALLOWED = "letters, digits and _ . @ + = - #"
_ID = re.compile(r"[A-Za-z0-9_.:@/+=#-]+")
_BAD = re.compile(r"[^A-Za-z0-9_.:@/+=#-]")
_BAD_USER = re.compile(r"[^A-Za-z0-9_.@+=#-]")
PAYLOAD_ID_FIELDS = ("userId", "agentId", "workspaceId", "topicId")
PAYLOAD_SCOPE_FIELDS = ("taskId", "platform", "applicationId", "platformThreadId")  # derive bot:/task: scopes


class IdProblem(NamedTuple):
    """Which rule an id broke (``length``, ``characters``, or ``reserved``: :data:`NO_USER` as a user id) and a
    readable message."""

    rule: Literal["length", "characters", "reserved"]
    message: str


def id_problem(value: str, *, name: bool = False, max_length: int = ID_MAX_LENGTH) -> IdProblem | None:
    """None when ``value`` is a valid id, else the rule it broke. ``name``: the stricter rule of a user,
    agent, workspace or topic id, which also refuses ``:`` (those ids sit between ``:`` separators inside
    keys such as ``skills:<user>:<agent>``, so ``u1`` + ``x:a`` must never read as ``u1:x`` + ``a``)."""
    if not value:
        return IdProblem("length", "must not be empty")
    if len(value) > max_length:
        return IdProblem("length", f"must be at most {max_length} characters (got {len(value)})")
    if _ID.fullmatch(value) is None:
        bad = _BAD.search(value)
        shown = repr(bad.group(0)) if bad else "a character"
        return IdProblem("characters", f"must not contain {shown} (allowed: {ID_ALLOWED})")
    if name and ":" in value:
        return IdProblem("characters", f"must not contain ':' (allowed: {NAME_ID_ALLOWED})")
    return None


# The longest scope key a producer can cause: one it sends is an id (256), a derived one joins up to three
# payload ids (``bot:<platform>:<applicationId>:<platformThreadId>``, 774), and a user token's is put under
# ``user:<userId>/`` (1,036). A scope key in a path or a query may be this long.
SCOPE_KEY_MAX_LENGTH = 2048


def scope_key_problem(value: str) -> IdProblem | None:
    """None when ``value`` may be a scope key: the id rule's characters, up to :data:`SCOPE_KEY_MAX_LENGTH`."""
    return id_problem(value, max_length=SCOPE_KEY_MAX_LENGTH)


def _no_user_problem(value: str) -> IdProblem | None:
    if value == NO_USER:
        return IdProblem("reserved", f"must not be {NO_USER!r} (it stands for no user)")
    return None


def user_id_problem(value: str) -> IdProblem | None:
    """None when ``value`` is a valid user id: the name rule (no ``:``) without ``/`` either, and not
    :data:`NO_USER`. A user token's events run in its user's own scopes, a foreign one put under
    ``user:<id>/``; were ``/`` allowed, user ``u1``'s scope ``x`` and user ``u1/x``'s own scope ``user:u1/x`` (a
    token's, or derived for an event a key sent) would be one scope, and one user could take the other's next
    ``sourceId``."""
    if (reserved := _no_user_problem(value)) is not None:
        return reserved
    problem = id_problem(value, name=True)
    if problem is not None and problem.rule == "length":
        return problem
    bad = _BAD_USER.search(value)
    if bad is None:
        return None
    return IdProblem("characters", f"must not contain {bad.group(0)!r} (allowed: {USER_ID_ALLOWED})")


def _valid(value: str, problem: IdProblem | None) -> str:
    """``value`` when ``problem`` is None; else pydantic's ``invalid_id`` error (a 422 naming the field)."""
    if problem is not None:
        raise PydanticCustomError(
            "invalid_id", "{message}", {"message": problem.message, "rule": problem.rule}
        )
    return value


def check_user_id(value: str) -> str:
    """``value`` when it is a valid user id (:func:`user_id_problem`); else ``invalid_id``."""
    return _valid(value, user_id_problem(value))


def check_stored_user_id(value: str) -> str:
    """``value`` when it may name a user whose stored data is erased: the name rule (a user id of before the user
    rule may hold ``/``), never :data:`NO_USER`; else ``invalid_id``."""
    return _valid(value, _no_user_problem(value) or id_problem(value, name=True))


def check_id(value: str) -> str:
    """``value`` when valid; else raise pydantic's ``invalid_id`` error (a 422 naming the field)."""
    return _valid(value, id_problem(value))


def check_name_id(value: str) -> str:
    """``value`` when it is a valid user, agent, workspace or topic id (no ``:``); else ``invalid_id``."""
    return _valid(value, id_problem(value, name=True))


NameId = Annotated[
    str,
    AfterValidator(check_name_id),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": ID_MAX_LENGTH, "pattern": "^[A-Za-z0-9_.@/+=#-]+$"}
    ),
]
"""A user, agent, workspace or topic id: the id rule without ``:``."""

UserId = Annotated[
    str,
    AfterValidator(check_user_id),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": ID_MAX_LENGTH,
            "pattern": "^(?!-$)[A-Za-z0-9_.@+=#-]+$",
        }
    ),
]
"""A user id: the name rule without ``/`` either, never ``-`` (:func:`user_id_problem`). Erasure takes
:data:`StoredUserId` and the self-iteration gate :data:`NameId`, so data stored for a user with ``/`` before the
rule can still be erased."""

StoredUserId = Annotated[
    str,
    AfterValidator(check_stored_user_id),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": ID_MAX_LENGTH,
            "pattern": "^(?!-$)[A-Za-z0-9_.@/+=#-]+$",
        }
    ),
]
"""A user whose stored data a route erases: the name rule (``/`` allowed, for data of before the user rule),
never :data:`NO_USER`, whose data is that of every event without a user."""

Id = Annotated[
    str,
    AfterValidator(check_id),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": ID_MAX_LENGTH, "pattern": "^[A-Za-z0-9_.:@/+=#-]+$"}
    ),
]
"""A str that follows the id rule (a model field, or a FastAPI query or path parameter)."""


def payload_id_errors(payload: Mapping[str, Any]) -> list[InitErrorDetails]:
    """The id errors of a payload's own id fields (string values only), located under the payload: the
    user/agent/workspace/topic ids (no ``:``), and the ids a scope key is derived from."""
    errors: list[InitErrorDetails] = []
    for name in (*PAYLOAD_ID_FIELDS, *PAYLOAD_SCOPE_FIELDS):
        value = payload.get(name)
        # An empty string reads as absent (as scope derivation does); other types are not ids to check.
        named = name in PAYLOAD_ID_FIELDS
        problem = None
        if isinstance(value, str) and value:
            problem = user_id_problem(value) if name == "userId" else id_problem(value, name=named)
        if problem is not None:
            error = PydanticCustomError("invalid_id", "{message}", {"message": problem.message})
            errors.append(InitErrorDetails(type=error, loc=(name,), input=value))
    return errors
