import { ReceiptStream } from "./receipt_stream.js";
export class Receipts {
    #http;
    constructor(http) {
        this.#http = http;
    }
    /** Receipts newest first (`limit` 1..50, default 20); pass the answer's `cursor` back for the next page. */
    async list(query, options) {
        return this.#http.json("GET", "/v1/receipts", { query: { ...query }, signal: options?.signal });
    }
    /**
     * New receipts as they are written (never one written before the stream began), until `signal` aborts (the
     * loop then ends without an error) or the consumer stops iterating. `userId` may be left out with a user token
     * (the token's user), as in `list`. When iteration starts, one list of the receipts already there comes first
     * (so that no catch-up yields them), then the connection; `opened` resolves once the server has subscribed.
     * A `resync` from the server (it fell behind, or lost its store) and a dropped connection are caught up with
     * `GET /v1/receipts`, so no receipt is missed or repeated.
     */
    stream(options = {}) {
        return new ReceiptStream(this.#http, options, (query, signal) => this.list(query, { signal }));
    }
}
