"""Redis's own work per drained event: commands run inside the scripts, and the server's CPU time.

On a private embedded Redis (:func:`bench._env.private_redis_url`: nothing else talks to it) a burst of N events
over 8 scopes is enqueued first; then ``INFO commandstats`` and ``INFO cpu`` are read, every scope is drained in
this process (:meth:`worker.drain.pipeline.Pipeline.drain_scope`, the same ACQUIRE / run / COMMIT path a worker
takes, without Celery's broker traffic) until it is idle, and both are read again. The deltas over N are the
figures:

- commands inside scripts per event: every command the server ran, minus the ``EVALSHA``/``EVAL`` calls
  themselves, minus the commands this process sent outside a script (counted client side by
  :class:`CountingClient`) and the two ``INFO`` reads;
- Redis CPU per event: ``used_cpu_sys + used_cpu_user`` (main thread and Lua alike), the median of
  :data:`CPU_ROUNDS` bursts of fresh events on the same server (one sample swung 43-127 us between runs).

Counted, not timed: the command count is the same from run to run; the CPU figure moves with the machine.

A third row counts the round trips from a drain_next message's pop to the lease grant of a lone event's scope:
POP_ACQUIRE's one (one Redis, one scope bucket), beside READY_POP then ACQUIRE (a cluster, or scope buckets).

A fourth counts the round trips per event of the spread shape (one event per scope) through one drain_next
message's own loop (:func:`worker.runtime.tasks.drain_ready`), where each commit that releases its scope pops
and takes the next one, beside the loop a message ran before: POP_ACQUIRE, then the scope's COMMIT.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from redis import Redis

from bench._env import make_settings, private_redis_url
from bench.pipeline_bench import BURST_SCOPES, bench_events, drain_next_in_process, pipeline_on
from producers import Producer
from worker.core.clock import now_ms
from worker.drain.pipeline import Pipeline
from worker.runtime.fair import FairQueue
from worker.store.events import EventStore

__all__ = ["COMMANDS_GOAL", "CPU_GOAL_US", "CountingClient", "RedisWork", "redis_work"]

COMMANDS_GOAL = 15.0  # commands inside the scripts per drained burst event (issue 29)
CPU_GOAL_US = 50.0  # Redis CPU per drained event (issue 29)
SPREAD_SCOPES = 30  # the spread trips row: scopes of one event each, within one message's scopes_per_drain
ENQUEUE_BATCH = 500  # events per enqueue_many (the door's limit is 1,000)
SCRIPT_CALLS = ("evalsha", "eval", "evalsha_ro", "eval_ro")

Row = tuple[str, str, str, str]


class CountingClient(Redis):
    """Counts, by command name, what this process sends outside a script (pipelines included)."""

    sent: Counter[str] = Counter()

    def execute_command(self, *args: Any, **options: Any) -> Any:
        CountingClient.sent[str(args[0]).split()[0].lower()] += 1
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        original = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            for args, _ in pipe.command_stack:
                CountingClient.sent[str(args[0]).split()[0].lower()] += 1
            if transaction:
                CountingClient.sent["multi"] += 1
                CountingClient.sent["exec"] += 1
            return original(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe


def command_calls(client: Redis) -> Counter[str]:
    """``INFO commandstats`` as command name -> calls."""
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


def command_usec(client: Redis) -> Counter[str]:
    """``INFO commandstats`` as command name -> microseconds the server spent in it (a script's include the
    commands it ran)."""
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in stats.items()})


def cpu_s(client: Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@dataclass(frozen=True)
class RedisWork:
    """Deltas over one drained burst of ``events`` events."""

    events: int
    commands_in_scripts: int
    script_calls: int
    cpu_s: float
    top: list[tuple[str, int]]  # the commands run inside scripts, most first
    pop_grant_trips: tuple[int, int] = (0, 0)  # (one script, two steps)
    spread_trips: tuple[float, float] = (
        0.0,
        0.0,
    )  # per spread event: (commit pops the next, pop then commit)
    spread_commands: float = 0.0  # commands inside scripts per spread event, commit popping the next
    script_us: int = (
        0  # the server's time in the drain's scripts (INFO commandstats usec), their commands included
    )
    inside_us: int = 0  # ... of which in the commands they ran

    @property
    def commands_per_event(self) -> float:
        return self.commands_in_scripts / self.events

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s * 1e6 / self.events

    def rows(self) -> list[Row]:
        rows = self._work_rows()
        rows.append(
            (
                "Redis round trips, pop -> grant (lone event)",
                f"{self.pop_grant_trips[0]}",
                f"was {self.pop_grant_trips[1]}",
                "POP_ACQUIRE; READY_POP then ACQUIRE on a cluster or with scope buckets (issue 29, item 3)",
            )
        )
        rows.append(
            (
                "Redis round trips / spread event, drain_next",
                f"{self.spread_trips[0]:.2f}",
                f"was {self.spread_trips[1]:.2f}",
                f"{SPREAD_SCOPES} scopes of one event, one message: the commit that releases a scope pops the "
                "next; before, POP_ACQUIRE then COMMIT",
            )
        )
        rows.append(
            (
                "Redis commands in scripts / spread event",
                f"{self.spread_commands:.2f}",
                "",
                f"the same {SPREAD_SCOPES} lone events: each pays its scope's release, the ready ring's pop, the next "
                "grant and a counters flush (the burst row's events share them)",
            )
        )
        return rows

    def _work_rows(self) -> list[Row]:
        top = ", ".join(f"{name} {n / self.events:.2f}" for name, n in self.top[:6])
        return [
            (
                "Redis commands in scripts / drained event",
                f"{self.commands_per_event:.2f}",
                _holds(self.commands_per_event <= COMMANDS_GOAL),
                f"goal <= {COMMANDS_GOAL:.0f}; burst of {self.events:,} over {BURST_SCOPES} scopes; "
                f"{self.script_calls / self.events:.2f} script calls/event; most: {top}",
            ),
            (
                "Redis script time / drained event",
                f"{self.script_us / self.events:.1f} us",
                "",
                f"of which its commands {self.inside_us / self.events:.1f} us, the rest Lua; the server's own timing "
                "(INFO commandstats usec), steadier than its CPU",
            ),
            (
                "Redis CPU / drained event",
                f"{self.cpu_us_per_event:.1f} us",
                _holds(self.cpu_us_per_event <= CPU_GOAL_US),
                f"goal <= {CPU_GOAL_US:.0f} us; used_cpu_sys + used_cpu_user delta, private Redis, median of "
                f"{CPU_ROUNDS} bursts",
            ),
        ]

    def figures(self) -> dict[str, float]:
        return {
            "redis_commands_in_scripts_per_event": self.commands_per_event,
            "redis_script_calls_per_event": self.script_calls / self.events,
            "redis_cpu_us_per_event": self.cpu_us_per_event,
            "redis_script_us_per_event": self.script_us / self.events,
            "redis_pop_grant_round_trips": float(self.pop_grant_trips[0]),
            "redis_pop_grant_round_trips_two_steps": float(self.pop_grant_trips[1]),
            "redis_spread_round_trips_per_event": self.spread_trips[0],
            "redis_spread_round_trips_per_event_pop_then_commit": self.spread_trips[1],
            "redis_spread_commands_in_scripts_per_event": self.spread_commands,
        }


def _holds(ok: bool) -> str:
    return "holds" if ok else "MISSED"


CPU_ROUNDS = (
    3  # the CPU row is the median of this many bursts (one used_cpu sample swung 43-127 us between runs)
)


def redis_work(events: int) -> RedisWork:
    """Enqueue ``events`` burst events, then drain them in this process and count (see the module docstring);
    the burst is drained :data:`CPU_ROUNDS` times (fresh events each), the commands counted on the first and the
    Redis CPU taken as the rounds' median."""
    with private_redis_url() as url:
        settings = make_settings(url, lease_renew_interval_s=5.0, lease_ttl_s=30.0)
        client = CountingClient.from_url(url, decode_responses=True)
        producer = Producer(settings)
        store = EventStore(client, settings)
        pipeline = pipeline_on(store)
        cpu_rounds: list[float] = []
        for round_index in range(CPU_ROUNDS):
            tag = f"rw{round_index}"
            batch = bench_events(events, BURST_SCOPES, tag)
            for i in range(0, len(batch), ENQUEUE_BATCH):
                producer.enqueue_many(batch[i : i + ENQUEUE_BATCH])
            before, cpu_before, usec_before = command_calls(client), cpu_s(client), command_usec(client)
            CountingClient.sent.clear()
            for s in range(BURST_SCOPES):
                while pipeline.drain_scope(f"topic:{tag}-{s}").next == "again":
                    pass
            round_sent = Counter(CountingClient.sent)
            cpu_after, round_after, round_usec = cpu_s(client), command_calls(client), command_usec(client)
            cpu_rounds.append(cpu_after - cpu_before)
            if round_index == 0:  # the commands and the script time: the first burst's (the same every round)
                first = (before, round_after, round_sent, usec_before, round_usec)
        before, after, sent, usec_before, usec_after = first
        trips = (
            pop_grant_trips(producer, pipeline, store, True),
            pop_grant_trips(producer, pipeline, store, False),
        )
        (chained_trips, spread_commands), (unchained_trips, _) = (
            spread_trips(producer, pipeline, store, chained=True),
            spread_trips(producer, pipeline, store, chained=False),
        )
        producer.close()
        client.close()
    delta = after - before
    scripts = sum(delta[name] for name in SCRIPT_CALLS)
    inside = commands_inside(delta, sent)
    usec = usec_after - usec_before
    script_us = sum(usec[name] for name in SCRIPT_CALLS)
    inside_us = sum(n for name, n in usec.items() if name in inside)
    return RedisWork(
        events,
        sum(inside.values()),
        scripts,
        statistics.median(cpu_rounds),
        inside.most_common(),
        trips,
        (chained_trips, unchained_trips),
        spread_commands=spread_commands,
        script_us=script_us,
        inside_us=inside_us,
    )


