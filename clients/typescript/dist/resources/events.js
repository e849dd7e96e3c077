/** `client.events`: send (one or a batch), get, list, iterate every page, cancel. */
import { AgentSignalError } from "../errors.js";
import { segment } from "../http.js";
export class Events {
    #http;
    constructor(http) {
        this.#http = http;
    }
    /**
     * Send one event, or several as one all-or-nothing batch (`{"events": [...]}` on the wire). One result per
     * event, in order: `status` is `accepted`, `duplicate` (its dedupe key was seen: `eventId` is the first
     * event's), or an admission check's verdict such as `gated`. Retried on 429/503 and on a lost answer (safe:
     * the server dedupes). A `NaN` or `Infinity` anywhere in it is refused before sending (`invalid_json`, its
     * `field` the path, e.g. `events[1].payload.score`): JSON has no form for them.
     */
    async send(event, options) {
        const body = Array.isArray(event) ? { events: event } : event;
        return this.#http.json("POST", "/v1/events", { body, signal: options?.signal, replayable: true });
    }
    /** The event's status record with its attempts and stored event; a source id works when it names one event. */
    async get(idOrSourceId, options) {
        return this.#http.json("GET", `/v1/events/${segment(idOrSourceId)}`, { signal: options?.signal });
    }
    /** One page, newest first; pass the answer's `cursor` back to continue (a short page may still have one). */
    async list(filters = {}, options) {
        return this.#http.json("GET", "/v1/events", { query: { ...filters }, signal: options?.signal });
    }
    /** Every event matching `filters`, page after page; `.pages()` walks the pages themselves. */
    iterate(filters = {}, options) {
        return new EventIterator((page) => this.list(page, options), filters);
    }
    /** A queued event is cancelled now; a running one stops before its next action (`cancelRequested`). */
    async cancel(eventId, options) {
        return this.#http.json("POST", `/v1/events/${segment(eventId)}/cancel`, { signal: options?.signal });
    }
}
/** An async iterable over every event of a listing, fetching the next page only when it is needed. */
export class EventIterator {
    #list;
    #filters;
    constructor(list, filters) {
        this.#list = list;
        this.#filters = filters;
    }
    /** Each page in turn, until one comes without a cursor. */
    async *pages() {
        const seen = new Set();
        let cursor = this.#filters.cursor ?? undefined;
        for (;;) {
            const page = await this.#list({ ...this.#filters, cursor });
            yield page;
            if (!page.cursor)
                return;
            if (seen.has(page.cursor)) {
                throw new AgentSignalError({ status: 0, code: "cursor_loop", message: `the server repeated cursor ${page.cursor}` });
            }
            seen.add(page.cursor);
            cursor = page.cursor;
        }
    }
    async *[Symbol.asyncIterator]() {
        for await (const page of this.pages())
            yield* page.events;
    }
}
