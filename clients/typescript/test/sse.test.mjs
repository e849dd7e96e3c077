// The SSE parser, and the receipt stream's catch-up on resync and reconnect, against a local stub server.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { AgentSignal, CATCH_UP_LAG_MS } from "@agent-signal/client";
import { SseParser } from "../dist/sse.js";
import { errorBody, json, startStub } from "./stub.mjs";

function parseAll(pieces) {
  const parser = new SseParser();
  const items = [];
  pieces.forEach((piece, i) => items.push(...parser.push(piece, i === pieces.length - 1)));
  return items;
}

describe("SSE parser", () => {
  const text =
    "\ufeff: connected\r\n\r\nevent: receipt\r\nid: r1\r\ndata: {\"id\":\"r1\"}\r\n\r\n" +
    "event: resync\rdata: {}\r\r: keep-alive\n\ndata: line one\ndata:line two\nretry: 10\nunknown\n\n" +
    "event: empty\n\nevent: receipt\ndata: last";

  const expected = [
    { kind: "comment", text: "connected" },
    { kind: "event", event: "receipt", data: '{"id":"r1"}', id: "r1" },
    { kind: "event", event: "resync", data: "{}", id: "r1" },
    { kind: "comment", text: "keep-alive" },
    { kind: "event", event: "message", data: "line one\nline two", id: "r1" },
  ];

  test("frames, comments, CRLF/CR/LF line ends; an unfinished last frame is not dispatched", () => {
    assert.deepEqual(parseAll([text]), expected);
  });

  test("the same items whatever the chunking, down to one character at a time", () => {
    assert.deepEqual(parseAll([...text]), expected);
    for (const size of [2, 3, 5, 7, 13]) {
      const pieces = [];
      for (let i = 0; i < text.length; i += size) pieces.push(text.slice(i, i + size));
      assert.deepEqual(parseAll(pieces), expected, `chunks of ${size}`);
    }
  });
});

function receipt(id, createdAt) {
  return { id, kind: "memory", status: "applied", title: id, createdAt, userId: "u1", agentId: "a1", topicId: "t1" };
}

function frame(response, r) {
  response.write(`event: receipt\nid: ${r.id}\ndata: ${JSON.stringify(r)}\n\n`);
}