def commands_inside(delta: Counter[str], sent: Counter[str]) -> Counter[str]:
    """The commands the server ran inside scripts, from its ``INFO commandstats`` delta: less the script calls
    themselves, what this process sent outside a script, and the two ``INFO`` reads that took the delta."""
    inside = delta - sent - Counter({"info": 2})  # Counter subtraction keeps positive counts only
    for name in SCRIPT_CALLS:
        inside.pop(name, None)
    return inside


def pop_grant_trips(producer: Producer, pipeline: Pipeline, store: EventStore, one_script: bool) -> int:
    """Round trips from the pop of a lone event's scope to its grant (scripts loaded first), the scope then
    drained."""
    source_id = f"lone-{int(one_script)}"
    producer.enqueue(
        {
            "sourceType": "bot.message.merged",
            "sourceId": source_id,
            "scopeKey": f"topic:{source_id}",
            "payload": {"message": "hello", "messageId": source_id},
        }
    )
    fair = FairQueue(store.client, store.keys, None, "unused")  # sends nothing here
    for name in ("pop_acquire", "ready_pop", "acquire"):
        store.client.script_load(store.scripts.script(name).script)
    CountingClient.sent.clear()
    if one_script:
        popped = pipeline.lease.acquire_ready(store.keys, fair.pop_call(), now_ms=now_ms())
        acquired = popped[1] if popped else None
    else:
        ref = fair.pop()
        acquired = pipeline.lease.acquire(
            store.keys.for_tenant("default"), f"topic:{source_id}", now_ms=now_ms()
        )
        popped = (ref, acquired) if ref else None
    trips = sum(CountingClient.sent.values())
    if popped is None or acquired is None or acquired[0] is None:
        raise RuntimeError("the lone event's scope was not popped and granted")
    pipeline.drain(popped[0], acquired=acquired)
    return trips


