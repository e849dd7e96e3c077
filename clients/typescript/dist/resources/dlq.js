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
     * payload is validated like a new event's, and a 422 names `events[i].payload.<field>`), or `{all: true}` (sent
     * again while the service answers `more`, the answers joined). Ids that are unknown or not dead come back in
     * `notDead`; a list longer than `AGENT_SIGNAL_DLQ_BATCH_MAX` (1,000) is a 413 `batch_too_large`.
     */
    async redrive(target, options) {
        const ids = targetOf("redrive", target);
        if (ids === "all")
            return this.#everyDead("/v1/dlq/redrive", { all: true }, "redriven", options);
        const body = ids.length > 0 && typeof ids[0] === "object" ? { events: ids } : { eventIds: ids };
        return this.#http.json("POST", "/v1/dlq/redrive", { body, signal: options?.signal });
    }
    /** Take dead events out of the DLQ, kept as audit records with `reason` (`GET /v1/dlq?state=discarded`). */
    async discard(target, reason, options) {
        const ids = targetOf("discard", target);
        const body = ids === "all" ? { all: true } : { eventIds: ids };
        if (reason !== undefined)
            body.reason = reason;
        if (ids === "all")
            return this.#everyDead("/v1/dlq/discard", body, "discarded", options);
        return this.#http.json("POST", "/v1/dlq/discard", { body, signal: options?.signal });
    }
    /**
     * `{all: true}`, sent again with the answer's `until` while the service answers `more` (one request acts on at
     * most `AGENT_SIGNAL_DLQ_BATCH_MAX` dead events; `until` ends the sweep at the events dead when it began), the
     * answers joined. `options.onProgress` hears the count so far. An answer that says `more` but acted on none
     * ends the sweep, answered with `more: true` (and `until`): unfinished (ids it answered `notDead` left the DLQ, so a
     * batch of only those is progress; one that repeats them is not). A request that fails, or an abort, after
     * earlier ones acted throws with what they did in the error's `partial`.
     */
    async #everyDead(path, body, doneKey, options) {
        const done = [];
        const notDead = [];
        let sent = body;
        let until;
        const seenNotDead = new Set();
        for (;;) {
            let answer;
            try {
                answer = await this.#http.json("POST", path, { body: sent, signal: options?.signal });
            }
            catch (error) {
                // what the sweep did before this request failed (or was aborted), and where to go on from
                if (typeof error === "object" && error !== null && done.length + notDead.length > 0) {
                    error.partial = { [doneKey]: done, notDead, ...(until === undefined ? {} : { until }) };
                }
                throw error;
            }
            // the sweep's start, sent back: an event that dies again meanwhile is not taken twice
            if (typeof answer.until === "number") {
                until = answer.until;
                sent = { ...body, until };
            }
            const batch = answer[doneKey] ?? [];
            done.push(...batch);
            // ids answered notDead leave the DLQ (stale entries), so a batch of them is progress; an answer that
            // acted on nothing new says the service cannot go on: stop, and say the sweep is unfinished
            const fresh = (answer.notDead ?? []).filter((id) => !seenNotDead.has(id));
            for (const id of fresh)
                seenNotDead.add(id);
            notDead.push(...fresh);
            if (!answer.more)
                return { [doneKey]: done, notDead };
            if (batch.length === 0 && fresh.length === 0) {
                return { [doneKey]: done, notDead, more: true, ...(until === undefined ? {} : { until }) };
            }
            options?.onProgress?.(done.length);
        }
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
