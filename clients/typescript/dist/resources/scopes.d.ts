/** `client.scopes`: list scopes with queued work or paused, and pause or resume one. */
import { type Http, type RequestOptions } from "../http.js";
import type { ScopeControl, ScopeList, ScopeState } from "../types.js";
/** A page of scopes: how many (1-1000, default 200) and after which (the previous page's `cursor`). */
export interface ScopeListOptions extends RequestOptions {
    limit?: number | undefined;
    cursor?: string | undefined;
}
export declare class Scopes {
    #private;
    constructor(http: Http);
    /**
     * The tenant's scopes with queued events and its paused ones, optionally only those in `state`, by scope key:
     * `limit` a page (default 200), `total` of them in all; `cursor` is set when more follow (pass it back).
     */
    list(state?: ScopeState, options?: ScopeListOptions): Promise<ScopeList>;
    /** Its events wait in its inbox until resumed (the one in flight finishes); `changed` is false if it was. */
    pause(scopeKey: string, options?: RequestOptions): Promise<ScopeControl>;
    /** Its queued events run again, in order. */
    resume(scopeKey: string, options?: RequestOptions): Promise<ScopeControl>;
}
