// Sessions, memories and receipt rollback against the live stack: a session end to end (settings, context,
// checkpoints, D-Mail, revert, signal, state, artifacts, the function runtime), what a user token reaches, a
// memory the pipeline wrote, and the undo of a skill update.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { AgentSignalError } from "@agent-signal/client";
import { client, live, RUN, skipLive, userMessage, waitFor } from "./support.mjs";

const NO_FUNCTIONS =
  "this stack loads no function definitions: start it with AGENT_SIGNAL_FUNCTIONS_DIR=examples/functions";

/** Asserts `promise` rejects with an AgentSignalError of `status`, `code` (and `field` when given). */
async function refused(promise, status, code, field) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof AgentSignalError, String(error));
    assert.deepEqual([error.status, error.code], [status, code], error.message);
    if (field !== undefined) assert.equal(error.field, field);
    return true;
  });
}

describe("a session end to end", live, () => {
  const api = client();
  const user = `sess-${RUN}`;
  const id = `ts-${RUN}:dmail`;

  test("configure, append, checkpoint, D-Mail, step end, revert, compact and clear", async () => {
    const settings = await api.sessions.configure(id, { dmailEnabled: true, userId: user, agentId: "agt_ts" });
    assert.deepEqual(settings, { dmailEnabled: true, root: true, functions: [], userId: user, agentId: "agt_ts" });
    assert.deepEqual(await api.sessions.settings(id), settings);

    assert.deepEqual(await api.sessions.checkpoint(id), { checkpointId: 0 }); // plus its CHECKPOINT 0 message
    const turn = [
      { role: "user", content: "Draft the release notes." },
      { role: "assistant", content: "Here is a first draft.", id: `m-${RUN}` },
    ];
    assert.deepEqual(await api.sessions.append(id, turn, { tokenCount: 42 }), { length: 3 });
    assert.deepEqual(await api.sessions.checkpoint(id), { checkpointId: 1 });
    const before = await api.sessions.context(id);
    assert.equal(before.nCheckpoints, 2);
    assert.equal(before.tokenCount, 42);
    assert.deepEqual(before.messages.slice(1, 3), turn);
    assert.match(JSON.stringify(before.messages[0]), /CHECKPOINT 0/);

    const sent = await api.sessions.sendDMail(id, { message: "The tests need the staging database.", checkpoint_id: 0 });
    assert.equal(sent.isError, false, sent.output);
    assert.equal(sent.recordError, undefined);
    const second = await api.sessions.sendDMail(id, { message: "again", checkpoint_id: 0 });
    assert.equal(second.isError, true); // one pending D-Mail at a time: kimi's ToolError, still a 200
    const bad = await api.sessions.sendDMail(id, { message: "far back", checkpoint_id: 7 });
    assert.equal(bad.isError, true);

    const ended = await api.sessions.endStep(id);
    assert.equal(ended.outcome, "applied");
    assert.equal(ended.checkpointId, 0);
    assert.match(JSON.stringify(ended.messages), /staging database/);
    assert.equal((await api.sessions.endStep(id)).outcome, "none"); // nothing pending any more
    const rewound = await api.sessions.context(id);
    assert.equal(rewound.nCheckpoints, 1);
    assert.deepEqual(rewound.messages, ended.messages);

    const reverted = await api.sessions.revert(id, 0);
    assert.deepEqual([reverted.messages, reverted.nCheckpoints], [[], 0]);
    await refused(api.sessions.revert(id, 0), 422, "unknown_checkpoint", "checkpointId");

    const compacted = await api.sessions.compact(id, [{ role: "user", content: "Summary: notes drafted." }]);
    assert.equal(compacted.nCheckpoints, 1);
    assert.deepEqual(compacted.messages.at(-1), { role: "user", content: "Summary: notes drafted." });
    assert.deepEqual(await api.sessions.compact(id, [{ role: "user", content: "Summary: notes drafted." }]), compacted);
    const cleared = await api.sessions.clear(id);
    assert.deepEqual([cleared.messages, cleared.nCheckpoints, cleared.tokenCount], [[], 0, 0]);
  });

  test("signal, state, attention, artifacts and the tool-after call; each signal is recorded on the session's scope", async () => {
    const answer = await api.sessions.signal(id, "progress", { step: "notes" });
    assert.equal(typeof answer.output, "string");
    assert.equal(answer.recordError, undefined);
    await refused(api.sessions.signal(id, /** @type {any} */ ("exploded")), 422, "invalid_field", "type");

    const state = await api.sessions.state(id);
    assert.deepEqual(state.active, []);
    assert.equal(state.terminating, null);
    assert.deepEqual((await api.sessions.attention(id)).items, []);

    assert.deepEqual(await api.sessions.putArtifact(id, "release_notes", "v1: faster"), { name: "release_notes", content: "v1: faster" });
    assert.deepEqual(await api.sessions.artifacts(id), { release_notes: "v1: faster" });
    assert.ok(Array.isArray((await api.sessions.toolAfter(id, { name: "search", args: { q: "notes" }, output: "3 hits" })).injects));

    const recorded = await waitFor(async () => {
      const page = await api.events.list({ scopeKey: `session:${id}`, sourceType: "agent.signal.emitted" });
      return page.events.length > 0 && page.events;
    }, "the signal's agent.signal.emitted event");
    assert.equal(recorded[0].userId, user);
  });

  test("the function runtime: locked by the settings, gated by need_approval, reopened by a turn, idle", async (t) => {
    const fid = `ts-${RUN}:fn`;
    try {
      await api.sessions.configure(fid, { userId: user, functions: ["approval"] });
    } catch (error) {
      if (error instanceof AgentSignalError && error.code === "unknown_function") return skipLive(t, NO_FUNCTIONS);
      throw error;
    }
    await api.sessions.signal(fid, "need_approval", { plan: "ship the release" });
    const gated = await api.sessions.state(fid);
    assert.deepEqual(gated.active, ["approval"]);
    assert.equal(gated.functions.approval.phase, "gated");
    const [item] = (await api.sessions.attention(fid)).items;
    assert.deepEqual([item.function, item.type, item.payload], ["approval", "need_approval", { plan: "ship the release" }]);

    const opened = await api.sessions.turn(fid, { userMessaged: true });
    assert.equal(opened.functions.approval.currentTurn, 1);
    assert.deepEqual((await api.sessions.attention(fid)).items, []);

    const both = await api.sessions.activate(fid, "escalation");
    assert.deepEqual([...both.active].sort(), ["approval", "escalation"]);
    assert.deepEqual((await api.sessions.deactivate(fid, "escalation")).active, ["approval"]);
    await refused(api.sessions.deactivate(fid, "approval"), 409, "function_locked", "name");
    await refused(api.sessions.activate(fid, "nobody"), 422, "unknown_function", "name");

    const decision = await api.sessions.idle(fid, { modelAskedQuestion: false });
    assert.equal(typeof decision.continued, "boolean");
    assert.ok(Array.isArray(decision.completed));
  });

  test("a user token claims a new session with configure, reaches only its own, and cannot name another user", async () => {
    const { token } = await api.tokens.create({ userId: user, ttlS: 600 });
    const asUser = client({ token });
    const { token: otherToken } = await api.tokens.create({ userId: `other-${RUN}`, ttlS: 600 });
    const asOther = client({ token: otherToken });
    const own = `ts-${RUN}:user`;

    await refused(asUser.sessions.checkpoint(own), 404, "not_found"); // not claimed yet: only a PUT claims
    const claimed = await asUser.sessions.configure(own, { dmailEnabled: true });
    assert.equal(claimed.userId, user);
    assert.deepEqual(await asUser.sessions.checkpoint(own), { checkpointId: 0 });
    assert.equal((await asUser.sessions.context(own)).nCheckpoints, 1);
    assert.equal((await api.sessions.settings(own)).userId, user); // a key reaches every session of its tenant
    assert.equal((await asUser.sessions.settings(id)).userId, user); // the key's session named this user

    await refused(asOther.sessions.context(own), 404, "not_found");
    await refused(asOther.sessions.configure(own, {}), 404, "not_found");
    await refused(asUser.sessions.configure(`ts-${RUN}:forged`, { userId: `other-${RUN}` }), 422, "forbidden_user", "userId");
  });
});

