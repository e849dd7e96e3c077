// User tokens against the live stack: minted by the key, stamped on events, and only their own user's receipts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { AgentSignalError } from "@agent-signal/client";
import { client, live, RUN, userMessage, waitFor, waitStatus } from "./support.mjs";

describe("user tokens and receipts by user", live, () => {
  const api = client();
  const user = `tok-${RUN}`;
  const other = `other-${RUN}`;
  let asUser;

  test("tokens.create mints a token for one user", async () => {
    const minted = await api.tokens.create({ userId: user, ttlS: 600 });
    assert.equal(typeof minted.token, "string");
    assert.ok(minted.expiresAt > Date.now() && minted.expiresAt <= Date.now() + 601_000);
    asUser = client({ token: minted.token });
  });

  test("a user token's events are stamped with its user", async () => {
    const { results } = await asUser.events.send(userMessage(`stamped-${RUN}`));
    assert.equal(results[0].status, "accepted");
    const record = await waitStatus(api, results[0].eventId, ["done"]);
    assert.equal(record.userId, user);
  });

  test("a user token's event naming another user is a 422 naming userId", async () => {
    await assert.rejects(asUser.events.send(userMessage(`forged-${RUN}`, { userId: other })), (error) => {
      assert.ok(error instanceof AgentSignalError);
      assert.equal(error.status, 422);
      assert.equal(error.field, "userId");
      return true;
    });
  });

  test("receipts by user: the user's own, written by the pipeline; another user's answer 404", async () => {
    const topicId = `tpc-tok-${RUN}`;
    const sent = userMessage(`memory-${RUN}`, {
      topicId,
      message: "Going forward, I prefer concise answers.",
      trigger: "execAgent",
    });
    await asUser.events.send(sent);
    const page = await waitFor(async () => {
      const found = await asUser.receipts.list({ userId: user, agentId: "agt_ts", topicId });
      return found.receipts.length > 0 && found;
    }, "the memory receipt");
    const [receipt] = page.receipts;
    assert.equal(receipt.kind, "memory");
    assert.equal(receipt.userId, user);
    assert.equal(receipt.triggerMessageId, sent.sourceId);
    const byKey = await api.receipts.list({ userId: user, agentId: "agt_ts", topicId, limit: 1 });
    assert.deepEqual(byKey.receipts.map((r) => r.id), [receipt.id]);

    await assert.rejects(asUser.receipts.list({ userId: other }), (error) => error.status === 404);
  });

  test(
    "receipts listed by userId alone, across agents and topics",
    async () => {
      const page = await asUser.receipts.list({ userId: user });
      assert.ok(page.receipts.some((r) => r.triggerMessageId === `memory-${RUN}`));
    },
  );
});
