/**
 * `@agent-signal/client`: the TypeScript client of Agent Signal (ESM with types; Node >= 18, browsers and edge
 * runtimes; no dependency beyond `fetch`). See README.md.
 */
export { AgentSignal } from "./client.js";
export { AgentSignalError } from "./errors.js";
export { MAX_TIMER_MS, TIMEOUT_MS } from "./http.js";
export { enqueueAgentSignalSourceEvent, resolveSourceScopeKey, } from "./lobehub.js";
export { CATCH_UP_LAG_MS, IDLE_TIMEOUT_MS, RECONNECT_FOR_MS } from "./resources/receipt_stream.js";
