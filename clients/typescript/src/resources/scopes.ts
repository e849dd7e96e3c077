/** `client.scopes`: list scopes with queued work or paused, and pause or resume one. */
import { segment, type Http, type RequestOptions } from "../http.js";
import type { ScopeControl, ScopeList, ScopeState } from "../types.js";

export class Scopes {
  readonly #http: Http;

  constructor(http: Http) {
    this.#http = http;
  }

  /** The tenant's scopes with queued events and its paused ones, optionally only those in `state`. */
  async list(state?: ScopeState, options?: RequestOptions): Promise<ScopeList> {
    return this.#http.json<ScopeList>("GET", "/v1/scopes", { query: { state }, signal: options?.signal });
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