def spread_trips(
    producer: Producer, pipeline: Pipeline, store: EventStore, *, chained: bool
) -> tuple[float, float]:
    """(Round trips, commands run inside scripts) per event for :data:`SPREAD_SCOPES` lone events drained by one
    drain_next message (scripts loaded first): through :func:`~worker.runtime.tasks.drain_ready` (``chained``),
    or through the loop a message ran before (POP_ACQUIRE, then the scope's drain, until nothing is ready)."""
    tag = f"spread-{int(chained)}"
    fair = FairQueue(store.client, store.keys, None, "unused")  # sends nothing: one message drains them all
    while fair.pop() is not None:  # refs left ready by the burst (drained by scope, not popped)
        pass
    producer.enqueue_many(
        [
            {
                "sourceType": "bot.message.merged",
                "sourceId": f"{tag}-{i}",
                "scopeKey": f"topic:{tag}-{i}",
                "payload": {"message": "hello", "messageId": f"{tag}-{i}"},
            }
            for i in range(SPREAD_SCOPES)
        ]
    )
    for name in ("pop_acquire", "commit"):
        store.client.script_load(store.scripts.script(name).script)
    before = store.stats(store.keys.for_tenant("default")).get("done", 0)
    store.client.set(store.keys.drain_tickets, 1)  # the message's ticket
    calls_before = command_calls(store.client)
    CountingClient.sent.clear()
    if chained:
        drained = drain_next_in_process(pipeline, take_ticket=False)
    else:
        drained = 0
        while (
            popped := pipeline.lease.acquire_ready(store.keys, fair.pop_call(), now_ms=now_ms())
        ) is not None:
            pipeline.drain(popped[0], acquired=popped[1])
            drained += 1
    sent = Counter(CountingClient.sent)
    inside = commands_inside(command_calls(store.client) - calls_before, sent)
    done = store.stats(store.keys.for_tenant("default")).get("done", 0) - before
    if drained != SPREAD_SCOPES or done != SPREAD_SCOPES:
        raise RuntimeError(
            f"the spread trips drained {drained} scopes and {done} events, not {SPREAD_SCOPES}"
        )
    return sum(sent.values()) / SPREAD_SCOPES, sum(inside.values()) / SPREAD_SCOPES
