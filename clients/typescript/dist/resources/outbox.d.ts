/** `client.outbox`: the outbound calls (webhooks, agent runs) that failed every attempt, and sending them again. */
import type { Http, RequestOptions } from "../http.js";
import type { DeadRecordsPage, DeadRecordsQuery, RecordRef, RecordsRedriven } from "../types.js";
/** Every dead outbound call at once, instead of a list of records. */
export interface AllDeadRecords {
    all: true;
}
export declare class Outbox {
    #private;
    constructor(http: Http);
    /** Dead outbound calls, latest death first (`limit`, `cursor`: the previous page's). */
    dead(query?: DeadRecordsQuery, options?: RequestOptions): Promise<DeadRecordsPage>;
    /**
     * Send dead outbound calls again (pending, attempts at zero, the same idempotency key): records as `dead()` lists
     * them (`[{scopeKey, recordId}, …]`, at most 500) or `{all: true}`. One not dead, or gone, comes back in `notDead`.
     */
    redrive(target: readonly RecordRef[] | AllDeadRecords, options?: RequestOptions): Promise<RecordsRedriven>;
}
