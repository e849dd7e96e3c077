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
    const server = await stub((request, response) => {
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: [] });
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

  test("nor the rest of a catch-up", { timeout: 20_000 }, async () => {
    const listed = ["c5", "c4", "c3", "c2", "c1"].map((id, i) => receipt(id, 100 - i)); // newest first
    let lists = 0;
    const server = await stub((request, response) => {
      // the snapshot and the first connection's catch-up find nothing: these come with the resync
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: ++lists <= 2 ? [] : listed });
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
      // "late" is written while the first connection is silent: the snapshot and its catch-up do not have it
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: connections < 2 ? [] : [receipt("late", 2)] });
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

describe("a receipt stream whose server goes away for a while (a web restart)", () => {
  /**
   * A stub whose stream connections answer in turn as `plan` says: "open" (connected, a receipt, then the
   * connection ends), "last" (connected, a receipt, kept open), "gone" (the socket is dropped: no answer), a
   * status with the server's error, or `[status, code, headers]`. Its list answers nothing to the snapshot and the
   * first connection's catch-up, then `missed` (written while the server was gone).
   */
  async function restarting(plan, { errors = {} } = {}) {
    const answers = [];
    const server = await stub((request, response, raw) => {
      const n = answers.length;
      if (request.url.startsWith("/v1/receipts?")) {
        return json(response, 200, { receipts: n > 1 ? [receipt("missed", 2)] : [] });
      }
      const step = plan[Math.min(n, plan.length - 1)];
      answers.push(step);
      if (step === "gone") return raw.socket.destroy();
      if (typeof step === "number") return json(response, step, errors[step] ?? errorBody("store_unavailable", "restarting"), { "retry-after": "0" });
      if (Array.isArray(step)) return json(response, step[0], errorBody(step[1], "refused"), step[2]);
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n" + frame(receipt(step === "open" ? "before" : "after", step === "open" ? 1 : 3)));
      if (step === "open") response.end();
    });
    return { server, answers };
  }

  async function drain(api, until, options = {}) {
    const controller = new AbortController();
    const ids = [];
    for await (const r of api.receipts.stream({ userId: "u1", signal: controller.signal, ...options })) {
      ids.push(r.id);
      if (r.id === until) controller.abort();
    }
    return ids;
  }

  test("a reconnect answered 503 (after http's own retries) is a drop: waited out, reconnected, caught up", async () => {
    // maxRetries 2: a reconnect is three requests; two drops in a row (the end, then the 503s) are allowed
    const { server, answers } = await restarting(["open", 503, 503, 503, "last"]);
    const ids = await drain(new AgentSignal({ baseUrl: server.url, maxRetries: 2 }), "after");
    assert.deepEqual(ids, ["before", "missed", "after"]);
    assert.deepEqual(answers, ["open", 503, 503, 503, "last"]);
  });

  test("so is a reconnect that gets no answer at all (the connection dropped before any)", { timeout: 20_000 }, async () => {
    const { server, answers } = await restarting(["open", "gone", "gone", "gone", "last"]);
    const ids = await drain(new AgentSignal({ baseUrl: server.url, maxRetries: 2 }), "after");
    assert.deepEqual(ids, ["before", "missed", "after"]);
    assert.deepEqual(answers, ["open", "gone", "gone", "gone", "last"]);
  });

  test("past maxRetries drops in a row, failed reconnects included, the loop ends with stream_closed (reconnectForMs 0)", async () => {
    const { server, answers } = await restarting(["open", 502]);
    const api = new AgentSignal({ baseUrl: server.url, maxRetries: 1 });
    await assert.rejects(drain(api, "never", { reconnectForMs: 0 }), (error) => {
      assert.equal(error.code, "stream_closed");
      assert.match(error.message, /after 2 drops in a row over \d+\.\d s$/);
      assert.equal(error.cause?.status, 502); // the last reconnect's failure
      return true;
    });
    assert.deepEqual(answers, ["open", 502, 502]);

    const once = await restarting(["open"]);
    const noRetries = new AgentSignal({ baseUrl: once.server.url, maxRetries: 0 });
    await assert.rejects(drain(noRetries, "never", { reconnectForMs: 0 }), (error) => {
      assert.match(error.message, /after 1 drop in a row over 0\.\d s$/);
      return error.code === "stream_closed" && error.cause === undefined; // the connection ended: no failure
    });
  });

  test("drops past maxRetries go on being reconnected for reconnectForMs, then end the loop", { timeout: 20_000 }, async () => {
    // a 500 is not retried by http: each reconnect is one request, one drop
    const { server, answers } = await restarting(["open", 500]);
    const api = new AgentSignal({ baseUrl: server.url, maxRetries: 1 });
    let rowMs = 0;
    await assert.rejects(drain(api, "never", { reconnectForMs: 900 }), (error) => {
      assert.equal(error.code, "stream_closed");
      const [, drops, over] = /after (\d+) drops in a row over (\d+\.\d) s$/.exec(error.message) ?? [];
      assert.ok(Number(drops) >= 3, error.message); // more than maxRetries + 1
      rowMs = Number(over) * 1000;
      return true;
    });
    // the first drop (the connection's end), then reconnects after 0.25-0.5 s, 0.5-1 s, 1-2 s: past 0.9 s by the 4th
    assert.ok(answers.length >= 3 && answers.length <= 4, String(answers));
    assert.ok(rowMs >= 900, String(rowMs));
    for (const bad of [-1, Number.NaN, 2 ** 31]) {
      assert.throws(() => api.receipts.stream({ userId: "u1", reconnectForMs: bad }), (error) => error instanceof TypeError && /reconnectForMs/.test(error.message));
    }
  });

  test("a reconnect still answered 429 with Retry-After after http's retries is a drop, waited out at least that long", { timeout: 20_000 }, async () => {
    // a user's streams all reconnecting at once after a web restart: the limit frees within the Retry-After
    const limited = (retryAfter) => [429, "rate_limited", { "retry-after": retryAfter }];
    const plan = ["open", limited("0"), limited("0"), limited("2"), "last"]; // maxRetries 2: a reconnect is three requests
    const { server, answers } = await restarting(plan);
    const ids = await drain(new AgentSignal({ baseUrl: server.url, maxRetries: 2 }), "after");
    assert.deepEqual(ids, ["before", "missed", "after"]);
    assert.deepEqual(answers, plan);
    const streams = server.requests.filter((r) => r.url.startsWith("/v1/receipts/stream"));
    const waited = streams[4].at - streams[3].at;
    assert.ok(waited >= 1990, `reconnected ${waited} ms after a Retry-After of 2 s`);
  });

  test("a reconnect answered 429 without Retry-After (a quota: waiting will not help) ends the loop", async () => {
    const { server, answers } = await restarting(["open", [429, "quota_exceeded", {}]]);
    const api = new AgentSignal({ baseUrl: server.url, maxRetries: 3 });
    await assert.rejects(drain(api, "never"), (error) => error.status === 429 && error.code === "quota_exceeded");
    assert.equal(answers.length, 2);
  });

  test("a reconnect answered 429 with a Retry-After past a minute ends the loop rather than sleep unseen", async () => {
    const { server, answers } = await restarting(["open", [429, "rate_limited", { "retry-after": "3600" }]]);
    const api = new AgentSignal({ baseUrl: server.url, maxRetries: 3 });
    await assert.rejects(drain(api, "never"), (error) => error.status === 429 && error.retryAfterS === 3600);
    assert.equal(answers.length, 2);
  });

  test("a reconnect the server refuses (401: the user token expired) ends the loop with that error", async () => {
    const errors = { 401: errorBody("unauthorized", "token expired") };
    const { server, answers } = await restarting(["open", 401], { errors });
    const api = new AgentSignal({ baseUrl: server.url, maxRetries: 3 });
    await assert.rejects(drain(api, "never"), (error) => error.status === 401 && error.code === "unauthorized");
    assert.deepEqual(answers, ["open", 401]);
  });

  for (const [status, code] of [[503, "store_unavailable"], [429, "rate_limited"]]) {
    test(`a catch-up whose list is answered ${status} ${code} drops the connection; the next one catches up`, { timeout: 20_000 }, async () => {
      let lists = 0;
      let streams = 0;
      const server = await stub((request, response) => {
        if (request.url.startsWith("/v1/receipts?")) {
          lists += 1; // 1: the snapshot; 2 and 3: the first catch-up and its one retry; 4: the reconnect's
          if (lists === 2 || lists === 3) return json(response, status, errorBody(code, "restarting"), { "retry-after": "0" });
          return json(response, 200, { receipts: lists === 4 ? [receipt("missed", 2)] : [] });
        }
        streams += 1;
        response.writeHead(200, { "content-type": "text/event-stream" });
        response.write(": connected\n\n");
      });
      const ids = await drain(new AgentSignal({ baseUrl: server.url, maxRetries: 1 }), "missed");
      assert.deepEqual(ids, ["missed"]);
      assert.deepEqual([lists, streams], [4, 2]);
    });
  }
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

  test("the baseUrl's error shows it without its query or fragment (where a key may sit)", () => {
    for (const bad of ["http://h:1/api?api_key=S3CR3T", "http://h:1/api#token=S3CR3T", "ftp://h:1/api?api_key=S3CR3T"]) {
      assert.throws(
        () => new AgentSignal({ baseUrl: bad }),
        (error) => error instanceof TypeError && error.message.includes('"') && !error.message.includes("S3CR3T"),
        bad,
      );
    }
    assert.throws(() => new AgentSignal({ baseUrl: "http://h:1/api?api_key=S3CR3T" }), /got "http:\/\/h:1\/api"/);
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
  test("receipt streams sharing one signal leave no listener on it once they end, by a break or by the server", async () => {
    const server = await stub((request, response) => {
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: [] });
      if (request.url.includes("userId=refused")) return json(response, 403, errorBody("forbidden", "not yours"));
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n" + frame(receipt("r1", 1)));
      if (request.url.includes("userId=erased")) response.end(": user erased\n\n");
    });
    const api = new AgentSignal({ baseUrl: server.url });
    const shared = new AbortController().signal; // one app-wide signal, as a server passes to every stream
    for (let i = 0; i < 4; i += 1) {
      for await (const _ of api.receipts.stream({ userId: "u1", signal: shared })) break;
    }
    for (const userId of ["refused", "erased"]) {
      await assert.rejects(async () => {
        for await (const _ of api.receipts.stream({ userId, signal: shared }));
      });
    }
    assert.equal(getEventListeners(shared, "abort").length, 0);
  });

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
