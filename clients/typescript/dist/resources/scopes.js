/** `client.scopes`: list scopes with queued work or paused, and pause or resume one. */
import { segment } from "../http.js";
export class Scopes {
    #http;
    constructor(http) {
        this.#http = http;
    }
    /**
     * The tenant's scopes with queued events and its paused ones, optionally only those in `state`, by scope key:
     * `limit` a page (default 200), `total` of them in all; `cursor` is set when more follow (pass it back).
     */
    async list(state, options) {
        const query = { state, limit: options?.limit, cursor: options?.cursor };
        return this.#http.json("GET", "/v1/scopes", { query, signal: options?.signal });
    }
    /** Its events wait in its inbox until resumed (the one in flight finishes); `changed` is false if it was. */
    async pause(scopeKey, options) {
        return this.#http.json("POST", `/v1/scopes/${segment(scopeKey)}/pause`, { signal: options?.signal });
    }
    /** Its queued events run again, in order. */
    async resume(scopeKey, options) {
        return this.#http.json("POST", `/v1/scopes/${segment(scopeKey)}/resume`, { signal: options?.signal });
    }
}
