"""Loading plugins by name and assembling them for one process.

Settings name code across process boundaries, so plugins are ``module:factory`` strings
(``shipped_plugins``, then ``AGENT_SIGNAL_PLUGINS``). :func:`load_plugins` imports and calls each factory
once per process and checks the environment against the engine's, the sections' (:data:`SECTIONS`) and the
plugins' settings models;
:func:`assemble` builds, in this order, the admission hooks, the emitter, the typed services and the
handler registry. From then on everything is objects: nothing below looks a name up again.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from redis import Redis
from redis.exceptions import RedisError

from worker.chain.context import Deps
from worker.chain.registry import DuplicateActionHandler, Policy, Registry
from worker.intake.emitter import Emitter, ReadyQueue
from worker.keys.layout import EngineKeys
from worker.ops.erasure import UserEraser
from worker.outbox.relay import Deliverer
from worker.runtime.plugin_model import Plugin, PluginRuntime, PluginTask
from worker.settings import PluginSettings, Settings, SettingsError, check_environment, plugin_settings
from worker.store.events import EventStore

__all__ = ["SECTIONS", "Assembly", "PluginLoadError", "assemble", "load_plugins", "section_models"]

# The settings sections of the door and the agent sessions (``module:Model``): named, as plugins are, so the
# engine imports nothing above it, and every process's boot check knows their variables (a worker sharing the
# web app's environment must not refuse AGENT_SIGNAL_MAX_REQUEST_BYTES; a typo of it is refused everywhere).
SECTIONS = ("producers.http.settings:DoorSettings", "sessions.settings:SessionLimitSettings")


class PluginLoadError(SettingsError):
    """A configured plugin factory cannot be imported or does not return a Plugin or a list of Policy."""


def _import(spec: str) -> Plugin:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise PluginLoadError(f"plugin {spec!r} must look like 'package.module:factory'")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
        produced = factory() if callable(factory) and not isinstance(factory, Plugin) else factory
    except PluginLoadError:
        raise
    except ModuleNotFoundError as exc:
        hint = ""
        if exc.name is not None and module_name.split(".")[0] == exc.name.split(".")[0]:
            hint = " (install its package, or put its folder on PYTHONPATH: the current directory is not searched)"
        raise PluginLoadError(f"plugin {spec!r}: ModuleNotFoundError: {exc}{hint}") from exc
    except Exception as exc:  # its import or its factory failed: name the plugin, not only the exception
        raise PluginLoadError(f"plugin {spec!r}: {type(exc).__name__}: {exc}") from exc
    if isinstance(produced, Plugin):
        return produced
    if isinstance(produced, list) and all(isinstance(p, Policy) for p in produced):
        return Plugin(name=spec, policies=produced)
    if produced is factory:  # not called: neither a function nor a Plugin
        raise PluginLoadError(
            f"plugin {spec!r}: {attr} is a {type(factory).__name__}, not a Plugin nor a function that returns one"
        )
    raise PluginLoadError(
        f"plugin {spec!r} must return a Plugin or a list of Policy (it returned a {type(produced).__name__})"
    )


def plugin_registry(plugins: Sequence[Plugin], runtime: PluginRuntime) -> Registry:
    """Every plugin's handlers in one registry; a policy that cannot be built, or a second handler of an action
    type, is a PluginLoadError naming the plugin."""
    policies: list[Policy] = []
    for plugin in plugins:
        try:
            policies += plugin.build_policies(runtime)
        except (TypeError, ValueError) as exc:  # a handler defined wrong, inside a policies(runtime) factory
            raise PluginLoadError(f"plugin {plugin.name!r}: {exc}") from exc
    try:
        return Registry.from_policies(policies)
    except DuplicateActionHandler as exc:
        raise PluginLoadError(str(exc)) from exc


def check_handlers(plugins: Sequence[Plugin], settings: Settings) -> None:
    """At boot (:func:`load_plugins`): the plugins' handlers built once against a client that cannot connect,
    and checked as :func:`assemble` checks them, so a worker refuses to start rather than start and run nothing.
    A policies factory that needs Redis to build is left to :func:`assemble`."""
    runtime = PluginRuntime(
        settings=settings,
        redis=Redis(
            unix_socket_path="/nonexistent/agent-signal-boot-check"
        ),  # a command fails: never a real Redis
        keys=EngineKeys(settings.key_prefix, settings.scope_buckets),
    )
    try:
        registry = plugin_registry(plugins, runtime)
    except RedisError:
        return
    check_source_handlers(registry, [t for p in plugins for t in p.source_types], settings)


def check_source_handlers(registry: Registry, declared: Sequence[str], settings: Settings) -> None:
    """A source handler listens to a type the door admits: one a loaded plugin declares, or one of
    ``AGENT_SIGNAL_EXTRA_SOURCE_TYPES`` (any, with ``AGENT_SIGNAL_ALLOW_UNKNOWN_SOURCE_TYPES``). Else its events
    never come (a typo of the type), and it is refused at load, naming the handler and the nearest type."""
    if settings.allow_unknown_source_types:
        return
    known = {*declared, *settings.extra_source_types}
    for source_type, handlers in registry.source.items():
        if source_type in known:
            continue
        near = difflib.get_close_matches(source_type, sorted(known), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise PluginLoadError(
            f"source handler {handlers[0].id!r} listens to {source_type!r}, which no loaded plugin declares in its "
            f"source_types nor AGENT_SIGNAL_EXTRA_SOURCE_TYPES lists{hint}: its events would be refused at the door"
        )


def section_models() -> list[type[PluginSettings]]:
    """The models of :data:`SECTIONS`, imported by name."""
    models: list[type[PluginSettings]] = []
    for spec in SECTIONS:
        module_name, _, attr = spec.partition(":")
        model = getattr(importlib.import_module(module_name), attr)
        if not (isinstance(model, type) and issubclass(model, PluginSettings)):
            raise PluginLoadError(f"settings section {spec!r} is not a settings model")
        models.append(model)
    return models


def load_plugins(settings: Settings, *, check_env: bool = True) -> list[Plugin]:
    """The shipped plugins, then ``AGENT_SIGNAL_PLUGINS``, in order; their settings and the sections'
    validated at boot."""
    plugins = [_import(spec) for spec in [*settings.shipped_plugins, *settings.plugins]]
    specs = [*settings.shipped_plugins, *settings.plugins]
    names = [p.name for p in plugins]
    for name in sorted({n for n in names if names.count(n) > 1}):
        given = [spec for spec, plugin in zip(specs, plugins, strict=True) if plugin.name == name]
        raise PluginLoadError(
            f"two plugins are named {name!r} ({', '.join(given)}): a plugin's name is its own (its settings "
            "section, its tasks' names); rename one, or leave one out (a shipped one: AGENT_SIGNAL_SHIPPED_PLUGINS)"
        )
    models = [*section_models(), *(p.settings for p in plugins if p.settings is not None)]
    if check_env:
        check_environment(settings, models)
    for model in models:
        plugin_settings(model, settings)  # raises SettingsError naming the model and the field
    check_handlers(plugins, settings)
    return plugins


@dataclass(frozen=True, slots=True)
class Assembly:
    """The plugins of one process, built: runtime, emitter, typed services, registry and tasks."""

    plugins: Sequence[Plugin]
    runtime: PluginRuntime
    emitter: Emitter
    deps: Deps
    registry: Registry
    tasks: Sequence[PluginTask]
    deliverers: Mapping[str, Deliverer]
    erasers: Sequence[UserEraser]  # each plugin's part of erasing a user (worker/ops/erasure.py runs them)


def assemble(
    plugins: Sequence[Plugin],
    settings: Settings,
    store: EventStore,
    *,
    publish_drain: Callable[[str], None],
    publish_drains: Callable[[Sequence[str]], None] | None = None,
    ready: ReadyQueue | None = None,
    publish_task: Callable[[str, dict[str, Any], str | None], None] | None = None,
) -> Assembly:
    """Build everything the plugins contribute, for the process that owns ``store``."""
    client: Redis = store.client
    base = PluginRuntime(settings=settings, redis=client, keys=store.keys, publish=publish_task)
    hooks = [p.admission(base) for p in plugins if p.admission is not None]
    source_types = [t for p in plugins for t in p.source_types]
    schemas = [(t, model) for p in plugins for t, model in p.payload_schemas.items()]
    user_fields = [(t, paths) for p in plugins for t, paths in p.user_fields.items()]
    emitter = Emitter(
        settings,
        store,
        publish_drain,
        publish_many=publish_drains,
        ready=ready,
        source_types=source_types,
        admission=hooks,
        payload_schemas=schemas,
        user_fields=user_fields,
    )
    deps = Deps()
    runtime = replace(base, emitter=emitter, deps=deps)
    for plugin in plugins:
        if plugin.services is not None:
            deps.add(_built(plugin, "services", plugin.services, runtime))
    registry = plugin_registry(plugins, runtime)
    check_source_handlers(registry, source_types, settings)
    tasks = [task for p in plugins for task in p.tasks]
    deliverers = {
        kind: _deliverer(p, kind, _built(p, f"deliverers[{kind!r}]", build, runtime))
        for p in plugins
        for kind, build in p.deliverers.items()
    }
    erasers = [p.erase_user for p in plugins if p.erase_user is not None]
    return Assembly(plugins, runtime, emitter, deps, registry, tasks, deliverers, erasers)


def _built(plugin: Plugin, what: str, factory: Callable[[PluginRuntime], Any], runtime: PluginRuntime) -> Any:
    """``factory(runtime)``; what it raises becomes a PluginLoadError naming the plugin and the field (it was a
    traceback of the web server's start), but for the store's or the network's errors: those are no plugin's
    mistake, and a worker's child builds its state again on its next task (worker/runtime/app.py stops the
    worker on a PluginLoadError)."""
    try:
        return factory(runtime)
    except (RedisError, OSError):
        raise
    except Exception as exc:
        raise PluginLoadError(
            f"plugin {plugin.name!r}: {what}(runtime) raised {type(exc).__name__}: {exc}"
        ) from exc


class PluginShapeError(PluginLoadError):
    """A plugin's part that can never work, found when it is built (a worker's pool child builds them): the
    worker stops (worker/runtime/app.py). ``where`` names the plugin and the field, and nothing of the input."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where} {problem}")
        self.where = where


def _deliverer(plugin: Plugin, kind: str, built: Any) -> Deliverer:
    """A deliverer factory's product, which must be callable (a deliver function given where its factory belongs
    returns None, and every record of the kind died of "'NoneType' object is not callable")."""
    if not callable(built):
        raise PluginShapeError(
            f"plugin {plugin.name!r}: deliverers[{kind!r}](runtime)",
            f"returned a {type(built).__name__}, not a deliver(record) function: deliverers maps a kind to a "
            "factory, runtime -> deliver(record)",
        )
    return cast(Deliverer, built)
