// enqueueAgentSignalSourceEvent with LobeHub's call shape, against the live stack.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { enqueueAgentSignalSourceEvent } from "@agent-signal/client";
import { client, live, RUN } from "./support.mjs";

describe("enqueueAgentSignalSourceEvent", live, () => {
  const api = client();

  test("LobeHub's input and context: accepted, the event id as workflowRunId, the server's scope", async () => {
    const input = {
      sourceType: "agent.user.message",
      sourceId: `lh-${RUN}`,
      payload: { agentId: "agt_lh", topicId: `tpc-lh-${RUN}`, messageId: `lh-${RUN}`, message: "hello" },
    };
    const queued = await enqueueAgentSignalSourceEvent(input, { client: api, userId: `lh-user-${RUN}`, agentId: "agt_lh" });
    assert.equal(queued.accepted, true);
    assert.equal(queued.status, "accepted");
    assert.equal(queued.workflowRunId, queued.eventId);
    assert.equal(queued.scopeKey, `topic:tpc-lh-${RUN}`);
    const stored = await api.events.get(queued.eventId);
    assert.equal(stored.scopeKey, queued.scopeKey);
    assert.equal(stored.userId, `lh-user-${RUN}`);
    assert.equal(typeof stored.event.timestamp, "number");

    const again = await enqueueAgentSignalSourceEvent(input, { client: api, userId: `lh-user-${RUN}`, agentId: "agt_lh" });
    assert.deepEqual([again.accepted, again.status, again.eventId], [true, "duplicate", queued.eventId]);
  });

  test("without a topic the scope is the agent's and user's, as the server derives it; a given scopeKey wins", async () => {
    const userId = `lh2-${RUN}`;
    const derived = await enqueueAgentSignalSourceEvent(
      { sourceType: "agent.user.message", sourceId: `lh2-${RUN}`, payload: { messageId: `lh2-${RUN}`, message: "hi" } },
      { client: api, userId, agentId: "agt_lh" },
    );
    assert.equal(derived.scopeKey, `agent:agt_lh:user:${userId}`);
    assert.equal((await api.events.get(derived.eventId)).scopeKey, derived.scopeKey);

    const given = await enqueueAgentSignalSourceEvent(
      {
        sourceType: "agent.user.message",
        sourceId: `lh3-${RUN}`,
        scopeKey: `custom:${RUN}`,
        timestamp: 1_700_000_000_000,
        payload: { agentId: "agt_lh", topicId: "tpc_x", messageId: `lh3-${RUN}`, message: "hi" },
      },
      { client: api, userId, agentId: "agt_lh" },
    );
    assert.equal(given.scopeKey, `custom:${RUN}`);
    const stored = await api.events.get(given.eventId);
    assert.equal(stored.scopeKey, `custom:${RUN}`);
    assert.equal(stored.event.timestamp, 1_700_000_000_000);
  });
});
