/** `client.scopes`: list scopes with queued work or paused, and pause or resume one. */
import { type Http, type RequestOptions } from "../http.js";
import type { ScopeControl, ScopeList, ScopeState } from "../types.js";
export declare class Scopes {
    #private;
    constructor(http: Http);
    /** The tenant's scopes with queued events and its paused ones, optionally only those in `state`. */
    list(state?: ScopeState, options?: RequestOptions): Promise<ScopeList>;
    /** Its events wait in its inbox until resumed (the one in flight finishes); `changed` is false if it was. */
    pause(scopeKey: string, options?: RequestOptions): Promise<ScopeControl>;
    /** Its queued events run again, in order. */
    resume(scopeKey: string, options?: RequestOptions): Promise<ScopeControl>;
}
