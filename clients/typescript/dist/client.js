/** `new AgentSignal({ baseUrl, token?, fetch?, maxRetries?, timeoutMs? })`: one object per server and credential. */
import { Http } from "./http.js";
import { Dlq } from "./resources/dlq.js";
import { Events } from "./resources/events.js";
import { Memories } from "./resources/memories.js";
import { Outbox } from "./resources/outbox.js";
import { Receipts } from "./resources/receipts.js";
import { Scopes } from "./resources/scopes.js";
import { Sessions } from "./resources/sessions.js";
import { Tokens } from "./resources/tokens.js";
export class AgentSignal {
    events;
    receipts;
    dlq;
    outbox;
    scopes;
    tokens;
    sessions;
    memories;
    /**
     * The user a user token (from `tokens.create`) acts for, read from the token itself (its `sub`); undefined for
     * an API key or no token. The server stamps that user on every event and keeps them in the user's own scopes.
     */
    tokenUserId;
    constructor(options) {
        const http = new Http(options);
        this.tokenUserId = userOfToken(options.token);
        this.events = new Events(http);
        this.receipts = new Receipts(http);
        this.dlq = new Dlq(http);
        this.outbox = new Outbox(http);
        this.scopes = new Scopes(http);
        this.tokens = new Tokens(http);
        this.sessions = new Sessions(http);
        this.memories = new Memories(http);
    }
}
/** The `sub` of a user token (a JWT whose claims name a `tenant`), undefined for anything else. Not verified: the
 * server verifies it; this only says which user the server will take it for. */
export function userOfToken(token) {
    const parts = typeof token === "string" ? token.split(".") : [];
    if (parts.length !== 3 || !parts[1])
        return undefined;
    try {
        const base64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
        const text = new TextDecoder().decode(Uint8Array.from(atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4)), (c) => c.charCodeAt(0)));
        const claims = JSON.parse(text);
        if (typeof claims !== "object" || claims === null)
            return undefined;
        const { sub, tenant } = claims;
        return typeof sub === "string" && sub !== "" && typeof tenant === "string" ? sub : undefined;
    }
    catch {
        return undefined;
    }
}
