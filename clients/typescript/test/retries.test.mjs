// Retries and request shape, against a local stub server started here (no stack needed).
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { AgentSignal, AgentSignalError } from "@agent-signal/client";
import { errorBody, json, scripted, startStub } from "./stub.mjs";

const EVENT = { sourceType: "agent.user.message", sourceId: "s-1", payload: { message: "hi" } };
const ACCEPTED = { results: [{ eventId: "evt_1", sourceId: "s-1", status: "accepted" }] };

describe("retries", () => {
  test("503 with Retry-After twice, then 202: the send succeeds, waiting as asked, with the same body", async () => {
    const busy = [503, errorBody("store_unavailable", "the store is busy"), { "retry-after": "1" }];
    const stub = await scripted([busy, busy, [202, ACCEPTED]]);
    const api = new AgentSignal({ baseUrl: stub.url, token: "key-1" });
    const batch = [EVENT, { ...EVENT, sourceId: "s-2" }];
    assert.deepEqual(await api.events.send(batch), ACCEPTED);
    assert.equal(stub.requests.length, 3);
    for (const request of stub.requests) {
      assert.equal(request.method, "POST");
      assert.equal(request.url, "/v1/events");
      assert.deepEqual(JSON.parse(request.body), { events: batch });
      assert.equal(request.headers.authorization, "Bearer key-1");
      assert.equal(request.headers["content-type"], "application/json");
    }
    // Retry-After: 1 is honoured: each retry came at least a second after the answer that asked for it.
    const [a, b, c] = stub.requests.map((r) => r.at);
    assert.ok(b - a >= 990 && c - b >= 990, `gaps ${b - a} ms and ${c - b} ms`);
  });

  test("maxRetries caps the retries: the last answer becomes the error, with retryAfterS", async () => {
    const stub = await scripted([[503, errorBody("store_unavailable", "the store is busy"), { "retry-after": "0" }]]);
    const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 1 });
    await assert.rejects(api.events.send(EVENT), (error) => {
      assert.ok(error instanceof AgentSignalError);
      assert.deepEqual([error.status, error.code, error.retryAfterS], [503, "store_unavailable", 0]);
      return true;
    });
    assert.equal(stub.requests.length, 2);
  });

  test("429 rate_limited with Retry-After is retried; 429 without one (a quota) is not", async () => {
    const limited = await scripted([[429, errorBody("rate_limited", "slow down"), { "retry-after": "0" }], [202, ACCEPTED]]);
    assert.deepEqual(await new AgentSignal({ baseUrl: limited.url }).events.send(EVENT), ACCEPTED);
    assert.equal(limited.requests.length, 2);

    const quota = await scripted([[429, errorBody("quota_exceeded", "over the storage quota")]]);
    await assert.rejects(new AgentSignal({ baseUrl: quota.url }).events.send(EVENT), (error) => {
      assert.deepEqual([error.status, error.code, error.retryAfterS], [429, "quota_exceeded", undefined]);
      return true;
    });
    assert.equal(quota.requests.length, 1);
  });

  test("Retry-After: 0, or a date already past, waits the backoff instead of retrying at once", async () => {
    const now = [503, errorBody("store_unavailable", "the store is busy"), { "retry-after": "0" }];
    const past = [429, errorBody("rate_limited", "slow down"), { "retry-after": "Wed, 21 Oct 2015 07:28:00 GMT" }];
    const stub = await scripted([now, past, [202, ACCEPTED]]);
    assert.deepEqual(await new AgentSignal({ baseUrl: stub.url }).events.send(EVENT), ACCEPTED);
    const [a, b, c] = stub.requests.map((r) => r.at);
    // the backoff's first steps: 0.25-0.5 s, then 0.5-1 s
    assert.ok(b - a >= 240 && c - b >= 490, `gaps ${b - a} ms and ${c - b} ms`);
  });

  test("a Retry-After over 60 s is not waited for: the error carries it", async () => {
    const stub = await scripted([[429, errorBody("too_many_streams", "too many"), { "retry-after": "120" }]]);
    await assert.rejects(new AgentSignal({ baseUrl: stub.url }).scopes.list(), (error) => error.retryAfterS === 120);
    assert.equal(stub.requests.length, 1);
  });

  test("other errors are not retried, and a body that is not the error shape keeps its status", async () => {
    const stub = await scripted([[422, errorBody("invalid_field", "sourceId is bad", "sourceId")]]);
    await assert.rejects(new AgentSignal({ baseUrl: stub.url }).events.send(EVENT), (error) => error.field === "sourceId");
    assert.equal(stub.requests.length, 1);

    const proxy = await startStub((_, response) => {
      response.writeHead(502, { "content-type": "text/html" });
      response.end("<html>bad gateway</html>");
    });
    after(proxy.close);
    await assert.rejects(new AgentSignal({ baseUrl: proxy.url, maxRetries: 0 }).dlq.list(), (error) => {
      assert.deepEqual([error.status, error.code, error.field], [502, "http_502", undefined]);
      assert.match(error.message, /bad gateway/);
      return true;
    });
  });

  test("a gateway's 502 and 504 are retried for a send and a read, with Retry-After or a backoff", async () => {
    const gateway = (status, headers) => [status, errorBody(`http_${status}`, "bad gateway"), headers];
    const stub = await scripted([gateway(502, { "retry-after": "0" }), gateway(504, {}), [202, ACCEPTED]]);
    assert.deepEqual(await new AgentSignal({ baseUrl: stub.url }).events.send(EVENT), ACCEPTED);
    assert.equal(stub.requests.length, 3);

    const read = await scripted([gateway(504, { "retry-after": "0" }), [200, { events: [] }]]);
    assert.deepEqual(await new AgentSignal({ baseUrl: read.url }).events.list({}), { events: [] });
    assert.equal(read.requests.length, 2);
  });

  test("a gateway's 502 or 504 to a call that may act twice is thrown at once", async () => {
    for (const status of [502, 504]) {
      const stub = await scripted([[status, errorBody(`http_${status}`, "bad gateway"), { "retry-after": "0" }]]);
      const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 3 });
      await assert.rejects(api.dlq.redrive(["evt_1"]), (error) => error.status === status);
      await assert.rejects(api.events.cancel("evt_1"), (error) => error.status === status);
      await assert.rejects(api.tokens.create({ userId: "u1" }), (error) => error.status === status);
      assert.equal(stub.requests.length, 3);
    }
  });

  test("no answer at all (connection refused) is a network_error after the retries", async () => {
    const stub = await scripted([[200, {}]]);
    await stub.close();
    const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 1 });
    await assert.rejects(api.events.get("evt_1"), (error) => {
      assert.deepEqual([error.status, error.code], [0, "network_error"]);
      assert.ok(error.cause);
      return true;
    });
  });

  test("a redrive answered 503 store_unavailable is not repeated (it may have redriven part); 503 busy is", async () => {
    const partial = await scripted([
      [503, errorBody("store_unavailable", "the store failed"), { "retry-after": "0" }],
      [200, { redriven: ["evt_b"], notDead: ["evt_a"] }],
    ]);
    await assert.rejects(new AgentSignal({ baseUrl: partial.url }).dlq.redrive(["evt_a", "evt_b"]), (error) => {
      assert.deepEqual([error.status, error.code, error.retryAfterS], [503, "store_unavailable", 0]);
      return true;
    });
    assert.equal(partial.requests.length, 1);

    const answer = { redriven: ["evt_a"], notDead: [] };
    const busy = await scripted([[503, errorBody("busy", "changed under us"), { "retry-after": "0" }], [200, answer]]);
    assert.deepEqual(await new AgentSignal({ baseUrl: busy.url }).dlq.redrive(["evt_a"]), answer);
    assert.equal(busy.requests.length, 2);
  });

  test("{all: true} is sent again while the answer says more; the answers are joined and progress is heard", async () => {
    const stub = await scripted([
      [200, { discarded: ["evt_a", "evt_b"], notDead: [], more: true, until: 1700000000000 }],
      [200, { discarded: ["evt_c"], notDead: ["evt_x"], more: true, until: 1700000000000 }],
      [200, { discarded: ["evt_d"], notDead: [] }],
    ]);
    const heard = [];
    const joined = await new AgentSignal({ baseUrl: stub.url }).dlq.discard({ all: true }, "cleanup", {
      onProgress: (n) => heard.push(n),
    });
    assert.deepEqual(joined, { discarded: ["evt_a", "evt_b", "evt_c", "evt_d"], notDead: ["evt_x"] });
    assert.deepEqual(heard, [2, 3]);
    const sweep = { all: true, reason: "cleanup", until: 1700000000000 }; // the sweep's start, sent back
    assert.deepEqual(stub.requests.map((r) => JSON.parse(r.body)), [{ all: true, reason: "cleanup" }, sweep, sweep]);

    // a batch of only stale ids is progress (the server drops them); the same ids again are not: unfinished
    const stuck = await scripted([[200, { redriven: [], notDead: ["evt_y"], more: true }]]);
    const once = await new AgentSignal({ baseUrl: stuck.url }).dlq.redrive({ all: true });
    assert.deepEqual(once, { redriven: [], notDead: ["evt_y"], more: true });
    assert.equal(stuck.requests.length, 2);
    const stale = await scripted([
      [200, { redriven: [], notDead: ["s1", "s2"], more: true, until: 5 }],
      [200, { redriven: ["a"], notDead: [] }],
    ]);
    const past = await new AgentSignal({ baseUrl: stale.url }).dlq.redrive({ all: true });
    assert.deepEqual(past, { redriven: ["a"], notDead: ["s1", "s2"] });
    assert.equal(stale.requests.length, 2);
  });

  test("a baseUrl with a password is refused without echoing it", () => {
    assert.throws(
      () => new AgentSignal({ baseUrl: "http://admin:s3cr3t-pass@127.0.0.1:8000" }),
      (error) => error instanceof TypeError && /user name or password/.test(error.message) && !error.message.includes("s3cr3t"),
    );
  });

  test("a token with a CR, an LF or another character a header cannot carry is refused at construction, unquoted", () => {
    const secret = "as_0123abcd_S3CR3TVALUE";
    for (const bad of [`${secret}\n`, `${secret}\r\nX-Injected: 1`, `${secret}\u0000`, `\t${secret}`, `${secret} x`, `${secret}\u00e9`]) {
      assert.throws(
        () => new AgentSignal({ baseUrl: "http://127.0.0.1:1", token: bad }),
        (error) =>
          error instanceof TypeError && /token must be a printable header value/.test(error.message) && !error.message.includes("S3CR3T"),
        JSON.stringify(bad),
      );
    }
    assert.equal(new AgentSignal({ baseUrl: "http://127.0.0.1:1", token: secret }).tokenUserId, undefined); // a fine one
  });

  test("a fetch that throws over a header does not carry the token into the error, nor as its cause", async () => {
    const secret = "as_0123abcd_S3CR3TVALUE";
    const refusing = [
      (_, init) => Promise.reject(new TypeError(`Headers.append: "${init.headers.authorization}" is an invalid header value.`)),
      (_, init) => Promise.reject(new TypeError("fetch failed", { cause: new TypeError(`invalid ${init.headers.authorization}`) })),
    ];
    for (const fetch of refusing) {
      const api = new AgentSignal({ baseUrl: "http://127.0.0.1:1", token: secret, fetch, maxRetries: 0 });
      await assert.rejects(api.events.get("evt_1"), (error) => {
        assert.equal(error.code, "network_error");
        assert.ok(!error.message.includes("S3CR3T"), error.message);
        for (let at = error.cause; at; at = at.cause) assert.ok(!String(at.message).includes("S3CR3T"), at.message);
        return true;
      });
    }
  });

  test("a proxy's page that echoes the Authorization header does not carry the token into the error", async () => {
    const secret = "as_0123abcd_S3CR3TVALUE";
    const stub = await startStub((request, response) => {
      const sent = request.headers.authorization;
      if (request.url.endsWith("/html")) {
        response.writeHead(502, { "content-type": "text/html" });
        return response.end(`<html>bad gateway; you sent Authorization: ${sent}</html>`);
      }
      if (request.url.endsWith("/json")) return json(response, 502, { detail: "bad gateway", headers: { authorization: sent } });
      response.writeHead(200, { "content-type": "text/plain" }); // a success that is not JSON, the token first
      response.end(`${sent.slice("Bearer ".length)} is what you sent`);
    });
    after(stub.close);
    const api = new AgentSignal({ baseUrl: stub.url, token: secret, maxRetries: 0 });
    for (const [path, code] of [["html", "http_502"], ["json", "http_502"], ["plain", "invalid_response"]]) {
      await assert.rejects(api.events.get(path), (error) => {
        assert.equal(error.code, code);
        // JSON.parse's message (the cause's) quotes the start of the text it failed on: not even part of the token
        const seen = JSON.stringify([error.message, error.body, error.cause?.message]);
        assert.ok(!seen.includes("as_0123"), seen);
        assert.ok(seen.includes("[token]"), seen);
        return true;
      }, path);
    }
    await assert.rejects(api.events.get("json"), (error) => error.body.headers.authorization === "Bearer [token]");

    // a body that breaks off with an error quoting the token (a runtime that echoes the request)
    const breaking = async () =>
      new Response(new ReadableStream({ start: (c) => c.error(new Error(`reset; request had Bearer ${secret}`)) }), { status: 200 });
    const broken = new AgentSignal({ baseUrl: stub.url, token: secret, fetch: breaking, maxRetries: 0 });
    await assert.rejects(broken.events.cancel("evt_1"), (error) => {
      assert.equal(error.code, "network_error");
      assert.ok(!error.message.includes("S3CR3T") && error.cause === undefined, error.message);
      return true;
    });
  });

  test("NaN and Infinity are refused before sending (JSON has no form for them), naming their path", async () => {
    const stub = await scripted([[202, ACCEPTED]]);
    const api = new AgentSignal({ baseUrl: stub.url });
    const refused = (field) => (error) => {
      assert.ok(error instanceof AgentSignalError);
      assert.deepEqual([error.status, error.code, error.field], [0, "invalid_json", field]);
      assert.match(error.message, /NaN|Infinity/);
      return true;
    };
    await assert.rejects(api.events.send({ ...EVENT, payload: { score: NaN } }), refused("payload.score"));
    await assert.rejects(api.events.send([EVENT, { ...EVENT, sourceId: "s-2", payload: { x: -Infinity } }]), refused("events[1].payload.x"));
    await assert.rejects(api.events.send({ ...EVENT, payload: { tags: [1, { at: Infinity }] } }), refused("payload.tags[1].at"));
    await assert.rejects(api.dlq.redrive([{ eventId: "evt_1", payload: { n: new Number(NaN) } }]), refused("events[0].payload.n"));
    assert.equal(stub.requests.length, 0);
    await api.events.send({ ...EVENT, payload: { score: 1.5, at: new Date(0) } }); // finite numbers, toJSON: sent
    assert.deepEqual(JSON.parse(stub.requests[0].body).payload, { score: 1.5, at: "1970-01-01T00:00:00.000Z" });
  });

  test("an aborted call rejects with the abort, also while waiting to retry", async () => {
    const stub = await scripted([[503, errorBody("store_unavailable", "busy"), { "retry-after": "30" }]]);
    const controller = new AbortController();
    const call = new AgentSignal({ baseUrl: stub.url }).events.send(EVENT, { signal: controller.signal });
    while (stub.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    controller.abort();
    await assert.rejects(call, (error) => error.name === "AbortError");
    assert.equal(stub.requests.length, 1);
  });
});

