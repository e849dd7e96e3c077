"""A plugin whose services factory raises (its database is down, say): a PluginLoadError naming the plugin and
the field, where the process builds its plugins' services."""

from __future__ import annotations

from worker.plugin import Plugin, PluginRuntime


def _services(runtime: PluginRuntime) -> object:
    raise RuntimeError("the ledger database is down")


def plugin() -> Plugin:
    return Plugin("broken-services", services=_services)
