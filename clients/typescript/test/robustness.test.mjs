// What a demanding caller meets beside the happy path: a stream aborted with frames still buffered, a connection
// gone silent, an attempt that never answers, a sweep that fails halfway, and options that cannot work.
import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { after, describe, test } from "node:test";

import { AgentSignal } from "@agent-signal/client";
import { parseRetryAfter } from "../dist/http.js";
import { errorBody, json, startStub } from "./stub.mjs";

function receipt(id, createdAt) {
  return { id, kind: "memory", status: "applied", title: id, createdAt, userId: "u1", agentId: "a1", topicId: "t1" };
}

const frame = (r) => `event: receipt\nid: ${r.id}\ndata: ${JSON.stringify(r)}\n\n`;

async function stub(handle) {
  const started = await startStub(handle);
  after(started.close);
  return started;
}

describe("a receipt stream's abort", () => {
  test("nothing more is yielded once the consumer aborts, though frames of the same chunk were read", async () => {
    const server = await stub((_, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n" + ["r1", "r2", "r3", "r4", "r5"].map((id, i) => frame(receipt(id, i + 1))).join(""));
    });
    const controller = new AbortController();
    const ids = [];
    for await (const r of new AgentSignal({ baseUrl: server.url }).receipts.stream({ userId: "u1", signal: controller.signal })) {
      ids.push(r.id);
      controller.abort();
    }
    assert.deepEqual(ids, ["r1"]);
  });

  test("nor the rest of a catch-up", async () => {
    const listed = ["c5", "c4", "c3", "c2", "c1"].map((id, i) => receipt(id, 100 - i)); // newest first
    const server = await stub((request, response) => {
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: listed });
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\nevent: resync\ndata: {}\n\n");
    });
    const controller = new AbortController();
    const ids = [];
    for await (const r of new AgentSignal({ baseUrl: server.url }).receipts.stream({ userId: "u1", signal: controller.signal })) {
      ids.push(r.id);
      controller.abort();
    }
    assert.deepEqual(ids, ["c1"]);
  });
});

describe("a connection gone silent", () => {
  test("past idleTimeoutMs it is replaced and caught up, like one that dropped", { timeout: 20_000 }, async () => {
    let connections = 0;
    const server = await stub((request, response) => {
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: [receipt("late", 2)] });
      connections += 1;
      response.writeHead(200, { "content-type": "text/event-stream" });
      if (connections === 1) response.write(": connected\n\n" + frame(receipt("first", 1))); // then nothing, ever
      else response.write(": connected\n\n" + frame(receipt("second", 3)));
    });
    const controller = new AbortController();
    const ids = [];
    const options = { userId: "u1", signal: controller.signal, idleTimeoutMs: 300, catchUpLagMs: 0 };
    for await (const r of new AgentSignal({ baseUrl: server.url }).receipts.stream(options)) {
      ids.push(r.id);
      if (r.id === "second") controller.abort();
    }
    assert.deepEqual(ids, ["first", "late", "second"]);
    assert.equal(connections, 2);
    assert.throws(() => new AgentSignal({ baseUrl: server.url }).receipts.stream({ userId: "u1", idleTimeoutMs: -5 }), /idleTimeoutMs/);
  });
});

describe("an attempt that never answers", () => {
  test("a read is abandoned after timeoutMs and retried; a cancel is not sent again (it may have acted)", { timeout: 20_000 }, async () => {
    let calls = 0;
    const server = await stub((request, response) => {
      calls += 1;
      if (calls === 1 || request.method === "POST") return; // never answered
      json(response, 200, { eventId: "e1", status: "done" });
    });
    const api = new AgentSignal({ baseUrl: server.url, timeoutMs: 500 });
    assert.equal((await api.events.get("e1")).status, "done");
    const read = calls; // 2, or more on a machine slow enough that an answer took 500 ms
    assert.ok(read >= 2);
    await assert.rejects(
      api.events.cancel("e1"),
      (error) => error.code === "network_error" && error.requestSent === true && /within 500 ms/.test(error.message),
    );
    assert.equal(calls, read + 1);
    for (const bad of [-1, 2 ** 31]) assert.throws(() => new AgentSignal({ baseUrl: server.url, timeoutMs: bad }), /timeoutMs/);
  });
});

describe("a sweep of every dead event", () => {
  test("one that fails halfway throws with what the earlier requests did, and where to go on from", async () => {
    const answers = [
      [200, { redriven: ["a", "b"], notDead: ["x"], more: true, until: 1700000000000 }],
      [503, errorBody("store_unavailable", "the store failed")],
    ];
    let n = 0;
    const server = await stub((_, response) => {
      const [status, body] = answers[Math.min(n++, answers.length - 1)];
      json(response, status, body);
    });
    await assert.rejects(new AgentSignal({ baseUrl: server.url }).dlq.redrive({ all: true }), (error) => {
      assert.equal(error.code, "store_unavailable");
      assert.deepEqual(error.partial, { redriven: ["a", "b"], notDead: ["x"], until: 1700000000000 });
      return true;
    });
  });
});

describe("options that cannot work", () => {
  test("a baseUrl with a query or a fragment is refused: every path would land inside it", () => {
    for (const bad of ["http://h:1/api?x=1", "http://h:1/api#frag", "http://h:1/api?"]) {
      assert.throws(() => new AgentSignal({ baseUrl: bad }), /query or a fragment/, bad);
    }
  });

  test("a Retry-After that is neither seconds nor an HTTP date is unreadable, not 'now'", () => {
    const at = Date.parse("Wed, 21 Oct 2015 07:28:00 GMT");
    assert.equal(parseRetryAfter("Wednesday, 21-Oct-15 07:28:10 GMT", at), 10); // the older forms are read too
    assert.equal(parseRetryAfter("Wed Oct 21 07:28:10 2015", at - new Date(at).getTimezoneOffset() * 60_000), 10);
    assert.equal(parseRetryAfter("-1"), undefined);
    assert.equal(parseRetryAfter("soon"), undefined);
    assert.equal(parseRetryAfter("2"), 2);
    assert.equal(parseRetryAfter("Wed, 21 Oct 2015 07:28:10 GMT", Date.parse("Wed, 21 Oct 2015 07:28:00 GMT")), 10);
  });
});

describe("the caller's signal", () => {
  test("ends an error answer whose body stalls, and no call leaves a listener on it", { timeout: 20_000 }, async () => {
    const server = await stub((request, response) => {
      if (request.url.startsWith("/v1/events/stall")) {
        response.writeHead(500, { "content-type": "application/json", "content-length": "1000" });
        response.write('{"error": ');  // and nothing more
        return;
      }
      if (request.url.startsWith("/v1/events/missing")) return json(response, 404, errorBody("not_found", "no such event"));
      if (request.url.startsWith("/v1/events/html")) {
        response.writeHead(502, { "content-type": "text/html" });
        return response.end("<html>bad gateway</html>");
      }
      json(response, 200, { eventId: "e1", status: "done" });
    });
    const api = new AgentSignal({ baseUrl: server.url, maxRetries: 0 });
    await assert.rejects(api.events.get("stall", { signal: AbortSignal.timeout(300) }), (error) => error.name === "TimeoutError");
    const longLived = new AbortController().signal;
    await api.events.get("e1", { signal: longLived });
    await assert.rejects(api.events.get("missing", { signal: longLived }), (error) => error.code === "not_found");
    await assert.rejects(api.events.get("html", { signal: longLived }), (error) => error.status === 502);
    assert.equal(getEventListeners(longLived, "abort").length, 0);
  });
});
