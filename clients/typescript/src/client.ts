/** `new AgentSignal({ baseUrl, token?, fetch?, maxRetries?, timeoutMs? })`: one object per server and credential. */
import { Http, type FetchLike } from "./http.js";
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

export class AgentSignal {
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

  constructor(options: AgentSignalOptions) {
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
export function userOfToken(token: string | undefined): string | undefined {
  const parts = typeof token === "string" ? token.split(".") : [];
  if (parts.length !== 3 || !parts[1]) return undefined;
  try {
    const base64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const text = new TextDecoder().decode(Uint8Array.from(atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4)), (c) => c.charCodeAt(0)));
    const claims: unknown = JSON.parse(text);
    if (typeof claims !== "object" || claims === null) return undefined;
    const { sub, tenant } = claims as { sub?: unknown; tenant?: unknown };
    return typeof sub === "string" && sub !== "" && typeof tenant === "string" ? sub : undefined;
  } catch {
    return undefined;
  }
}
