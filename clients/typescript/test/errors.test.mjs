// Errors from the live stack: AgentSignalError with status, code, message and the field the server named.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { AgentSignalError } from "@agent-signal/client";
import { client, live, RUN, userMessage } from "./support.mjs";

/** The AgentSignalError `promise` rejects with. */
async function failure(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof AgentSignalError, `expected an AgentSignalError, got ${error}`);
    assert.equal(error.name, "AgentSignalError");
    assert.ok(error.message.length > 0);
    return error;
  }
  assert.fail("expected the call to fail");
}

describe("errors", live, () => {
  const api = client();

  test("a missing field is a 422 naming it", async () => {
    const { sourceId: _, ...event } = userMessage(`x-${RUN}`);
    const error = await failure(api.events.send(event));
    assert.equal(error.status, 422);
    assert.equal(error.field, "sourceId");
    assert.equal(typeof error.code, "string");
    assert.deepEqual(error.body.error.field, "sourceId");
  });

  test("in a batch, the field names the event's index", async () => {
    const bad = { ...userMessage(`bad-${RUN}`), sourceId: "has space" };
    const error = await failure(api.events.send([userMessage(`good-${RUN}`), bad]));
    assert.equal(error.status, 422);
    assert.equal(error.field, "events[1].sourceId");
  });

  test("an unknown event is a 404 naming eventId", async () => {
    const error = await failure(api.events.get(`never-sent-${RUN}`));
    assert.equal(error.status, 404);
    assert.equal(error.code, "not_found");
    assert.equal(error.field, "eventId");
    assert.equal(error.retryAfterS, undefined);
  });

  test("a credential the server does not know is a 401 (not retried)", async () => {
    const error = await failure(client({ token: "not-a-real-key-0123456789" }).scopes.list());
    assert.equal(error.status, 401);
    assert.equal(error.code, "unauthorized");
    assert.equal(error.field, undefined);
  });

  test("an invalid query value is a 422 naming the parameter", async () => {
    const error = await failure(api.dlq.list({ limit: 0 }));
    assert.equal(error.status, 422);
    assert.equal(error.field, "limit");
  });
});
