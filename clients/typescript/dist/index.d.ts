/**
 * `@agent-signal/client`: the TypeScript client of Agent Signal (ESM with types; Node >= 18, browsers and edge
 * runtimes; no dependency beyond `fetch`). See README.md.
 */
export { AgentSignal, type AgentSignalOptions } from "./client.js";
export { AgentSignalError } from "./errors.js";
export { MAX_TIMER_MS, TIMEOUT_MS, type FetchLike, type RequestOptions } from "./http.js";
export { enqueueAgentSignalSourceEvent, resolveSourceScopeKey, type AgentSignalEnqueueContext, type AgentSignalSourceEventInput, type QueuedAgentSignalEmissionResult, } from "./lobehub.js";
export type { AllDead, Dlq, EveryDeadOptions } from "./resources/dlq.js";
export type { EventIterator, Events } from "./resources/events.js";
export type { Memories } from "./resources/memories.js";
export type { AllDeadRecords, Outbox } from "./resources/outbox.js";
export { CATCH_UP_LAG_MS, IDLE_TIMEOUT_MS, RECONNECT_FOR_MS, type ReceiptStream, type ReceiptStreamOptions } from "./resources/receipt_stream.js";
export type { Receipts } from "./resources/receipts.js";
export type { ScopeListOptions, Scopes } from "./resources/scopes.js";
export type { AppendOptions, Sessions } from "./resources/sessions.js";
export type { TokenCreate, Tokens } from "./resources/tokens.js";
export type * from "./types.js";
export type { components, operations, paths } from "./generated/openapi.js";
