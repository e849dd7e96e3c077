/**
 * `enqueueAgentSignalSourceEvent(event, { client })`: LobeHub's call, so a LobeHub server hands its source events
 * to this service by swapping one import.
 *
 * LobeHub's function takes `{sourceType, sourceId, payload, scopeKey?, timestamp?}` and a context naming the
 * user and agent (`{userId, agentId, workspaceId?}`), and answers `{accepted, scopeKey, workflowRunId}`. Here the
 * context carries the `client` too; `workflowRunId` is the event id (empty when not accepted, as in LobeHub), and
 * `eventId` and the server's `status` are added. `accepted` is false when the server did not queue the event
 * (`gated`: self-iteration is off for that user, like LobeHub's own check); a duplicate is accepted, since its
 * first send is queued. `scopeKey` is the one the server used: the one given, else derived from the payload by
 * the server's rule; with a user token, a scope that is not the user's own is put under `user:<id>/`, as the
 * server does.
 */
import type { AgentSignal } from "./client.js";
import type { RequestOptions } from "./http.js";
import type { SourceEvent } from "./types.js";

export interface AgentSignalSourceEventInput {
  sourceType: string;
  sourceId: string;
  payload: Record<string, unknown>;
  scopeKey?: string | undefined;
  /**
   * Epoch milliseconds, an integer (default: now, `Date.now()`, as in LobeHub): seconds are taken as milliseconds
   * (a date in January 1970), and a fraction is refused (`422 invalid_field`).
   */
  timestamp?: number | undefined;
}

export interface AgentSignalEnqueueContext extends RequestOptions {
  client: AgentSignal;
  userId?: string | undefined;
  agentId?: string | undefined;
  workspaceId?: string | undefined;
}

export interface QueuedAgentSignalEmissionResult {
  accepted: boolean;
  scopeKey: string;
  workflowRunId: string;
  eventId: string;
  /** `accepted`, `duplicate`, or an admission check's verdict such as `gated`. */
  status: string;
}

export async function enqueueAgentSignalSourceEvent(
  input: AgentSignalSourceEventInput,
  context: AgentSignalEnqueueContext,
): Promise<QueuedAgentSignalEmissionResult> {
  const event: SourceEvent = {
    sourceType: input.sourceType,
    sourceId: input.sourceId,
    payload: input.payload,
    timestamp: input.timestamp ?? Date.now(),
  };
  if (input.scopeKey) event.scopeKey = input.scopeKey;
  if (context.userId) event.userId = context.userId;
  if (context.agentId) event.agentId = context.agentId;
  if (context.workspaceId) event.workspaceId = context.workspaceId;
  const { results } = await context.client.events.send(event, { signal: context.signal });
  const result = results[0];
  if (!result) throw new TypeError("AgentSignal: the server answered no result for the event");
  const accepted = result.status === "accepted" || result.status === "duplicate";
  return {
    accepted,
    scopeKey: scopeUsed(input, context),
    workflowRunId: accepted ? result.eventId : "",
    eventId: result.eventId,
    status: result.status,
  };
}

/** The scope the server runs the event in (producers/http/routes/events.py `_own_scope` for a user token). */
function scopeUsed(input: AgentSignalSourceEventInput, context: AgentSignalEnqueueContext): string {
  const user = context.client.tokenUserId;
  if (user === undefined) {
    return input.scopeKey || resolveSourceScopeKey(input.payload, context.userId, context.agentId);
  }
  const payload = { ...input.payload, userId: user }; // the server stamps the token's user on the payload
  const scope = input.scopeKey || resolveSourceScopeKey(payload, user, context.agentId);
  // worker/core/scope.py `own_scope_key`: `user:<id>`, `agent:<a>:user:<id>` and `user:<id>/…` are the user's own
  const own =
    scope === `user:${user}` ||
    scope.startsWith(`user:${user}/`) ||
    (scope.startsWith("agent:") && scope.endsWith(`:user:${user}`));
  return own ? scope : `user:${user}/${scope}`;
}

/**
 * The scope of an event sent without one, by the server's rule (worker/core/scope.py `derive_scope_key`): its topic,
 * else its task, else its bot thread, else its agent and user, else its user, else `fallback:global`.
 */
export function resolveSourceScopeKey(payload: Record<string, unknown>, userId?: string, agentId?: string): string {
  const text = (key: string): string | undefined => {
    const value = payload[key];
    if (typeof value === "string") return value !== "" ? value : undefined;
    // a whole number is read as its digits, as the server reads what JSON.stringify sends for it
    return Number.isInteger(value) && Math.abs(value as number) < 1e21 ? String(value) : undefined;
  };
  const topic = text("topicId");
  if (topic) return `topic:${topic}`;
  const task = text("taskId");
  if (task) return `task:${task}`;
  const [platform, application, thread] = [text("platform"), text("applicationId"), text("platformThreadId")];
  if (platform && application && thread) return `bot:${platform}:${application}:${thread}`;
  const agent = text("agentId") ?? (agentId || undefined);
  const user = text("userId") ?? (userId || undefined);
  if (agent && user) return `agent:${agent}:user:${user}`;
  if (user) return `user:${user}`;
  return "fallback:global";
}
