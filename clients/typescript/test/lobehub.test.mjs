// enqueueAgentSignalSourceEvent with LobeHub's call shape, against the live stack.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { AgentSignal, AgentSignalError, enqueueAgentSignalSourceEvent } from "@agent-signal/client";
import { json, startStub } from "./stub.mjs";
import { client, live, RUN, skipLive } from "./support.mjs";

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

describe("enqueueAgentSignalSourceEvent with a user token, and whole-number ids", live, () => {
  const api = client();

  test("the answer's scopeKey is the one the server stored", async (t) => {
    const user = `lh-tok-${RUN}`;
    const { token } = await api.tokens.create({ userId: user, ttlS: 600 });
    const mine = client({ token });
    assert.equal(mine.tokenUserId, user);
    const cases = [
      { payload: { topicId: `tpc-tok-${RUN}`, message: "hi" } }, // another scope: put under the user's own
      { payload: { message: "hi" }, agentId: "agt_lh" }, // the user's own agent scope: kept
      { payload: { message: "hi" }, scopeKey: `custom:${RUN}` }, // a given scope: put under the user's own
    ];
    for (const [i, { payload, agentId, scopeKey }] of cases.entries()) {
      const queued = await enqueueAgentSignalSourceEvent(
        { sourceType: "agent.user.message", sourceId: `lh-tok-${RUN}-${i}`, payload, scopeKey },
        { client: mine, agentId },
      );
      assert.equal(queued.accepted, true, JSON.stringify(queued));
      assert.equal(queued.scopeKey, (await api.events.get(queued.eventId)).scopeKey, `case ${i}`);
    }
    // a whole number reads as its digits (test.flaky, of the test plugin the stacks load, types no payload id;
    // failTimes 0: it never fails)
    let numeric;
    try {
      numeric = await enqueueAgentSignalSourceEvent(
        { sourceType: "test.flaky", sourceId: `lh-num-${RUN}`, payload: { taskId: 7, failTimes: 0 } },
        { client: api, userId: `lh-num-${RUN}` },
      );
    } catch (error) {
      if (error instanceof AgentSignalError && error.code === "unknown_source_type") {
        skipLive(t, "this stack does not load the test plugin (tests.support.policies), so test.flaky's whole-number id cannot be sent");
        return;
      }
      throw error;
    }
    assert.equal(numeric.scopeKey, "task:7");
    assert.equal((await api.events.get(numeric.eventId)).scopeKey, "task:7");
  });
});

describe("enqueueAgentSignalSourceEvent's scopeKey, against a stub", () => {
  /** A JWT-shaped token naming `sub` and `tenant` (the stub verifies nothing; the client only reads it). */
  function userToken(sub) {
    const part = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
    return `${part({ alg: "HS256", kid: "k1" })}.${part({ sub, tenant: "acme", exp: 2_000_000_000 })}.c2ln`;
  }

  test("a user token's scope is its user's own; whole numbers read as digits; an API key's scope as derived", async () => {
    const stub = await startStub((_, response) => json(response, 202, { results: [{ eventId: "evt_1", sourceId: "s", status: "accepted" }] }));
    after(stub.close);
    const send = (token, input, context = {}) =>
      enqueueAgentSignalSourceEvent(
        { sourceType: "agent.user.message", sourceId: "s", ...input },
        { client: new AgentSignal({ baseUrl: stub.url, token }), ...context },
      ).then((queued) => queued.scopeKey);
    const user = userToken("u1");
    assert.equal(new AgentSignal({ baseUrl: stub.url, token: user }).tokenUserId, "u1");
    assert.equal(await send(user, { payload: { topicId: "t1" } }), "user:u1/topic:t1");
    assert.equal(await send(user, { payload: {}, scopeKey: "custom:1" }), "user:u1/custom:1");
    assert.equal(await send(user, { payload: {}, scopeKey: "user:u1/custom:1" }), "user:u1/custom:1");
    assert.equal(await send(user, { payload: {} }, { agentId: "a1" }), "agent:a1:user:u1");
    assert.equal(await send(user, { payload: {} }), "user:u1");
    assert.equal(await send("as_0123_key", { payload: { topicId: 42 } }), "topic:42");
    assert.equal(await send("as_0123_key", { payload: { taskId: 7 } }), "task:7");
    assert.equal(await send(undefined, { payload: { topicId: 4.5, userId: "u2" } }), "user:u2");
    assert.equal(new AgentSignal({ baseUrl: stub.url, token: "a.b.c" }).tokenUserId, undefined);
  });
});

