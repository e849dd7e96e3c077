// Sessions, memories and receipt rollback against a local stub server: paths, encoding, bodies, errors, the
// record-error header, and which calls are sent again (no stack needed).
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { AgentSignal, AgentSignalError } from "@agent-signal/client";
import { errorBody, json, scripted, startStub } from "./stub.mjs";

/** A stub answering `{}` to everything, or what `answers` maps "METHOD path" (no query) to. */
async function echoing(answers = {}) {
  const stub = await startStub((request, response) => {
    const key = `${request.method} ${request.url.split("?")[0]}`;
    const [status, body, headers] = answers[key] ?? [200, {}];
    json(response, status, body, headers);
  });
  after(stub.close);
  return stub;
}

/** A stub that reads each request and then drops the connection without an answer (the answer lost). */
async function answerLost() {
  const stub = await startStub((_, response, raw) => raw.socket.destroy());
  after(stub.close);
  return stub;
}

const shown = (stub) => stub.requests.map((r) => `${r.method} ${r.url}${r.body ? ` ${r.body}` : ""}`);

/** Every session call, with what it sends; `replayable`: a repeat answers what the first call would have. */
function sessionCalls(api, id = "s1") {
  return [
    { name: "configure", call: () => api.sessions.configure(id, { dmailEnabled: true }), replayable: true },
    { name: "putArtifact", call: () => api.sessions.putArtifact(id, "plan", "ship it"), replayable: true },
    { name: "clear", call: () => api.sessions.clear(id), replayable: true },
    { name: "compact", call: () => api.sessions.compact(id, [{ role: "user", content: "summary" }]), replayable: true },
    { name: "activate", call: () => api.sessions.activate(id, "approval"), replayable: true },
    { name: "deactivate", call: () => api.sessions.deactivate(id, "approval"), replayable: true },
    { name: "append", call: () => api.sessions.append(id, [{ role: "user", content: "hi" }]), replayable: false },
    { name: "checkpoint", call: () => api.sessions.checkpoint(id), replayable: false },
    { name: "revert", call: () => api.sessions.revert(id, 0), replayable: false },
    { name: "sendDMail", call: () => api.sessions.sendDMail(id, { message: "m", checkpoint_id: 0 }), replayable: false },
    { name: "endStep", call: () => api.sessions.endStep(id), replayable: false },
    { name: "signal", call: () => api.sessions.signal(id, "answer"), replayable: false },
    { name: "turn", call: () => api.sessions.turn(id, { userMessaged: true }), replayable: false },
    { name: "idle", call: () => api.sessions.idle(id), replayable: false },
    { name: "toolAfter", call: () => api.sessions.toolAfter(id, { name: "signal" }), replayable: false },
  ];
}

