"""AGENT_SIGNAL_QUORUM_QUEUES: the Celery app's queue declarations for RabbitMQ (the config, not RabbitMQ)."""

from __future__ import annotations

import pytest
from celery.utils.quorum_queues import detect_quorum_queues

from worker.runtime.app import create_app, quorum_queue_conf
from worker.settings import Settings, SettingsError

AMQP = "amqp://guest:guest@127.0.0.1:5672//"


def _settings(**overrides: object) -> Settings:
    values: dict[str, object] = {"redis_url": "redis://127.0.0.1:6379/0", "queue_name": "q-test"}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


class TestQuorumQueues:
    def test_the_task_queue_is_a_quorum_queue_on_a_topic_exchange(self) -> None:
        """With the setting on, the task queue and queues made on demand are x-queue-type quorum, topic-routed."""
        app = create_app(_settings(broker_url=AMQP, quorum_queues=True))
        queue = app.amqp.queues["q-test"]
        assert queue.queue_arguments == {"x-queue-type": "quorum"}
        assert queue.exchange.type == "topic"  # native delayed delivery (countdown retries) needs it
        plugin_queue = app.amqp.queues["q-plugin"]  # a queue a plugin names, created on first use
        assert plugin_queue.queue_arguments == {"x-queue-type": "quorum"}
        assert plugin_queue.exchange.type == "topic"
        assert detect_quorum_queues(app, "amqp") == (True, "q-test")
        assert app.conf.worker_detect_quorum_queues is True

    def test_off_by_default_classic_queues(self) -> None:
        """Without the setting, queues are declared as before: no queue type, direct exchange."""
        app = create_app(_settings(broker_url=AMQP))
        queue = app.amqp.queues["q-test"]
        assert not queue.queue_arguments
        assert queue.exchange.type == "direct"
        assert detect_quorum_queues(app, "amqp") == (False, "")

    def test_a_redis_broker_refuses_the_setting(self) -> None:
        """Quorum queues are RabbitMQ's: on a Redis broker the setting stops the process, naming BROKER_URL."""
        with pytest.raises(SettingsError, match=r"AGENT_SIGNAL_QUORUM_QUEUES.*BROKER_URL"):
            quorum_queue_conf(_settings(quorum_queues=True), "redis://127.0.0.1:6379/0")
        assert quorum_queue_conf(_settings(), "redis://127.0.0.1:6379/0") == {}

    def test_the_environment_variable_turns_it_on(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """AGENT_SIGNAL_QUORUM_QUEUES=true in the environment is the setting."""
        monkeypatch.setenv("AGENT_SIGNAL_QUORUM_QUEUES", "true")
        assert _settings().quorum_queues is True
