/** `client.scopes`: list scopes with queued work or paused, and pause or resume one. */
import { segment, type Http, type RequestOptions } from "../http.js";
import type { ScopeControl, ScopeList, ScopeState } from "../types.js";

/** A page of scopes: how many (1-1000, default 200) and after which (the previous page's `cursor`). */
export interface ScopeListOptions extends RequestOptions {
  limit?: number | undefined;
  cursor?: string | undefined;
}

export class Scopes {
  readonly #http: Http;

  constructor(http: Http) {
    this.#http = http;
  }

  /**
   * The tenant's scopes with queued events and its paused ones, optionally only those in `state`, by scope key:
   * `limit` a page (default 200), `total` of them in all; `cursor` is set when more follow (pass it back).
   */
  async list(state?: ScopeState, options?: ScopeListOptions): Promise<ScopeList> {
    const query = { state, limit: options?.limit, cursor: options?.cursor };
    return this.#http.json<ScopeList>("GET", "/v1/scopes", { query, signal: options?.signal });
  }

  /** Its events wait in its inbox until resumed (the one in flight finishes); `changed` is false if it was. */
  async pause(scopeKey: string, options?: RequestOptions): Promise<ScopeControl> {
    return this.#http.json<ScopeControl>("POST", `/v1/scopes/${segment(scopeKey)}/pause`, { signal: options?.signal });
  }

  /** Its queued events run again, in order. */
  async resume(scopeKey: string, options?: RequestOptions): Promise<ScopeControl> {
    return this.#http.json<ScopeControl>("POST", `/v1/scopes/${segment(scopeKey)}/resume`, { signal: options?.signal });
  }
}