describe("memories and rollback", live, () => {
  const api = client();
  const user = `mem-${RUN}`;
  const topicId = `tpc-mem-${RUN}`;

  /** Receipts of this test's user and topic matching `keep`, once there are some. */
  const receipts = (keep, what) =>
    waitFor(
      async () => {
        const page = await api.receipts.list({ userId: user, agentId: "agt_ts", topicId, limit: 50 });
        const found = page.receipts.filter(keep);
        return found.length > 0 && found;
      },
      what,
      60_000,
    );

  test("a memory the pipeline wrote is listed and read by id, by the key and by the user's own token", async () => {
    await api.events.send(
      userMessage(`memory-${RUN}`, { userId: user, topicId, trigger: "execAgent", message: "Going forward, I prefer concise answers." }),
    );
    const [receipt] = await receipts((r) => r.kind === "memory", "the memory receipt");
    const { memories } = await api.memories.list({ userId: user });
    const memory = memories.find((m) => m.id === receipt.target.id);
    assert.ok(memory, `memory ${receipt.target.id} is listed`);
    assert.equal(typeof memory.title, "string");
    assert.deepEqual(await api.memories.get(memory.id, { userId: user }), memory);

    const asUser = client({ token: (await api.tokens.create({ userId: user, ttlS: 600 })).token });
    assert.ok((await asUser.memories.list()).memories.some((m) => m.id === memory.id));
    assert.deepEqual(await asUser.memories.get(memory.id), memory);
    await refused(asUser.memories.list({ userId: `other-${RUN}` }), 404, "not_found");
    await refused(api.memories.list(), 422, "missing_field", "userId");
    await refused(api.memories.get(`mem_none_${RUN}`, { userId: user }), 404, "not_found");
  });

  test("a skill update's receipt is rolled back (again: the same answer); a creation's is unsupported; none is 404", async () => {
    const skill = (sourceId, message) => userMessage(sourceId, { userId: user, topicId, message });
    await api.events.send(skill(`skill-1-${RUN}`, 'Please create a skill called "Release checklist": run the tests, tag, publish.'));
    const [created] = await receipts((r) => r.kind === "skill", "the skill's creation receipt");
    await api.events.send(skill(`skill-2-${RUN}`, 'Update the skill "Release checklist": also bump the changelog.'));
    const [updated] = await receipts((r) => r.kind === "skill" && r.metadata?.rollbackStatus === "available", "the update receipt");

    const undone = await api.receipts.rollback(updated.id, { userId: user });
    assert.equal(undone.status, "rolled_back");
    assert.equal(undone.receipt?.metadata?.rollbackStatus, "rolled_back");
    const asUser = client({ token: (await api.tokens.create({ userId: user, ttlS: 600 })).token });
    assert.equal((await asUser.receipts.rollback(updated.id)).status, "rolled_back"); // a retry changes nothing
    assert.equal((await api.receipts.rollback(created.id)).status, "unsupported"); // one user has it: no userId needed

    await assert.rejects(api.receipts.rollback(`none-${RUN}`, { userId: user }), (error) => {
      assert.deepEqual([error.status, error.code, error.body?.status], [404, "not_found", "not_found"]);
      return true;
    });
    await refused(asUser.receipts.rollback(updated.id, { userId: `other-${RUN}` }), 404, "not_found");
  });
});
