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
export declare function enqueueAgentSignalSourceEvent(input: AgentSignalSourceEventInput, context: AgentSignalEnqueueContext): Promise<QueuedAgentSignalEmissionResult>;
/**
 * The scope of an event sent without one, by the server's rule (worker/core/scope.py `derive_scope_key`): its topic,
 * else its task, else its bot thread, else its agent and user, else its user, else `fallback:global`.
 */
export declare function resolveSourceScopeKey(payload: Record<string, unknown>, userId?: string, agentId?: string): string;