describe("receipt stream against a stub", () => {
  test("resync and a dropped connection are caught up from the list, without repeats, until abort", { timeout: 20_000 }, async () => {
    const written = []; // what GET /v1/receipts answers (newest first), each dated when it is written
    const write = (id) => written[written.push(receipt(id, Date.now())) - 1];
    let first; // the first stream's response
    let second;
    let listed = 0;
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
        listed += 1; // 1: the snapshot, 2: the first connection's catch-up, 3: the resync's, 4: the reconnect's
        json(response, 200, { receipts: [...written].reverse() });
        if (listed === 2) {
          write("r2"); // only in the list, after the first catch-up read
          first.write("event: resync\ndata: {}\n\n");
        } else if (listed === 3) {
          write("r3"); // written after the resync's catch-up read, while the connection drops
          first.end();
        } else if (listed === 4) {
          frame(second, written[2]); // a repeat of r3, already caught up
          frame(second, write("r4"));
        }
        return;
      }
      response.sendDate = false; // our clock is the client's (the Date header's whole seconds would read as skew)
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      if (!first) {
        first = response;
        frame(response, write("r1"));
      } else {
        second = response;
      }
    });
    after(stub.close);
    const controller = new AbortController();
    const api = new AgentSignal({ baseUrl: stub.url, token: "t0k" });
    const ids = [];
    const options = { userId: "u1", agentId: "a1", topicId: "t1", signal: controller.signal, catchUpLagMs: 0 };
    for await (const r of api.receipts.stream(options)) {
      ids.push(r.id);
      if (r.id === "r4") controller.abort();
    }
    assert.deepEqual(ids, ["r1", "r2", "r3", "r4"]);
    const streams = stub.requests.filter((r) => r.url.startsWith("/v1/receipts/stream"));
    assert.equal(streams.length, 2);
    assert.equal(streams[0].url, "/v1/receipts/stream?userId=u1&agentId=a1&topicId=t1");
    assert.equal(streams[0].headers.authorization, "Bearer t0k");
    assert.equal(streams[0].headers.accept, "text/event-stream");
    const lists = stub.requests.filter((r) => r.url.startsWith("/v1/receipts?"));
    assert.equal(lists.length, 4);
    const since = lists.map((r) => new URL(r.url, "http://stub").searchParams.get("sinceCreatedAt"));
    assert.ok(stub.requests.indexOf(lists[0]) < stub.requests.indexOf(streams[0])); // the snapshot, before connecting
    assert.equal(lists[0].url, `/v1/receipts?userId=u1&agentId=a1&topicId=t1&sinceCreatedAt=${since[0]}&limit=50`);
    assert.equal(since[1], since[0]); // the first connection's catch-up: from the snapshot's start
    assert.equal(since[2], String(written[0].createdAt)); // the newest seen at the resync
    assert.equal(since[3], String(written[1].createdAt)); // the newest seen before the drop
  });

  test("a receipt dated before the newest one seen, committed while the stream was away, is caught up", { timeout: 20_000 }, async () => {
    const now = Date.now();
    const written = [];
    let first;
    let listed = 0;
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
        const since = Number(url.searchParams.get("sinceCreatedAt"));
        json(response, 200, { receipts: written.filter((r) => r.createdAt >= since).sort((x, y) => y.createdAt - x.createdAt) });
        listed += 1;
        if (listed === 2) {
          // after the first connection's catch-up: an older event's receipt, committed during the gap
          written.push(receipt("a", now - 5_000));
          first.end();
        }
        return;
      }
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      if (!first) {
        first = response;
        written.push(receipt("b", now)); // the newest, seen on the first connection
        frame(response, written[0]);
      } else {
        written.push(receipt("c", now + 1));
        frame(response, written[2]);
      }
    });
    after(stub.close);
    const controller = new AbortController();
    const ids = [];
    for await (const r of new AgentSignal({ baseUrl: stub.url }).receipts.stream({ userId: "u1", signal: controller.signal })) {
      ids.push(r.id);
      if (r.id === "c") controller.abort();
    }
    assert.deepEqual(ids, ["b", "a", "c"]);
    assert.throws(() => new AgentSignal({ baseUrl: stub.url }).receipts.stream({ userId: "u1", catchUpLagMs: -1 }), TypeError);
  });

  test("receipts written before the stream began are never yielded, even by a catch-up; those after, once", async () => {
    const now = Date.now();
    const written = [receipt("old1", now - 2_000), receipt("old2", now - 1_000)]; // there before the stream began
    let at = now;
    const write = (id) => written[written.push(receipt(id, (at = Math.max(at + 1, Date.now())))) - 1]; // in order
    let connections = 0;
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
        const since = Number(url.searchParams.get("sinceCreatedAt"));
        json(response, 200, { receipts: written.filter((r) => r.createdAt >= since).sort((x, y) => y.createdAt - x.createdAt) });
        return;
      }
      connections += 1;
      if (connections === 1) write("between"); // after the snapshot, before the server subscribed: only in the list
      else write("gap"); // while the stream was away
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      if (connections === 1) {
        frame(response, write("live"));
        response.end(); // a drop: the reconnect's catch-up reads back over old1 and old2 again
      } else {
        frame(response, write("last"));
      }
    });
    after(stub.close);
    const controller = new AbortController();
    const ids = [];
    for await (const r of new AgentSignal({ baseUrl: stub.url }).receipts.stream({ userId: "u1", signal: controller.signal })) {
      ids.push(r.id);
      if (r.id === "last") controller.abort();
    }
    assert.deepEqual(ids, ["between", "live", "gap", "last"]);
    const [snapshot] = stub.requests;
    const since = Number(new URL(snapshot.url, "http://stub").searchParams.get("sinceCreatedAt"));
    assert.equal(snapshot.url, `/v1/receipts?userId=u1&sinceCreatedAt=${since}&limit=50`); // catchUpLagMs back, first
    assert.ok(since >= now - CATCH_UP_LAG_MS && since <= Date.now() - CATCH_UP_LAG_MS, String(since));
  });

  test("with no userId (a user token's own user) the stream and its lists leave it out; an empty one is refused", async () => {
    const stub = await startStub((request, response) => {
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: [] });
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      frame(response, receipt("mine", 1));
    });
    after(stub.close);
    const api = new AgentSignal({ baseUrl: stub.url });
    for await (const r of api.receipts.stream({ agentId: "a1" })) {
      assert.equal(r.id, "mine");
      break;
    }
    assert.deepEqual(
      stub.requests.map((r) => r.url.replace(/sinceCreatedAt=\d+/, "sinceCreatedAt=N")),
      [
        "/v1/receipts?agentId=a1&sinceCreatedAt=N&limit=50",
        "/v1/receipts/stream?agentId=a1",
        "/v1/receipts?agentId=a1&sinceCreatedAt=N&limit=50",
      ],
    );
    assert.throws(() => api.receipts.stream({ userId: "" }), (error) => error instanceof TypeError && /userId/.test(error.message));
  });

  test("a stream whose user is erased rejects the loop with user_erased instead of reconnecting", async () => {
    const stub = await startStub((request, response) => {
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: [] });
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      frame(response, receipt("r1", 1000));
      response.end(": user erased\n\n");
    });
    after(stub.close);
    const ids = [];
    await assert.rejects(
      (async () => {
        for await (const r of new AgentSignal({ baseUrl: stub.url }).receipts.stream({ userId: "u1" })) ids.push(r.id);
      })(),
      (error) => error.code === "user_erased",
    );
    assert.deepEqual(ids, ["r1"]);
    assert.equal(stub.requests.filter((r) => r.url.startsWith("/v1/receipts/stream")).length, 1);
  });

  test("a 429 too_many_streams with Retry-After is retried before the stream opens; leaving closes it", async () => {
    let closed = 0;
    let streams = 0;
    const stub = await startStub((request, response, raw) => {
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: [] });
      streams += 1;
      if (streams === 1) {
        json(response, 429, errorBody("too_many_streams", "too many open streams"), { "retry-after": "0" });
        return;
      }
      raw.socket.on("close", () => (closed += 1));
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      frame(response, receipt("only", 1));
    });
    after(stub.close);
    const stream = new AgentSignal({ baseUrl: stub.url }).receipts.stream({ userId: "u1" });
    for await (const r of stream) {
      assert.equal(r.id, "only");
      break;
    }
    await stream.opened;
    assert.equal(streams, 2);
    while (closed === 0) await new Promise((resolve) => setTimeout(resolve, 5)); // the server sees the client go
  });

  test("a stream the server refuses rejects the loop and `opened` with the error", async () => {
    const stub = await startStub((request, response) => {
      if (request.url.startsWith("/v1/receipts?")) return json(response, 200, { receipts: [] });
      json(response, 404, errorBody("not_found", "not yours", "userId"));
    });
    after(stub.close);
    const stream = new AgentSignal({ baseUrl: stub.url }).receipts.stream({ userId: "u2" });
    await assert.rejects(
      (async () => {
        for await (const _ of stream);
      })(),
      (error) => error.status === 404 && error.field === "userId",
    );
    await assert.rejects(stream.opened, (error) => error.code === "not_found");
  });
});

