"""An outside plugin (tests/plugins/ledger.py, importing only worker.plugin) loaded through
AGENT_SIGNAL_PLUGINS runs end to end on a real worker; its source type is admitted only when
AGENT_SIGNAL_EXTRA_SOURCE_TYPES lists it. (Its staged effects across a SIGKILL: test_fenced_writes.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys
from worker.runtime.assembly import PluginLoadError

pytestmark = pytest.mark.integration

PLUGIN = ["tests.plugins.ledger:plugin"]


def _entry(source_id: str) -> dict[str, Any]:
    return {"sourceType": "ledger.entry", "sourceId": source_id, "scopeKey": "topic:ledger", "payload": {}}


def test_a_plugin_whose_source_type_is_not_admitted_is_refused_until_it_is_listed(make_settings: Any) -> None:
    """Loading a plugin does not by itself admit a source type it does not declare: its handler would never be
    called (the door refuses its events), so the plugin set is refused when it loads, naming the handler; listed
    in AGENT_SIGNAL_EXTRA_SOURCE_TYPES, its events are admitted."""
    with pytest.raises(PluginLoadError, match=r"listens to 'ledger\.entry'"):
        Producer(make_settings(plugins=PLUGIN))
    producer = Producer(make_settings(plugins=PLUGIN, extra_source_types=["ledger.entry"]))
    assert producer.enqueue(_entry("yes")).status == "accepted"
    producer.close()


def test_an_outside_plugin_runs_end_to_end(
    make_settings: Any, start_worker: Any, redis_client: Redis
) -> None:
    """Source, signal and action handlers of the plugin each apply their staged write once."""
    settings = make_settings(plugins=PLUGIN, extra_source_types=["ledger.entry"])
    start_worker(settings)
    producer = Producer(settings)
    results = producer.enqueue_many([_entry("e1"), _entry("e2")])
    assert [r.status for r in results] == ["accepted", "accepted"]
    wait_for(
        lambda: all(producer.status(r.event_id)["status"] == "done" for r in results), what="two entries"
    )
    ledger = BucketKeys(settings.key_prefix).plugin("topic:ledger", "ledger")
    assert redis_client.hgetall(ledger) == {"source": "2", "signal": "2", "action": "2"}
    producer.close()


def test_a_worker_whose_plugins_cannot_be_built_stops_saying_why(
    make_settings: Any, start_worker: Any
) -> None:
    """A deliverer factory that returns no function passes the boot check (its shape is a factory's) and fails
    when a pool child builds the deliverers. The child's error was logged and the worker ran on with no outbox
    relay, its records waiting for good; the worker now stops, its log naming the plugin and the field."""
    worker = start_worker(make_settings(plugins=["tests.plugins.broken_deliverer:plugin"]), wait=False)
    worker.popen.wait(timeout=60)  # returns once the worker has stopped: nothing else ends it
    log = worker.log()
    said = "plugin 'broken-deliverer': deliverers['broken-kind'](runtime) cannot work, so the worker stops"
    assert said in log, log[-3000:]
