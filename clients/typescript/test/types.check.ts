// A consumer's typed use of the package; `npm run check` type-checks it (it is never run). Each
// `@ts-expect-error` line must be an error, so a type that grows too loose fails the check.
import {
  AgentSignal,
  AgentSignalError,
  enqueueAgentSignalSourceEvent,
  type EventStatus,
  type IngestResults,
  type QueuedAgentSignalEmissionResult,
  type Receipt,
  type ScopeState,
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
}
