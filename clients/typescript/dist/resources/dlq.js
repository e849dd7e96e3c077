export class Dlq {
    #http;
    constructor(http) {
        this.#http = http;
    }
    /** Dead events, latest death first (`state: "discarded"`: the discarded ones, with reason and time). */
    async list(query = {}, options) {
        return this.#http.json("GET", "/v1/dlq", { query: { ...query }, signal: options?.signal });
    }
    /**
     * Requeue dead events at their scope's tail: ids (`["ev_1", …]`), edits (`[{eventId, payload}, …]`: each
     * payload is validated like a new event's, and a 422 names `events[i].payload.<field>`), or `{all: true}`.
     * Ids that are unknown or not dead come back in `notDead`.
     */
    async redrive(target, options) {
        const ids = targetOf("redrive", target);
        let body;
        if (ids === "all")
            body = { all: true };
        else if (ids.length > 0 && typeof ids[0] === "object")
            body = { events: ids };
        else
            body = { eventIds: ids };
        return this.#http.json("POST", "/v1/dlq/redrive", { body, signal: options?.signal });
    }
    /** Take dead events out of the DLQ, kept as audit records with `reason` (`GET /v1/dlq?state=discarded`). */
    async discard(target, reason, options) {
        const ids = targetOf("discard", target);
        const body = ids === "all" ? { all: true } : { eventIds: ids };
        if (reason !== undefined)
            body.reason = reason;
        return this.#http.json("POST", "/v1/dlq/discard", { body, signal: options?.signal });
    }
}
/**
 * The list a call names, or `"all"` only for exactly `{all: true}`: anything else (a bare id, a Set, an object of
 * ids) is a TypeError, never read as every dead event (which cannot be undone).
 */
function targetOf(call, target) {
    if (Array.isArray(target))
        return target;
    if (typeof target === "object" && target !== null && !(target instanceof Set)) {
        const keys = Object.keys(target);
        if (keys.length === 1 && keys[0] === "all" && target.all === true)
            return "all";
    }
    const got = typeof target === "string" ? JSON.stringify(target) : target instanceof Set ? "a Set" : typeof target;
    throw new TypeError(`AgentSignal: dlq.${call} takes an array of event ids${call === "redrive" ? ", an array of {eventId, payload} edits" : ""} or {all: true} (got ${got})`);
}
