"""``agent-signal migrate receipts|runs|bytes``: one JSON object on stdout, and a line per tenant on stderr as it goes
(each tenant's step scans the keyspace, minutes on a large deployment). Straight to the test's Redis."""

from __future__ import annotations

import json
from typing import Any

import pytest

from producers.cli.main import main
from worker.keys.layout import DEFAULT_TENANT, Keys
from worker.settings import settings_environment

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("what", ["receipts", "runs", "bytes"])
def test_migrate_says_each_tenant_as_it_goes(
    make_settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    redis_client: Any,
    what: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = make_settings()
    for name, value in settings_environment(settings).items():
        monkeypatch.setenv(name, value)
    base = Keys(settings.key_prefix, DEFAULT_TENANT, settings.scope_buckets)
    redis_client.sadd(base.tenants, "acme", "globex")
    assert main(["migrate", what, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {what: {"acme": 0, "default": 0, "globex": 0}, "dryRun": True}
    assert err.splitlines() == [
        f"migrate {what}: tenant 1 of 3 (acme): 0",
        f"migrate {what}: tenant 2 of 3 (default): 0",
        f"migrate {what}: tenant 3 of 3 (globex): 0",
    ]


def test_migrate_bytes_finds_a_tenant_of_sessions_only(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch, redis_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cluster audit: a tenant that only wrote sessions never enqueued an event, so the set of tenants did not
    name it and ``migrate bytes`` left its count at nothing. It is found by its users' byte counts now."""
    settings = make_settings()
    for name, value in settings_environment(settings).items():
        monkeypatch.setenv(name, value)
    lam = Keys(settings.key_prefix, "lambda-2", settings.scope_buckets)
    redis_client.hset(lam.user_bytes("uL"), mapping={"d20822": 628})
    assert main(["migrate", "bytes"]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out) == {"bytes": {"default": 0, "lambda-2": 628}, "dryRun": False}
    assert redis_client.hgetall(lam.tenant_bytes) == {"d20822": "628"}
