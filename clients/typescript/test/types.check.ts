// A consumer's typed use of the package; `npm run check` type-checks it (it is never run). Each
// `@ts-expect-error` line must be an error, so a type that grows too loose fails the check.
import {
  AgentSignal,
  AgentSignalError,
  enqueueAgentSignalSourceEvent,
  type ContextMessage,
  type ContextView,
  type EventStatus,
  type FunctionsState,
  type IngestResults,
  type Memory,
  type QueuedAgentSignalEmissionResult,
  type Receipt,
  type RollbackStatus,
  type ScopeState,
  type SessionSettings,
  type SignalType,
  type SourceEvent,
} from "@agent-signal/client";

export async function consumer(): Promise<void> {
  const client = new AgentSignal({ baseUrl: "http://127.0.0.1:8000", token: "key", fetch, maxRetries: 2 });
  const event: SourceEvent = { sourceType: "agent.user.message", sourceId: "m1", payload: { message: "hi" } };
  const one: IngestResults = await client.events.send(event);
  const many = await client.events.send([event, { ...event, sourceId: "m2", userId: "u1" }]);
  const ids: string[] = [...one.results, ...many.results].map((r) => r.eventId);
  // @ts-expect-error sourceId is required
  await client.events.send({ sourceType: "agent.user.message", payload: {} });

  const detail = await client.events.get(ids[0] ?? "m1");
  const status: "queued" | "processing" | "done" | "dead" | "cancelled" | "discarded" | "erased" = detail.status;
  const page = await client.events.list({ status: "dead", userId: "u1", limit: 10 });
  const cursor: string | null | undefined = page.cursor;
  // @ts-expect-error not a status
  await client.events.list({ status: "exploded" });
  for await (const row of client.events.iterate({ userId: "u1" })) {
    const typed: EventStatus = row;
    void typed;
  }
  for await (const each of client.events.iterate().pages()) void each.events.length;
  const cancelled = await client.events.cancel("evt_1");
  const requested: boolean = cancelled.cancelRequested;

  const receipts = await client.receipts.list({ userId: "u1", agentId: "a1", topicId: "t1", limit: 5 });
  const controller = new AbortController();
  const stream = client.receipts.stream({ userId: "u1", agentId: "a1", signal: controller.signal });
  const ownStream = client.receipts.stream({ topicId: "t1" }); // a user token's own user: no userId
  void ownStream.opened;
  const patient = client.receipts.stream({ userId: "u1", idleTimeoutMs: 0, reconnectForMs: 300_000 }); // a long outage
  void patient.opened;
  // @ts-expect-error a number of ms
  client.receipts.stream({ userId: "u1", reconnectForMs: "1m" });
  await stream.opened;
  for await (const receipt of stream) {
    const typed: Receipt = receipt;
    void typed.title;
  }

  const dead = await client.dlq.list();
  await client.dlq.redrive([dead.events[0]?.eventId ?? "evt_1"]);
  await client.dlq.redrive([{ eventId: "evt_1", payload: { message: "fixed" } }]);
  const discarded = await client.dlq.discard(["evt_1"], "not needed");
  const state: ScopeState = "paused";
  const scopes = await client.scopes.list(state);
  // @ts-expect-error not a scope state
  await client.scopes.list("sleeping");
  await client.scopes.pause("topic:t1");
  await client.scopes.resume("topic:t1");
  const minted = await client.tokens.create({ userId: "u1", ttlS: 600 });
  // @ts-expect-error userId is required
  await client.tokens.create({ ttlS: 600 });

  // sessions: settings, the context store, D-Mail, the signal tool and the function runtime
  const settings: SessionSettings = await client.sessions.configure("s1", { dmailEnabled: true, functions: ["approval"] });
  const locked: string[] = (await client.sessions.settings("s1")).functions;
  // @ts-expect-error dmailEnabled is a boolean
  await client.sessions.configure("s1", { dmailEnabled: "yes" });
  const messages: ContextMessage[] = [
    { role: "user", content: "Draft the release notes." },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1" }] },
    { role: "tool", content: [{ type: "text", text: "done" }], tool_call_id: "call_1" },
  ];
  const length: number = (await client.sessions.append("s1", messages, { tokenCount: 42 })).length;
  // @ts-expect-error not a role
  await client.sessions.append("s1", [{ role: "robot", content: "hi" }]);
  // @ts-expect-error a content part names its type
  await client.sessions.append("s1", [{ role: "user", content: [{ text: "hi" }] }]);
  const checkpointId: number = (await client.sessions.checkpoint("s1")).checkpointId;
  const view: ContextView = await client.sessions.revert("s1", checkpointId);
  // @ts-expect-error a checkpoint id is a number
  await client.sessions.revert("s1", "0");
  const counts: [number, number] = [view.nCheckpoints, (await client.sessions.context("s1")).tokenCount];
  await client.sessions.compact("s1", [{ role: "user", content: "Summary." }]);
  await client.sessions.clear("s1");
  const dmail = await client.sessions.sendDMail("s1", { message: "use staging", checkpoint_id: 0 });
  const dmailParts: [boolean, string, string | undefined] = [dmail.isError, dmail.brief, dmail.recordError];
  // @ts-expect-error the tool's argument is checkpoint_id (kimi's), not checkpointId
  await client.sessions.sendDMail("s1", { message: "use staging", checkpointId: 0 });
  const ended = await client.sessions.endStep("s1", { rejectedWithoutFeedback: false });
  const outcome: "applied" | "discarded" | "none" = ended.outcome;
  const type: SignalType = "need_approval";
  const signalled = await client.sessions.signal("s1", type, { plan: "ship" });
  const output: string = signalled.output;
  const recordError: string | undefined = signalled.recordError;
  // @ts-expect-error not a signal type
  await client.sessions.signal("s1", "explode");
  const functions: FunctionsState = await client.sessions.activate("s1", "escalation");
  await client.sessions.deactivate("s1", "escalation");
  const turn: number | undefined = (await client.sessions.turn("s1", { userMessaged: true })).functions["approval"]?.currentTurn;
  const decision = await client.sessions.idle("s1", { nowMs: 1_700_000_000_000, modelAskedQuestion: false });
  const continued: boolean = decision.continued;
  const injects: string[] = (await client.sessions.toolAfter("s1", { name: "signal", args: { type: "answer" } })).injects;
  // @ts-expect-error a tool call names its tool
  await client.sessions.toolAfter("s1", { args: {} });
  const attention: string[] = (await client.sessions.attention("s1")).items.map((item) => item.function);
  const artifacts: Record<string, string> = await client.sessions.artifacts("s1");
  const artifact: { name: string; content: string } = await client.sessions.putArtifact("s1", "plan", "ship");

  // memories and rollback
  const memories: Memory[] = (await client.memories.list({ userId: "u1" })).memories;
  const memory: Memory = await client.memories.get("mem_1", { userId: "u1" });
  const undone: RollbackStatus = (await client.receipts.rollback("r-1", { userId: "u1" })).status;
  // @ts-expect-error a memory id is a string
  await client.memories.get(1);

  const queued: QueuedAgentSignalEmissionResult = await enqueueAgentSignalSourceEvent(
    { sourceType: "agent.user.message", sourceId: "m3", payload: { topicId: "t1" }, scopeKey: undefined },
    { client, userId: "u1", agentId: "a1" },
  );
  const accepted: boolean = queued.accepted;

  try {
    await client.events.get("missing");
  } catch (error) {
    if (error instanceof AgentSignalError) {
      const parts: [number, string, string | undefined, number | undefined] = [
        error.status,
        error.code,
        error.field,
        error.retryAfterS,
      ];
      void parts;
    }
  }
  void [status, cursor, requested, receipts, discarded, scopes, minted, accepted];
  void [settings, locked, length, counts, dmailParts, outcome, output, recordError, functions, turn, continued, injects];
  void [attention, artifacts, artifact, memories, memory, undone];
}