describe("request shape", () => {
  test("path segments are URL-encoded and filters become the query", async () => {
    const stub = await startStub((request, response) => json(response, 200, request.url.includes("/v1/events?") ? { events: [] } : {}));
    after(stub.close);
    const api = new AgentSignal({ baseUrl: `${stub.url}/` });
    await api.events.get("a/b:c#d e");
    await api.events.cancel("evt/1");
    await api.scopes.pause("user:u1/topic:t#1");
    await api.scopes.resume("user:u1/topic:t#1");
    await api.events.list({ userId: "u 1", status: "dead", limit: 5, cursor: undefined });
    await api.scopes.list("paused");
    await api.scopes.list(undefined, { limit: 2, cursor: "topic:b" });
    await api.dlq.redrive(["evt_1"]);
    await api.dlq.redrive([{ eventId: "evt_2", payload: { message: "fixed" } }]);
    await api.dlq.redrive({ all: true });
    await api.dlq.discard(["evt_3"], "not needed");
    await api.tokens.create({ userId: "u1" });
    assert.deepEqual(
      stub.requests.map((r) => `${r.method} ${r.url}${r.body ? ` ${r.body}` : ""}`),
      [
        "GET /v1/events/a%2Fb%3Ac%23d%20e",
        "POST /v1/events/evt%2F1/cancel",
        "POST /v1/scopes/user%3Au1%2Ftopic%3At%231/pause",
        "POST /v1/scopes/user%3Au1%2Ftopic%3At%231/resume",
        "GET /v1/events?userId=u+1&status=dead&limit=5",
        "GET /v1/scopes?state=paused",
        "GET /v1/scopes?limit=2&cursor=topic%3Ab",
        'POST /v1/dlq/redrive {"eventIds":["evt_1"]}',
        'POST /v1/dlq/redrive {"events":[{"eventId":"evt_2","payload":{"message":"fixed"}}]}',
        'POST /v1/dlq/redrive {"all":true}',
        'POST /v1/dlq/discard {"eventIds":["evt_3"],"reason":"not needed"}',
        'POST /v1/tokens {"userId":"u1"}',
      ],
    );
    assert.equal(stub.requests[0].headers.authorization, undefined);
  });

  test("an id of '.' or '..' is refused before anything is sent (URL parsing would drop the segment)", async () => {
    const stub = await startStub((_, response) => json(response, 200, {}));
    after(stub.close);
    const api = new AgentSignal({ baseUrl: stub.url });
    await assert.rejects(api.events.cancel(".."), TypeError);
    await assert.rejects(api.scopes.pause("."), TypeError);
    await assert.rejects(api.events.get(""), TypeError);
    assert.equal(stub.requests.length, 0);
  });

  test("a bad baseUrl or maxRetries fails at construction, naming the option", () => {
    assert.throws(() => new AgentSignal({ baseUrl: "localhost:8000/x y" }), /baseUrl/);
    assert.throws(() => new AgentSignal({ baseUrl: "http://127.0.0.1:1", maxRetries: -1 }), /maxRetries/);
  });
});

