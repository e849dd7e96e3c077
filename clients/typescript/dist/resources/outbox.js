export class Outbox {
    #http;
    constructor(http) {
        this.#http = http;
    }
    /** Dead outbound calls, latest death first (`limit`, `cursor`: the previous page's). */
    async dead(query = {}, options) {
        return this.#http.json("GET", "/v1/outbox/dead", { query: { ...query }, signal: options?.signal });
    }
    /**
     * Send dead outbound calls again (pending, attempts at zero, the same idempotency key): records as `dead()` lists
     * them (`[{scopeKey, recordId}, …]`, at most 500) or `{all: true}`. One not dead, or gone, comes back in `notDead`.
     */
    async redrive(target, options) {
        let body;
        if (Array.isArray(target))
            body = { records: target.map(({ scopeKey, recordId }) => ({ scopeKey, recordId })) };
        else if (isAll(target))
            body = { all: true };
        else {
            throw new TypeError("AgentSignal: outbox.redrive takes an array of {scopeKey, recordId} or {all: true}");
        }
        return this.#http.json("POST", "/v1/outbox/redrive", { body, signal: options?.signal });
    }
}
function isAll(target) {
    if (typeof target !== "object" || target === null || target instanceof Set)
        return false;
    const keys = Object.keys(target);
    return keys.length === 1 && keys[0] === "all" && target.all === true;
}