describe("SSE parser, line ends split across reads", () => {
  test("a CRLF whose LF comes alone, then an LF: the blank line still ends the frame", () => {
    const expected = [
      { kind: "event", event: "message", data: "a", id: "" },
      { kind: "event", event: "message", data: "b", id: "" },
    ];
    assert.deepEqual(parseAll(["data: a\r\n\ndata: b\n\n"]), expected);
    assert.deepEqual(parseAll(["data: a\r", "\n", "\ndata: b\n\n"]), expected);
    assert.deepEqual(parseAll(["data: a\r", "", "\n", "\n", "data: b\n\n"]), expected);
  });
});

describe("receipt stream catch-up over many pages", () => {
  /** A stub whose stream sends one receipt and a resync; its list holds `total` newer ones, `perPage` a page. */
  async function backlog(total, perPage) {
    const newer = Array.from({ length: total }, (_, i) => receipt(`n${i + 1}`, 2000 + i)); // oldest first
    let listings = 0;
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
        if (!url.searchParams.has("cursor")) listings += 1;
        // the snapshot and the first connection's catch-up find nothing: the backlog comes with the resync
        if (listings <= 2) return json(response, 200, { receipts: [] });
        const from = Number(url.searchParams.get("cursor") ?? "0");
        const page = [...newer].reverse().slice(from, from + perPage); // newest first, as the server lists
        const body = { receipts: page };
        if (from + perPage < total) body.cursor = String(from + perPage);
        json(response, 200, body);
        return;
      }
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      frame(response, receipt("r1", 1000));
      response.write("event: resync\ndata: {}\n\n");
    });
    after(stub.close);
    return stub;
  }

  test("every receipt of a long catch-up is yielded, oldest first, short pages and all", { timeout: 20_000 }, async () => {
    const stub = await backlog(60, 2); // 30 pages
    const controller = new AbortController();
    const ids = [];
    const api = new AgentSignal({ baseUrl: stub.url });
    for await (const r of api.receipts.stream({ userId: "u1", signal: controller.signal })) {
      ids.push(r.id);
      if (r.id === "n60") controller.abort();
    }
    assert.deepEqual(ids, ["r1", ...Array.from({ length: 60 }, (_, i) => `n${i + 1}`)]);
  });

  test("past its page limit within the lag only (older than the newest seen), a catch-up stops without an error", { timeout: 20_000 }, async () => {
    const { CATCH_UP_PAGES } = await import("../dist/resources/receipt_stream.js");
    const older = Array.from({ length: CATCH_UP_PAGES + 1 }, (_, i) => receipt(`o${i}`, 999_000 - i)); // newest first
    let listings = 0;
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
        if (!url.searchParams.has("cursor")) listings += 1;
        // the snapshot and the first connection's catch-up find nothing: these come with the resync
        if (listings <= 2) return json(response, 200, { receipts: [] });
        const from = Number(url.searchParams.get("cursor") ?? "0");
        const body = { receipts: older.slice(from, from + 1) };
        if (from + 1 < older.length) body.cursor = String(from + 1);
        json(response, 200, body);
        return;
      }
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      frame(response, receipt("r1", 1_000_000));
      response.write("event: resync\ndata: {}\n\n");
    });
    after(stub.close);
    const controller = new AbortController();
    const ids = [];
    for await (const r of new AgentSignal({ baseUrl: stub.url }).receipts.stream({ userId: "u1", signal: controller.signal })) {
      ids.push(r.id);
      if (ids.length === CATCH_UP_PAGES + 1) controller.abort();
    }
    // the lag's first 200 pages (o0 … o199: the 201st is not read), oldest of them first
    const read = Array.from({ length: CATCH_UP_PAGES }, (_, i) => `o${CATCH_UP_PAGES - 1 - i}`);
    assert.deepEqual(ids, ["r1", ...read]);
  });

  test("the snapshot before the first connection stops quietly at the page limit; the stream then opens", async () => {
    const { CATCH_UP_PAGES } = await import("../dist/resources/receipt_stream.js");
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
        const from = Number(url.searchParams.get("cursor") ?? "0"); // pages without end, one old receipt each
        return json(response, 200, { receipts: [receipt(`o${from}`, 1000 - from)], cursor: String(from + 1) });
      }
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      frame(response, receipt("new", Date.now()));
    });
    after(stub.close);
    const ids = [];
    for await (const r of new AgentSignal({ baseUrl: stub.url }).receipts.stream({ userId: "u1" })) {
      ids.push(r.id);
      break;
    }
    assert.deepEqual(ids, ["new"]); // the first catch-up's pages are the snapshot's: nothing of them is yielded
    const first = stub.requests.findIndex((r) => r.url.startsWith("/v1/receipts/stream"));
    assert.equal(first, CATCH_UP_PAGES);
  });

  test("a catch-up past its page limit rejects the loop with catch_up_overflow rather than skip the oldest", { timeout: 20_000 }, async () => {
    const { CATCH_UP_PAGES } = await import("../dist/resources/receipt_stream.js");
    const stub = await backlog(CATCH_UP_PAGES + 1, 1);
    const ids = [];
    const api = new AgentSignal({ baseUrl: stub.url });
    await assert.rejects(
      (async () => {
        for await (const r of api.receipts.stream({ userId: "u1" })) ids.push(r.id);
      })(),
      (error) => error.code === "catch_up_overflow",
    );
    assert.deepEqual(ids, ["r1"]);
  });
});

describe("receipt stream, not iterated", () => {
  test("an abort before anyone iterates rejects `opened` with stream_ended instead of leaving it pending", { timeout: 5_000 }, async () => {
    const api = new AgentSignal({ baseUrl: "http://127.0.0.1:9" }); // never reached: nothing connects
    const controller = new AbortController();
    const stream = api.receipts.stream({ userId: "u1", signal: controller.signal });
    controller.abort();
    await assert.rejects(stream.opened, (error) => error.code === "stream_ended");
    const already = api.receipts.stream({ userId: "u1", signal: AbortSignal.abort() });
    await assert.rejects(already.opened, (error) => error.code === "stream_ended");
  });
});
