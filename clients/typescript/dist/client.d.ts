/** `new AgentSignal({ baseUrl, token?, fetch?, maxRetries?, timeoutMs? })`: one object per server and credential. */
import { type FetchLike } from "./http.js";
import { Dlq } from "./resources/dlq.js";
import { Events } from "./resources/events.js";
import { Memories } from "./resources/memories.js";
import { Outbox } from "./resources/outbox.js";
import { Receipts } from "./resources/receipts.js";
import { Scopes } from "./resources/scopes.js";
import { Sessions } from "./resources/sessions.js";
import { Tokens } from "./resources/tokens.js";
export interface AgentSignalOptions {
    /** The server's root URL, for example `http://127.0.0.1:8000`. */
    baseUrl: string;
    /**
     * An API key or a user token, sent as `Authorization: Bearer …` (none for a server without credentials). Only
     * visible ASCII: one with a CR, an LF (a trailing newline too), a space or another control character is a
     * TypeError here, which does not quote it.
     */
    token?: string | undefined;
    /** The fetch to use (default: the global one); also how tests and proxies step in. */
    fetch?: FetchLike | undefined;
    /** Retries after a 429/503 or a network failure (default 3; 0 turns retrying off). */
    maxRetries?: number | undefined;
    /**
     * How long one attempt waits for its answer to begin, in ms (default 30,000; 0: no limit). One that waits
     * longer is abandoned as a network failure after sending, and retried where that is safe.
     */
    timeoutMs?: number | undefined;
}
export declare class AgentSignal {
    readonly events: Events;
    readonly receipts: Receipts;
    readonly dlq: Dlq;
    readonly outbox: Outbox;
    readonly scopes: Scopes;
    readonly tokens: Tokens;
    readonly sessions: Sessions;
    readonly memories: Memories;
    /**
     * The user a user token (from `tokens.create`) acts for, read from the token itself (its `sub`); undefined for
     * an API key or no token. The server stamps that user on every event and keeps them in the user's own scopes.
     */
    readonly tokenUserId: string | undefined;
    constructor(options: AgentSignalOptions);
}
/** The `sub` of a user token (a JWT whose claims name a `tenant`), undefined for anything else. Not verified: the
 * server verifies it; this only says which user the server will take it for. */
export declare function userOfToken(token: string | undefined): string | undefined;
