"""worker/telemetry/pseudonyms.py: one key per deployment, from the setting or created once in Redis."""

from __future__ import annotations

import pytest
from redis import Redis

from producers.cli.main import main
from tests.conftest import SettingsFactory
from worker.keys.layout import BucketKeys
from worker.settings import SettingsError, check_settings
from worker.telemetry.pseudonyms import load_pseudonyms


def test_without_the_setting_every_process_shares_the_secret_kept_in_redis(
    make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """Two loads (two processes) create the secret once (SET NX) and give one id the same pseudonym."""
    settings = make_settings()
    first, second = load_pseudonyms(redis_client, settings), load_pseudonyms(redis_client, settings)
    assert first.of("u1") == second.of("u1") != first.of("u2")
    assert len(str(redis_client.get(keys.pseudonym_secret))) >= 32


def test_the_setting_wins_and_changing_it_unlinks_old_pseudonyms(
    make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """AGENT_SIGNAL_PSEUDONYM_SECRET is the key (nothing is stored); another secret, other pseudonyms."""
    one = load_pseudonyms(redis_client, make_settings(pseudonym_secret="a" * 32))
    other = load_pseudonyms(redis_client, make_settings(pseudonym_secret="b" * 32))
    assert one.of("u1") != other.of("u1") and not redis_client.exists(keys.pseudonym_secret)


def test_a_short_secret_is_refused_at_boot_without_showing_it(make_settings: SettingsFactory) -> None:
    """Fewer than 32 characters: the process refuses to start, naming the variable, never the value."""
    with pytest.raises(SettingsError, match="AGENT_SIGNAL_PSEUDONYM_SECRET") as refused:
        check_settings(make_settings(pseudonym_secret="short-secret"))
    assert "short-secret" not in str(refused.value)


def test_the_cli_prints_the_pseudonym_the_processes_log(
    make_settings: SettingsFactory,
    redis_client: Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``agent-signal pseudonym ID…`` prints ``<id>\\t<pseudonym>`` with the deployment's key (from Redis)."""
    settings = make_settings()
    monkeypatch.setenv("REDIS_URL", str(settings.redis_url))
    monkeypatch.setenv("AGENT_SIGNAL_KEY_PREFIX", settings.key_prefix)
    expected = load_pseudonyms(redis_client, settings)  # a process of the deployment made the secret
    assert main(["pseudonym", "u1", "u2"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"u1\t{expected.of('u1')}", f"u2\t{expected.of('u2')}"]


def test_the_cli_only_reads_the_secret_and_says_when_there_is_none(
    make_settings: SettingsFactory,
    redis_client: Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An audit: with a mistyped key prefix the verb made a new secret there and printed a pseudonym no log line
    holds (a false "never appears"). It reads only: none there is exit 2 naming the key, and nothing is written."""
    settings = make_settings()
    load_pseudonyms(redis_client, settings)  # the deployment's own secret, under its prefix
    typo = settings.key_prefix + "typo:"
    monkeypatch.setenv("REDIS_URL", str(settings.redis_url))
    monkeypatch.setenv("AGENT_SIGNAL_KEY_PREFIX", typo)
    assert main(["pseudonym", "u1"]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out == ""
        and "no pseudonym secret at" in captured.err
        and "AGENT_SIGNAL_KEY_PREFIX" in captured.err
    )
    assert redis_client.exists(BucketKeys(typo).pseudonym_secret) == 0
