/** `client.receipts`: list a user's receipts, and stream new ones live over server-sent events. */
import type { Http, RequestOptions } from "../http.js";
import type { Receipt, ReceiptPage, ReceiptQuery } from "../types.js";
import { ReceiptStream, type ReceiptStreamOptions } from "./receipt_stream.js";
export declare class Receipts {
    #private;
    constructor(http: Http);
    /** Receipts newest first (`limit` 1..50, default 20); pass the answer's `cursor` back for the next page. */
    list(query: ReceiptQuery, options?: RequestOptions): Promise<ReceiptPage>;
    /**
     * New receipts as they are written (never one written before the stream began), until `signal` aborts (the
     * loop then ends without an error) or the consumer stops iterating. `userId` may be left out with a user token
     * (the token's user), as in `list`. When iteration starts, one list of the receipts already there comes first
     * (so that no catch-up yields them), then the connection; `opened` resolves once the server has subscribed.
     * A `resync` from the server (it fell behind, or lost its store) and a dropped connection are caught up with
     * `GET /v1/receipts`, so no receipt is missed or repeated.
     */
    stream(options?: ReceiptStreamOptions): ReceiptStream;
}
export type { Receipt, ReceiptStream, ReceiptStreamOptions };
