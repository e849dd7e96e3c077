// Operations against the live stack: scopes (pause, list, resume), cancel, and the dead-letter list.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { AgentSignalError } from "@agent-signal/client";
import { client, live, RUN, skipLive, userMessage, waitFor, waitStatus } from "./support.mjs";

describe("scopes and cancel", live, () => {
  const api = client();

  test("a paused scope holds its event; cancel cancels it; resume answers changed", async () => {
    const scopeKey = `ts:${RUN}/paused#1`; // ':' '/' and '#' in a path segment
    const paused = await api.scopes.pause(scopeKey);
    assert.deepEqual(paused, { scopeKey, paused: true, changed: true });
    assert.equal((await api.scopes.pause(scopeKey)).changed, false);

    const { results } = await api.events.send({ ...userMessage(`held-${RUN}`, { userId: `ops-${RUN}` }), scopeKey });
    const eventId = results[0].eventId;
    const listed = await api.scopes.list("paused");
    const row = listed.scopes.find((s) => s.scopeKey === scopeKey);
    assert.ok(row, `${scopeKey} is listed as paused`);
    assert.equal(row.state, "paused");
    assert.equal(row.paused, true);
    assert.equal(row.inboxDepth, 1);
    assert.equal((await api.events.get(eventId)).status, "queued");

    const cancelled = await api.events.cancel(eventId);
    assert.deepEqual(cancelled, { eventId, status: "cancelled", cancelRequested: false });
    assert.equal((await api.events.get(eventId)).status, "cancelled");
    assert.equal((await api.events.cancel(eventId)).status, "cancelled"); // cancelling again is harmless

    assert.deepEqual(await api.scopes.resume(scopeKey), { scopeKey, paused: false, changed: true });
    const after = await api.scopes.list("paused");
    assert.ok(!after.scopes.some((s) => s.scopeKey === scopeKey));
  });
});

describe("dead letters", live, () => {
  const api = client();

  test("unknown ids come back as notDead from redrive and discard", async () => {
    const ghost = `evt_ghost_${RUN}`;
    assert.deepEqual(await api.dlq.redrive([ghost]), { redriven: [], notDead: [ghost] });
    assert.deepEqual(await api.dlq.discard([ghost], "cleanup"), { discarded: [], notDead: [ghost] });
    const page = await api.dlq.list({ limit: 5 });
    assert.ok(Array.isArray(page.events) && typeof page.total === "number");
  });

  test("an outbound call that is not dead comes back as notDead; the dead list pages", async () => {
    const ghost = { scopeKey: `ghost-${RUN}`, recordId: `hook:ghost-${RUN}` };
    assert.deepEqual(await api.outbox.redrive([ghost]), { redriven: [], notDead: [ghost] });
    const page = await api.outbox.dead({ limit: 5 });
    assert.ok(Array.isArray(page.records) && typeof page.total === "number");
    await assert.rejects(() => api.outbox.redrive("all"), TypeError);
  });

  test("a failing event dies, is listed, redriven, and discarded with a reason", async (t) => {
    let sent;
    try {
      sent = await api.events.send({
        sourceType: "test.flaky",
        sourceId: `doomed-${RUN}`,
        scopeKey: `dlq-${RUN}`,
        payload: { failTimes: 1000 },
      });
    } catch (error) {
      if (error instanceof AgentSignalError && error.status === 422) {
        skipLive(t, "this stack does not load the test plugin (tests.support.policies), so nothing can be made to die");
        return;
      }
      throw error;
    }
    const eventId = sent.results[0].eventId;
    await waitStatus(api, eventId, ["dead"]);
    const dead = await waitFor(async () => (await api.dlq.list({ limit: 500 })).events.find((e) => e.eventId === eventId), "the DLQ row");
    assert.equal(dead.status, "dead");
    assert.match(dead.error ?? "", /flaky handler is broken/);

    assert.deepEqual(await api.dlq.redrive([eventId]), { redriven: [eventId], notDead: [] });
    await waitStatus(api, eventId, ["dead"]); // still broken: it dies again

    assert.deepEqual(await api.dlq.discard([eventId], `ts ${RUN}`), { discarded: [eventId], notDead: [] });
    assert.ok(!(await api.dlq.list({ limit: 500 })).events.some((e) => e.eventId === eventId));
    const discarded = await api.dlq.list({ state: "discarded", limit: 500 });
    const row = discarded.events.find((e) => e.eventId === eventId);
    assert.ok(row, "listed as discarded");
    assert.equal(row.reason, `ts ${RUN}`);
  });
});
