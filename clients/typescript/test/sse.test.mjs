// The SSE parser, and the receipt stream's catch-up on resync and reconnect, against a local stub server.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { AgentSignal } from "@agent-signal/client";
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
  test("resync and a dropped connection are caught up from the list, without repeats, until abort", async () => {
    const written = [receipt("r1", 1000)]; // what GET /v1/receipts answers (newest first)
    let first; // the first stream's response
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
        json(response, 200, { receipts: [...written].reverse() });
        if (first) {
          written.push(receipt("r3", 3000)); // written after the catch-up read, while the connection drops
          first.end();
          first = undefined;
        }
        return;
      }
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      if (written.length === 1) {
        first = response;
        frame(response, written[0]);
        written.push(receipt("r2", 2000));
        response.write("event: resync\ndata: {}\n\n"); // r2 is only in the list
      } else {
        frame(response, written[2]); // a repeat of r3, already caught up
        written.push(receipt("r4", 4000));
        frame(response, written[3]);
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
    assert.equal(lists.length, 2);
    assert.match(lists[0].url, /sinceCreatedAt=1000&/); // the newest seen at the resync
    assert.match(lists[1].url, /sinceCreatedAt=2000&/); // the newest seen before the drop
  });

  test("a receipt dated before the newest one seen, committed while the stream was away, is caught up", async () => {
    const now = Date.now();
    const written = [receipt("b", now)]; // the newest, seen on the first connection
    let first;
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
        const since = Number(url.searchParams.get("sinceCreatedAt"));
        json(response, 200, { receipts: written.filter((r) => r.createdAt >= since).sort((x, y) => y.createdAt - x.createdAt) });
        return;
      }
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(": connected\n\n");
      if (!first) {
        first = response;
        frame(response, written[0]);
        written.push(receipt("a", now - 5_000)); // an older event's receipt, committed during the gap
        response.end();
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

  test("a stream whose user is erased rejects the loop with user_erased instead of reconnecting", async () => {
    const stub = await startStub((_, response) => {
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
    const stub = await startStub((request, response, raw) => {
      if (stub.requests.length === 1) {
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
    assert.equal(stub.requests.length, 2);
    while (closed === 0) await new Promise((resolve) => setTimeout(resolve, 5)); // the server sees the client go
  });

  test("a stream the server refuses rejects the loop and `opened` with the error", async () => {
    const stub = await startStub((_, response) => json(response, 404, errorBody("not_found", "not yours", "userId")));
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
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
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

  test("every receipt of a long catch-up is yielded, oldest first, short pages and all", async () => {
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

  test("past its page limit within the lag only (older than the newest seen), a catch-up stops without an error", async () => {
    const { CATCH_UP_PAGES } = await import("../dist/resources/receipt_stream.js");
    const older = Array.from({ length: CATCH_UP_PAGES + 1 }, (_, i) => receipt(`o${i}`, 999_000 - i)); // newest first
    const stub = await startStub((request, response) => {
      const url = new URL(request.url, "http://stub");
      if (url.pathname === "/v1/receipts") {
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

  test("a catch-up past its page limit rejects the loop with catch_up_overflow rather than skip the oldest", async () => {
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