/** A stub that reads each request and then drops the connection without an answer (the answer lost). */
async function answerLost() {
  const stub = await startStub((_, response, raw) => raw.socket.destroy());
  after(stub.close);
  return stub;
}

describe("a lost answer, and an answer that cannot be used", () => {
  test("a send whose answer was lost is sent again (the server dedupes it)", async () => {
    const stub = await answerLost();
    const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 1 });
    await assert.rejects(api.events.send(EVENT), (error) => error.code === "network_error" && error.requestSent === true);
    assert.equal(stub.requests.length, 2);
  });

  test("redrive, discard, cancel, pause and token minting are not sent again once they may have reached the server", async () => {
    const stub = await answerLost();
    const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 3 });
    const calls = [
      () => api.dlq.redrive(["evt_1"]),
      () => api.dlq.discard(["evt_1"], "gone"),
      () => api.events.cancel("evt_1"),
      () => api.scopes.pause("topic:t"),
      () => api.tokens.create({ userId: "u1" }),
    ];
    for (const call of calls) {
      await assert.rejects(call(), (error) => {
        assert.ok(error instanceof AgentSignalError);
        assert.deepEqual([error.status, error.code, error.requestSent], [0, "network_error", true]);
        assert.match(error.message, /not retried: the server may have acted on it/);
        return true;
      });
    }
    assert.equal(stub.requests.length, calls.length);
  });

  test("a refused connection is retried for every call: nothing reached the server", async () => {
    const stub = await scripted([[200, {}]]);
    await stub.close();
    let attempts = 0;
    const counting = (input, init) => {
      attempts += 1;
      return fetch(input, init);
    };
    const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 1, fetch: counting });
    await assert.rejects(api.dlq.redrive(["evt_1"]), (error) => error.code === "network_error" && error.requestSent === false);
    assert.equal(attempts, 2);
  });

  test("a port the Fetch standard blocks is refused before sending: retried, and requestSent false", async () => {
    let attempts = 0;
    const counting = (input, init) => {
      attempts += 1;
      return fetch(input, init);
    };
    const api = new AgentSignal({ baseUrl: "http://127.0.0.1:1", maxRetries: 1, fetch: counting });
    await assert.rejects(api.dlq.redrive(["evt_1"]), (error) => error.code === "network_error" && error.requestSent === false);
    assert.equal(attempts, 2); // a POST is retried only when nothing reached the server
  });

  test("a success whose body is not JSON is an invalid_response with its status, not a SyntaxError", async () => {
    const stub = await startStub((_, response) => {
      response.writeHead(200, { "content-type": "text/html" });
      response.end("<html>a proxy's page</html>");
    });
    after(stub.close);
    await assert.rejects(new AgentSignal({ baseUrl: stub.url }).events.get("evt_1"), (error) => {
      assert.ok(error instanceof AgentSignalError);
      assert.deepEqual([error.status, error.code], [200, "invalid_response"]);
      assert.match(error.message, /a proxy's page/);
      return true;
    });
  });

  test("a body that breaks off: a read is fetched again, a cancel is a network_error with the answer's status", async () => {
    let n = 0;
    const stub = await startStub((_, response) => {
      n += 1;
      if (n === 1 || n === 3) {
        response.writeHead(200, { "content-type": "application/json", "content-length": "100" });
        response.write('{"eventId": "ev');
        setTimeout(() => response.socket.destroy(), 20);
        return;
      }
      json(response, 200, { eventId: "evt_1" });
    });
    after(stub.close);
    const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 2 });
    assert.deepEqual(await api.events.get("evt_1"), { eventId: "evt_1" });
    assert.equal(n, 2);
    await assert.rejects(api.events.cancel("evt_1"), (error) => {
      assert.deepEqual([error.status, error.code, error.requestSent], [200, "network_error", true]);
      return true;
    });
    assert.equal(n, 3);
  });

  test("broken bodies and busy answers share one maxRetries: at most maxRetries + 1 requests in all", async () => {
    let n = 0;
    const stub = await startStub((_, response) => {
      n += 1;
      if (n % 2 === 1) {
        json(response, 503, errorBody("store_unavailable", "busy"), { "retry-after": "0" });
        return;
      }
      response.writeHead(200, { "content-type": "application/json", "content-length": "100" });
      response.write('{"eventId": "ev');
      setTimeout(() => response.socket.destroy(), 20);
    });
    after(stub.close);
    const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 3 });
    await assert.rejects(api.events.get("evt_1"), (error) => {
      assert.deepEqual([error.status, error.code], [200, "network_error"]);
      return true;
    });
    // 503, broken, 503, broken: four requests for maxRetries 3 (each broken body used to restart the count)
    assert.equal(n, 4);
  });
});

describe("dead-letter targets", () => {
  test("anything but an array or exactly {all: true} is refused before a request: never read as every dead event", async () => {
    const stub = await startStub((_, response) => json(response, 200, { redriven: [], notDead: [], discarded: [] }));
    after(stub.close);
    const api = new AgentSignal({ baseUrl: stub.url });
    for (const bad of ["evt_1", new Set(["evt_2"]), { eventIds: ["evt_3"] }, { all: "yes" }, { all: true, eventIds: [] }, undefined, null]) {
      await assert.rejects(api.dlq.discard(bad, "why"), (error) => error instanceof TypeError && /dlq\.discard/.test(error.message));
      await assert.rejects(api.dlq.redrive(bad), (error) => error instanceof TypeError && /dlq\.redrive/.test(error.message));
    }
    assert.equal(stub.requests.length, 0);
    await api.dlq.discard({ all: true });
    assert.deepEqual(JSON.parse(stub.requests[0].body), { all: true });
  });
});