describe("sessions: request shape", () => {
  test("each call's method, path and body, the session id encoded", async () => {
    const stub = await echoing();
    const api = new AgentSignal({ baseUrl: stub.url, token: "key-1" });
    const id = "sess:1.a_b-c";
    const messages = [
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function" }] },
      { role: "tool", content: [{ type: "text", text: "ok" }], tool_call_id: "call_1", name: "kept" },
    ];
    await api.sessions.configure(id, { dmailEnabled: true, functions: ["approval"], userId: "u1" });
    await api.sessions.settings(id);
    await api.sessions.append(id, messages, { tokenCount: 42 });
    await api.sessions.append(id, [{ role: "user", content: "hi" }]);
    await api.sessions.context(id);
    await api.sessions.checkpoint(id);
    await api.sessions.revert(id, 1);
    await api.sessions.clear(id);
    await api.sessions.compact(id, [{ role: "user", content: "summary" }]);
    await api.sessions.sendDMail(id, { message: "use the staging db", checkpoint_id: 0 });
    await api.sessions.endStep(id);
    await api.sessions.endStep(id, { rejectedWithoutFeedback: true });
    await api.sessions.signal(id, "need_approval", { plan: "ship" });
    await api.sessions.signal(id, "answer");
    await api.sessions.activate(id, "escalation");
    await api.sessions.deactivate(id, "escalation");
    await api.sessions.turn(id, { userMessaged: true });
    await api.sessions.idle(id, { nowMs: 1_700_000_000_000, modelAskedQuestion: true });
    await api.sessions.toolAfter(id, { name: "signal", args: { type: "answer" }, output: "ok" });
    await api.sessions.state(id);
    await api.sessions.attention(id);
    await api.sessions.artifacts(id);
    await api.sessions.putArtifact(id, "plan v2#1@x", "ship it");
    const at = "/v1/sessions/sess%3A1.a_b-c";
    assert.deepEqual(shown(stub), [
      `PUT ${at} {"dmailEnabled":true,"functions":["approval"],"userId":"u1"}`,
      `GET ${at}`,
      `POST ${at}/context/messages {"messages":${JSON.stringify(messages)},"tokenCount":42}`,
      `POST ${at}/context/messages {"messages":[{"role":"user","content":"hi"}]}`,
      `GET ${at}/context`,
      `POST ${at}/context/checkpoint {}`,
      `POST ${at}/context/revert {"checkpointId":1}`,
      `POST ${at}/context/clear`,
      `POST ${at}/context/compact {"messages":[{"role":"user","content":"summary"}]}`,
      `POST ${at}/dmail {"message":"use the staging db","checkpoint_id":0}`,
      `POST ${at}/steps/end {}`,
      `POST ${at}/steps/end {"rejectedWithoutFeedback":true}`,
      `POST ${at}/signal {"type":"need_approval","payload":{"plan":"ship"}}`,
      `POST ${at}/signal {"type":"answer"}`,
      `POST ${at}/functions/activate {"name":"escalation"}`,
      `POST ${at}/functions/deactivate {"name":"escalation"}`,
      `POST ${at}/turn {"userMessaged":true}`,
      `POST ${at}/idle {"nowMs":1700000000000,"modelAskedQuestion":true}`,
      `POST ${at}/tool {"name":"signal","args":{"type":"answer"},"output":"ok"}`,
      `GET ${at}/state`,
      `GET ${at}/attention`,
      `GET ${at}/artifacts`,
      `PUT ${at}/artifacts/plan%20v2%231%40x {"content":"ship it"}`,
    ]);
    for (const request of stub.requests) {
      assert.equal(request.headers.authorization, "Bearer key-1");
      assert.equal(request.headers["content-type"], request.body ? "application/json" : undefined, request.url);
    }
  });

  test("a session id that breaks the server's rule is invalid_id, nothing sent (a '/' would reach another route)", async () => {
    const stub = await echoing();
    const api = new AgentSignal({ baseUrl: stub.url });
    for (const bad of ["", ".", "..", "a/b", "s1/../s2", "x y", "é", "a#b", "s".repeat(201), "s1\n"]) {
      await assert.rejects(api.sessions.context(bad), (error) => {
        assert.ok(error instanceof AgentSignalError, JSON.stringify(bad));
        assert.deepEqual([error.status, error.code, error.field], [0, "invalid_id", "sessionId"]);
        assert.match(error.message, /nothing was sent/);
        return true;
      });
    }
    await assert.rejects(api.sessions.state(42), TypeError);
    await api.sessions.context("s".repeat(200)); // the longest id, and the rule's other characters
    await api.sessions.context("A-z_0.9:x");
    await api.sessions.context("...");
    assert.deepEqual(
      stub.requests.map((r) => r.url),
      [`/v1/sessions/${"s".repeat(200)}/context`, "/v1/sessions/A-z_0.9%3Ax/context", "/v1/sessions/.../context"],
    );
  });

  test("an artifact name with '/', or '.' or '..', is invalid_field naming name, nothing sent", async () => {
    const stub = await echoing();
    const api = new AgentSignal({ baseUrl: stub.url });
    for (const bad of ["", ".", "..", "a/b"]) {
      await assert.rejects(api.sessions.putArtifact("s1", bad, "x"), (error) => {
        assert.deepEqual([error.status, error.code, error.field], [0, "invalid_field", "name"]);
        return true;
      });
    }
    assert.equal(stub.requests.length, 0);
  });

  test("NaN in a payload is refused before sending, naming its path", async () => {
    const stub = await echoing();
    const api = new AgentSignal({ baseUrl: stub.url });
    await assert.rejects(api.sessions.signal("s1", "progress", { score: NaN }), (error) => error.field === "payload.score");
    await assert.rejects(api.sessions.toolAfter("s1", { name: "t", args: [Infinity] }), (error) => error.field === "args[0]");
    assert.equal(stub.requests.length, 0);
  });
});

