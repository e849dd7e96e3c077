// client.events against the live stack: send one and a batch, duplicates, get, list pages, iterate.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { client, live, RUN, userMessage, waitFor, waitStatus } from "./support.mjs";

describe("events", live, () => {
  const api = client();

  test("one event is accepted; sending it again is a duplicate with the same event id", async () => {
    const event = userMessage(`one-${RUN}`, { userId: `u-${RUN}` });
    const first = await api.events.send(event);
    assert.equal(first.results.length, 1);
    assert.equal(first.results[0].status, "accepted");
    assert.equal(first.results[0].sourceId, event.sourceId);
    assert.match(first.results[0].eventId, /^evt_/);
    const again = await api.events.send(event);
    assert.deepEqual(again.results, [{ ...first.results[0], status: "duplicate" }]);
  });

  test("an array is sent as one batch and answered in order", async () => {
    const events = [1, 2, 3].map((i) => userMessage(`batch-${RUN}-${i}`, { userId: `u-${RUN}` }));
    const { results } = await api.events.send(events);
    assert.deepEqual(
      results.map((r) => [r.sourceId, r.status]),
      events.map((e) => [e.sourceId, "accepted"]),
    );
    assert.equal(new Set(results.map((r) => r.eventId)).size, 3);
  });

  test("get finds an event by its id and by its source id (path-encoded: ':', '#', '@', '+', '=')", async () => {
    const sourceId = `get:${RUN}#a@b+c=d`;
    const { results } = await api.events.send(userMessage(sourceId, { userId: `u-${RUN}` }));
    const eventId = results[0].eventId;
    const done = await waitStatus(api, eventId, ["done"]);
    assert.equal(done.sourceId, sourceId);
    assert.ok(Array.isArray(done.attemptsHistory));
    assert.equal(done.event.payload.messageId, sourceId);
    const bySource = await api.events.get(sourceId);
    assert.equal(bySource.eventId, eventId);
  });

  test("list answers one page and a cursor; iterate walks every page once", async () => {
    const userId = `pages-${RUN}`;
    const events = Array.from({ length: 7 }, (_, i) => userMessage(`page-${RUN}-${i}`, { userId }));
    const { results } = await api.events.send(events);
    const sent = new Set(results.map((r) => r.eventId));

    const first = await api.events.list({ userId, limit: 3 });
    assert.ok(first.events.length <= 3);
    assert.equal(typeof first.cursor, "string");
    assert.ok(first.events.every((e) => e.userId === userId));

    const seen = await waitFor(async () => {
      const ids = [];
      for await (const event of api.events.iterate({ userId, limit: 3 })) ids.push(event.eventId);
      return ids.length === sent.size && ids;
    }, "every event to be listed");
    assert.deepEqual(new Set(seen), sent);

    let pages = 0;
    for await (const page of api.events.iterate({ userId, limit: 3 }).pages()) {
      pages += 1;
      assert.ok(page.events.length <= 3);
    }
    assert.ok(pages >= 3, `7 events at 3 a page take at least 3 pages, got ${pages}`);
  });

  test("get by a source id holding '/' (sent percent-encoded)", async () => {
    const sourceId = `slash/${RUN}/x`;
    const { results } = await api.events.send(userMessage(sourceId, { userId: `u-${RUN}` }));
    const found = await api.events.get(sourceId);
    assert.equal(found.eventId, results[0].eventId);
    assert.equal(found.sourceId, sourceId);
  });
});
