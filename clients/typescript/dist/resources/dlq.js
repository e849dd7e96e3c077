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
        let body;
        if (!Array.isArray(target))
            body = { all: true };
        else if (target.length > 0 && typeof target[0] === "object")
            body = { events: target };
        else
            body = { eventIds: target };
        return this.#http.json("POST", "/v1/dlq/redrive", { body, signal: options?.signal });
    }
    /** Take dead events out of the DLQ, kept as audit records with `reason` (`GET /v1/dlq?state=discarded`). */
    async discard(target, reason, options) {
        const body = Array.isArray(target) ? { eventIds: target } : { all: true };
        if (reason !== undefined)
            body.reason = reason;
        return this.#http.json("POST", "/v1/dlq/discard", { body, signal: options?.signal });
    }
}
