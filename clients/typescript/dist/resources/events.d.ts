import { type Http, type RequestOptions } from "../http.js";
import type { Cancelled, EventDetail, EventFilters, EventPage, EventStatus, IngestResults, SourceEvent } from "../types.js";
export declare class Events {
    #private;
    constructor(http: Http);
    /**
     * Send one event, or several as one all-or-nothing batch (`{"events": [...]}` on the wire). One result per
     * event, in order: `status` is `accepted`, `duplicate` (its dedupe key was seen: `eventId` is the first
     * event's), or an admission check's verdict such as `gated`. Retried on 429/503 and on a lost answer (safe:
     * the server dedupes). A `NaN` or `Infinity` anywhere in it is refused before sending (`invalid_json`, its
     * `field` the path, e.g. `events[1].payload.score`): JSON has no form for them.
     */
    send(event: SourceEvent | readonly SourceEvent[], options?: RequestOptions): Promise<IngestResults>;
    /** The event's status record with its attempts and stored event; a source id works when it names one event. */
    get(idOrSourceId: string, options?: RequestOptions): Promise<EventDetail>;
    /** One page, newest first; pass the answer's `cursor` back to continue (a short page may still have one). */
    list(filters?: EventFilters, options?: RequestOptions): Promise<EventPage>;
    /** Every event matching `filters`, page after page; `.pages()` walks the pages themselves. */
    iterate(filters?: EventFilters, options?: RequestOptions): EventIterator;
    /** A queued event is cancelled now; a running one stops before its next action (`cancelRequested`). */
    cancel(eventId: string, options?: RequestOptions): Promise<Cancelled>;
}
/** An async iterable over every event of a listing, fetching the next page only when it is needed. */
export declare class EventIterator implements AsyncIterable<EventStatus> {
    #private;
    constructor(list: (filters: EventFilters) => Promise<EventPage>, filters: EventFilters);
    /** Each page in turn, until one comes without a cursor. */
    pages(): AsyncGenerator<EventPage, void, undefined>;
    [Symbol.asyncIterator](): AsyncGenerator<EventStatus, void, undefined>;
}
