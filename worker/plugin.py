"""The plugin API: the one module that plugin code (shipped or yours) imports from the engine.

A :class:`Plugin` is one object that owns everything the engine does for one concern:

* ``policies``: its handler bundles (a list of :class:`Policy`, or a function of the :class:`PluginRuntime`
  that returns them), installed in plugin order, then in list order;
* ``settings``: its :class:`PluginSettings` model (its section of ``AGENT_SIGNAL_*``), validated at boot;
* ``services``: a function of the runtime that returns its typed dependencies object; handlers get it back
  with ``ctx.deps(ThatClass)``;
* ``tasks``: its Celery tasks, as plain functions of ``(runtime, payload)``; ``runtime.publish`` sends one;
* ``admission``: its checks at the door, a function of the runtime returning an :data:`AdmissionHook` (an event
  it refuses answered with a status, one it admits only while another event is no tombstone with
  :class:`UnlessErased`, checked by the enqueue script itself);
* ``source_types``: the source types its handlers listen to, admitted at the door;
* ``payload_schemas``: ``{source_type: pydantic model}``, the payload its handlers require: checked at the door
  (a 422 naming ``payload.<field>``), for follow-up events, and for a redrive's edited payload, so an event its
  handlers can never process is refused instead of dying in the worker (every plugin's model must accept it);
* ``user_fields``: ``{source_type: ["selfIteration.userId", …]}``, the payload fields (dotted paths) where its
  handlers read a user besides ``payload.userId``: each must name the event's user (the user a user token
  stamped, or the event's ``userId``), else the door refuses the event with a 422 naming the field; handlers
  read the user from ``ctx.source.user_id``;
* ``deliverers``: ``{kind: runtime → deliverer}`` for the outbound calls its handlers stage with
  ``ctx.outbox(kind, payload, key=…)``; the outbox relay calls ``deliverer(record)`` at least once per
  record and the deliverer passes ``record.key`` on as the idempotency key.

A plugin that stores a user's data counts its bytes toward the user's storage quota
(``AGENT_SIGNAL_USER_MAX_BYTES``) and its tenant's (``AGENT_SIGNAL_TENANT_MAX_BYTES``; data of no user: the
tenant's alone): :func:`user_bytes_effects` gives the staged commands, :func:`add_user_bytes` counts now
(worker/store/quotas.py).

``AGENT_SIGNAL_PLUGINS`` lists ``module:factory`` strings loaded after the shipped plugins; a factory
returns a :class:`Plugin` or a list of :class:`Policy`. This module's ``__all__`` is the whole supported
surface and stays stable across internal refactors (``tests/unit/worker/test_plugin_api.py``).
"""

from __future__ import annotations

from worker.chain.context import Deps, EffectBuffer, HandlerContext, MissingDependency
from worker.chain.outbox_records import Deliverer, OutboxRecord
from worker.chain.registry import Policy, define_action_handler, define_signal_handler, define_source_handler
from worker.chain.results import applied, failed, skipped
from worker.core.clock import now_ms
from worker.core.errors import PermanentFailure, RetryLater, SkipEvent
from worker.core.ids import Id
from worker.core.nodes import (
    Action,
    ChainRef,
    Conclude,
    Dispatch,
    ExecutorResult,
    Schedule,
    Signal,
    SignalRef,
    Source,
    Wait,
    action_from,
    signal_from,
)
from worker.intake.emitter import AdmissionHook, UnlessErased
from worker.intake.source_event import EnqueueResult
from worker.keys.layout import Keys
from worker.ops.erasure import UserEraser
from worker.outbox.deadline import Deadline, deadline_transport, send_within
from worker.runtime.plugin_model import Plugin, PluginRuntime, PluginTask
from worker.settings import PluginSettings, Settings
from worker.store.events import PreparedEvent
from worker.store.quotas import add_user_bytes, user_bytes_effects
from worker.store.receipts import ReceiptStore, ReceiptWithoutUser, receipt_effects

__all__ = [
    "Action",
    "AdmissionHook",
    "ChainRef",
    "Conclude",
    "Deadline",
    "Deliverer",
    "Deps",
    "Dispatch",
    "EffectBuffer",
    "EnqueueResult",
    "ExecutorResult",
    "HandlerContext",
    "Id",
    "Keys",
    "MissingDependency",
    "OutboxRecord",
    "PermanentFailure",
    "Plugin",
    "PluginRuntime",
    "PluginSettings",
    "PluginTask",
    "Policy",
    "PreparedEvent",
    "ReceiptStore",
    "ReceiptWithoutUser",
    "RetryLater",
    "Schedule",
    "Settings",
    "Signal",
    "SignalRef",
    "SkipEvent",
    "Source",
    "UnlessErased",
    "UserEraser",
    "Wait",
    "action_from",
    "add_user_bytes",
    "applied",
    "deadline_transport",
    "define_action_handler",
    "define_signal_handler",
    "define_source_handler",
    "failed",
    "now_ms",
    "receipt_effects",
    "send_within",
    "signal_from",
    "skipped",
    "user_bytes_effects",
]
