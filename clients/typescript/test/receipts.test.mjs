// client.receipts.stream against the live stack: open, receive the receipt the pipeline writes, abort ends it.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { client, live, RUN, userMessage } from "./support.mjs";

describe("receipts stream", live, () => {
  const api = client();

  test("a receipt written after the stream opened arrives; aborting ends the loop without an error", async () => {
    const userId = `stream-${RUN}`;
    const topicId = `tpc-stream-${RUN}`;
    const controller = new AbortController();
    const stream = api.receipts.stream({ userId, agentId: "agt_ts", topicId, signal: controller.signal });
    const received = [];
    const loop = (async () => {
      for await (const receipt of stream) {
        received.push(receipt);
        controller.abort();
      }
      return "ended";
    })();
    await stream.opened;
    const sent = userMessage(`streamed-${RUN}`, {
      userId,
      topicId,
      message: "Going forward, I prefer concise answers.",
      trigger: "execAgent",
    });
    await api.events.send(sent);
    assert.equal(await loop, "ended");
    assert.equal(received.length, 1);
    const [receipt] = received;
    assert.equal(receipt.kind, "memory");
    assert.equal(receipt.triggerMessageId, sent.sourceId);
    const listed = await api.receipts.list({ userId, agentId: "agt_ts", topicId });
    assert.deepEqual(listed.receipts.map((r) => r.id), [receipt.id]);
  });

  test("an open stream with nothing to say ends when its signal aborts", async () => {
    const controller = new AbortController();
    const stream = api.receipts.stream({ userId: `quiet-${RUN}`, signal: controller.signal });
    const iterator = stream[Symbol.asyncIterator]();
    const next = iterator.next();
    await stream.opened;
    controller.abort();
    assert.deepEqual(await next, { value: undefined, done: true });
  });

  test("breaking out of the loop closes the stream, and a signal aborted beforehand opens nothing", async () => {
    const userId = `brk-${RUN}`;
    const stream = api.receipts.stream({ userId, agentId: "agt_ts", topicId: `tpc-brk-${RUN}` });
    const first = (async () => {
      for await (const receipt of stream) return receipt;
    })();
    await stream.opened;
    await api.events.send(
      userMessage(`brk-msg-${RUN}`, { userId, topicId: `tpc-brk-${RUN}`, message: "Going forward, I prefer concise answers.", trigger: "execAgent" }),
    );
    assert.equal((await first).kind, "memory");

    const aborted = AbortSignal.abort();
    const none = [];
    for await (const receipt of api.receipts.stream({ userId, signal: aborted })) none.push(receipt);
    assert.deepEqual(none, []);
  });
});
