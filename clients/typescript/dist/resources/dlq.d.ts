import type { Http, RequestOptions } from "../http.js";
import type { Discarded, DlqPage, DlqQuery, Redriven, RedriveEdit } from "../types.js";
/** Every dead event at once, instead of a list of ids. */
export interface AllDead {
    all: true;
}
/** Options of a call given `{all: true}`: it takes several requests when the DLQ is long. */
export interface EveryDeadOptions extends RequestOptions {
    /** Called after each request but the last with the number of events redriven (or discarded) so far. */
    onProgress?: (doneSoFar: number) => void;
}
export declare class Dlq {
    #private;
    constructor(http: Http);
    /** Dead events, latest death first (`state: "discarded"`: the discarded ones, with reason and time). */
    list(query?: DlqQuery, options?: RequestOptions): Promise<DlqPage>;
    /**
     * Requeue dead events at their scope's tail: ids (`["ev_1", …]`), edits (`[{eventId, payload}, …]`: each
     * payload is validated like a new event's, and a 422 names `events[i].payload.<field>`), or `{all: true}` (sent
     * again while the service answers `more`, the answers joined). Ids that are unknown or not dead come back in
     * `notDead`; a list longer than `AGENT_SIGNAL_DLQ_BATCH_MAX` (1,000) is a 413 `batch_too_large`.
     */
    redrive(target: readonly string[] | readonly RedriveEdit[] | AllDead, options?: EveryDeadOptions): Promise<Redriven>;
    /** Take dead events out of the DLQ, kept as audit records with `reason` (`GET /v1/dlq?state=discarded`). */
    discard(target: readonly string[] | AllDead, reason?: string, options?: EveryDeadOptions): Promise<Discarded>;
}