describe("memories and rollback: request shape", () => {
  test("list, get and rollback: paths encoded, userId in the query, rollback without a body", async () => {
    const stub = await echoing();
    const api = new AgentSignal({ baseUrl: stub.url });
    await api.memories.list({ userId: "u 1" });
    await api.memories.list();
    await api.memories.get("mem_ab:c", { userId: "u1" });
    await api.memories.get("mem_1");
    await api.receipts.rollback("msg_1:skill:a/b", { userId: "u1" });
    await api.receipts.rollback("r-1");
    assert.deepEqual(shown(stub), [
      "GET /v1/memories?userId=u+1",
      "GET /v1/memories",
      "GET /v1/memories/mem_ab%3Ac?userId=u1",
      "GET /v1/memories/mem_1",
      "POST /v1/receipts/msg_1%3Askill%3Aa%2Fb/rollback?userId=u1",
      "POST /v1/receipts/r-1/rollback",
    ]);
    await assert.rejects(api.memories.get(".."), TypeError);
    await assert.rejects(api.receipts.rollback(""), TypeError);
    assert.equal(stub.requests.length, 6);
  });
});

describe("sessions: answers and errors", () => {
  test("the answer is the server's JSON; recordError is added only when the server names a record's refusal", async () => {
    const stub = await echoing({
      "POST /v1/sessions/s1/signal": [200, { output: "Signal recorded." }, { "agent-signal-record-error": "quota_exceeded" }],
      "POST /v1/sessions/s2/signal": [200, { output: "Signal recorded." }],
      "POST /v1/sessions/s1/dmail": [200, { isError: false, output: "", message: "sent", brief: "El Psy Kongroo" }, { "agent-signal-record-error": "session_gone" }],
      "POST /v1/sessions/s1/steps/end": [200, { outcome: "none" }, { "agent-signal-record-error": "inbox_full" }],
      "POST /v1/sessions/s1/context/checkpoint": [200, { checkpointId: 3 }, { "agent-signal-record-error": "ignored" }],
    });
    const api = new AgentSignal({ baseUrl: stub.url });
    assert.deepEqual(await api.sessions.signal("s1", "answer"), { output: "Signal recorded.", recordError: "quota_exceeded" });
    const plain = await api.sessions.signal("s2", "answer");
    assert.deepEqual(plain, { output: "Signal recorded." });
    assert.ok(!("recordError" in plain));
    assert.equal((await api.sessions.sendDMail("s1", { message: "m", checkpoint_id: 0 })).recordError, "session_gone");
    assert.equal((await api.sessions.endStep("s1")).recordError, "inbox_full");
    assert.deepEqual(await api.sessions.checkpoint("s1"), { checkpointId: 3 }); // a call that records nothing
  });

  test("the server's errors surface with status, code and field: session_gone, unknown_checkpoint, function_locked, session_full", async () => {
    const stub = await echoing({
      "POST /v1/sessions/gone/context/messages": [404, errorBody("session_gone", "session 'gone' is gone (erased or expired) while this request ran; nothing was stored")],
      "POST /v1/sessions/s1/context/revert": [422, errorBody("unknown_checkpoint", "Checkpoint 9 does not exist", "checkpointId")],
      "POST /v1/sessions/s1/functions/deactivate": [409, errorBody("function_locked", "function 'approval' is locked", "name")],
      "PUT /v1/sessions/s1/artifacts/big": [413, errorBody("session_full", "content: too big", "content")],
      "POST /v1/sessions/s1/signal": [422, errorBody("invalid_field", "Unrecognized signal type: nope", "type")],
      "GET /v1/sessions/other/state": [404, errorBody("not_found", "no session 'other'")],
    });
    const api = new AgentSignal({ baseUrl: stub.url });
    const fails = async (promise, expected) =>
      assert.rejects(promise, (error) => {
        assert.ok(error instanceof AgentSignalError);
        assert.deepEqual([error.status, error.code, error.field], expected);
        return true;
      });
    await fails(api.sessions.append("gone", [{ role: "user", content: "hi" }]), [404, "session_gone", undefined]);
    await fails(api.sessions.revert("s1", 9), [422, "unknown_checkpoint", "checkpointId"]);
    await fails(api.sessions.deactivate("s1", "approval"), [409, "function_locked", "name"]);
    await fails(api.sessions.putArtifact("s1", "big", "x"), [413, "session_full", "content"]);
    await fails(api.sessions.signal("s1", /** @type {any} */ ("nope")), [422, "invalid_field", "type"]);
    await fails(api.sessions.state("other"), [404, "not_found", undefined]);
    assert.equal(stub.requests.length, 6); // none of them retried
  });

  test("a rollback of no receipt is 404 not_found, its body carrying LobeHub's status; 409 ambiguous_receipt_id names userId", async () => {
    const missing = { error: { code: "not_found", message: "no receipt 'r-x'", field: null }, status: "not_found" };
    const stub = await echoing({
      "POST /v1/receipts/r-x/rollback": [404, missing],
      "POST /v1/receipts/r-both/rollback": [409, errorBody("ambiguous_receipt_id", "exists for 2 users: give userId", "userId")],
      "GET /v1/memories": [422, errorBody("missing_field", "userId is required", "userId")],
    });
    const api = new AgentSignal({ baseUrl: stub.url });
    await assert.rejects(api.receipts.rollback("r-x"), (error) => {
      assert.deepEqual([error.status, error.code], [404, "not_found"]);
      assert.equal(error.body.status, "not_found");
      return true;
    });
    await assert.rejects(api.receipts.rollback("r-both"), (error) => error.status === 409 && error.field === "userId");
    await assert.rejects(api.memories.list(), (error) => error.code === "missing_field" && error.field === "userId");
  });
});

