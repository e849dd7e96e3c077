"""A scrape during a Redis outage is how the outage shows: ``/metrics`` answers with its credential resolved and
its rate unchecked (the rate buckets live in Redis), and counts the door's refusals (``where="auth"``) it made
meanwhile; any other route still answers 503 store_unavailable. A private redis-server, stopped mid-test."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from producers.http.app import create_web_app
from tests.conftest import SettingsFactory
from tests.support.private_redis import private_redis
from tests.support.prom import parse, total

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-outage-test-0123"


def test_a_scrape_during_an_outage_answers_and_counts_it(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    with private_redis(tmp_path) as url:
        settings = make_settings(redis_url=url, bootstrap_key=BOOT, rate_limit_per_s=100)
        headers = {"Authorization": f"Bearer {BOOT}"}
        with TestClient(create_web_app(settings)) as client:
            with contextlib.suppress(RedisConnectionError):  # redis-py answers a shutdown itself
                Redis.from_url(url).shutdown(nosave=True)
            refused = client.get("/v1/receipts", params={"userId": "u1"}, headers=headers)
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"
            scrape = client.get("/metrics", headers=headers)
            assert scrape.status_code == 200, scrape.text
            assert total(parse(scrape.text), "agent_signal_store_unavailable_total", where="auth") >= 1
