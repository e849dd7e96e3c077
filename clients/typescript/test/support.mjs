// What the live tests share: the stack from the environment, unique ids per run, and waiting on a condition.
import { AgentSignal } from "@agent-signal/client";

export const BASE_URL = process.env.AGENT_SIGNAL_URL ?? "";
export const TOKEN = process.env.AGENT_SIGNAL_TOKEN || undefined;

/** `AGENT_SIGNAL_REQUIRE_LIVE=1` (what `make test` sets): a live test that would be skipped fails instead. */
export const REQUIRE_LIVE = process.env.AGENT_SIGNAL_REQUIRE_LIVE === "1";
if (REQUIRE_LIVE && !BASE_URL) {
  throw new Error("AGENT_SIGNAL_REQUIRE_LIVE=1 but AGENT_SIGNAL_URL is not set: the live tests cannot run");
}

/** `{ skip }` for a live test: a loud reason when no stack is given. */
export const live = { skip: BASE_URL ? false : "no live stack: set AGENT_SIGNAL_URL (and AGENT_SIGNAL_TOKEN)" };
if (!BASE_URL) console.error(`SKIPPING live tests of ${process.argv[1]}: AGENT_SIGNAL_URL is not set`);

/** Skips the test `t` for `reason`, or fails it under `AGENT_SIGNAL_REQUIRE_LIVE=1`. */
export function skipLive(t, reason) {
  if (REQUIRE_LIVE) throw new Error(`AGENT_SIGNAL_REQUIRE_LIVE=1 but ${reason}`);
  t.skip(reason);
}

/** Unique per test process, so reruns against one stack never meet an earlier run's dedupe keys. */
export const RUN = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;

export function client(options = {}) {
  return new AgentSignal({ baseUrl: BASE_URL, token: TOKEN, ...options });
}

/** An `agent.user.message` with the payload its handlers read. */
export function userMessage(sourceId, { userId, agentId = "agt_ts", topicId = `tpc-${RUN}`, message = "hello", ...extra } = {}) {
  const event = {
    sourceType: "agent.user.message",
    sourceId,
    agentId,
    payload: { agentId, topicId, messageId: sourceId, message, ...extra },
  };
  if (userId) event.userId = userId;
  return event;
}

/** Polls `probe` every 50 ms until it answers something truthy; fails naming `what` after `timeoutMs`. */
export async function waitFor(probe, what, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The event's record once its status is one of `states`. */
export function waitStatus(api, eventId, states) {
  return waitFor(async () => {
    const record = await api.events.get(eventId);
    return states.includes(record.status) && record;
  }, `event ${eventId} to be ${states.join(" or ")}`);
}