describe("sessions: retries", () => {
  test("503 store_unavailable and a gateway's 502: repeated for the calls a repeat cannot harm, thrown at once for the others", async () => {
    for (const failure of [
      [503, errorBody("store_unavailable", "the store failed"), { "retry-after": "0" }],
      [502, errorBody("http_502", "bad gateway"), { "retry-after": "0" }],
    ]) {
      for (const { name, replayable } of sessionCalls(null)) {
        const stub = await scripted([failure, [200, { ok: true }]]);
        const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 2 });
        const run = sessionCalls(api).find((c) => c.name === name).call;
        if (replayable) {
          assert.deepEqual(await run(), { ok: true }, name);
          assert.equal(stub.requests.length, 2, name);
        } else {
          await assert.rejects(run(), (error) => error.status === failure[0], name);
          assert.equal(stub.requests.length, 1, `${name} is not sent again after ${failure[0]}`);
        }
      }
    }
  });

  test("503 busy (a contended session: nothing applied) and 429 with Retry-After are retried for every call", async () => {
    for (const failure of [
      [503, errorBody("busy", "the session stayed too busy"), { "retry-after": "0" }],
      [429, errorBody("rate_limited", "slow down"), { "retry-after": "0" }],
    ]) {
      for (const { name } of sessionCalls(null)) {
        const stub = await scripted([failure, [200, { ok: true }]]);
        const run = sessionCalls(new AgentSignal({ baseUrl: stub.url })).find((c) => c.name === name).call;
        assert.deepEqual(await run(), { ok: true }, name);
        assert.equal(stub.requests.length, 2, `${name} after ${failure[1].error.code}`);
      }
    }
  });

  test("a lost answer: the reads, the replayable calls and rollback are sent again; the others throw requestSent", async () => {
    const stub = await answerLost();
    const api = new AgentSignal({ baseUrl: stub.url, maxRetries: 1 });
    const reads = [
      () => api.sessions.settings("s1"),
      () => api.sessions.context("s1"),
      () => api.sessions.state("s1"),
      () => api.sessions.attention("s1"),
      () => api.sessions.artifacts("s1"),
      () => api.memories.list({ userId: "u1" }),
      () => api.memories.get("mem_1", { userId: "u1" }),
      () => api.receipts.rollback("r-1", { userId: "u1" }),
    ];
    const calls = [...reads.map((call) => ({ call, replayable: true })), ...sessionCalls(api)];
    let expected = 0;
    for (const { call, replayable, name } of calls) {
      await assert.rejects(call(), (error) => {
        assert.deepEqual([error.status, error.code, error.requestSent], [0, "network_error", true], name);
        if (!replayable) assert.match(error.message, /not retried: the server may have acted on it/);
        return true;
      });
      expected += replayable ? 2 : 1;
      assert.equal(stub.requests.length, expected, name);
    }
  });

  test("a 429 quota_exceeded without Retry-After (nothing stored, waiting will not help) is not retried", async () => {
    const stub = await scripted([[429, errorBody("quota_exceeded", "over the user's storage quota", "userId")]]);
    const api = new AgentSignal({ baseUrl: stub.url });
    await assert.rejects(api.sessions.append("s1", [{ role: "user", content: "x" }]), (error) => {
      assert.deepEqual([error.status, error.code, error.field, error.retryAfterS], [429, "quota_exceeded", "userId", undefined]);
      return true;
    });
    assert.equal(stub.requests.length, 1);
  });
});
