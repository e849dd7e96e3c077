import { type Http } from "../http.js";
import type { Receipt, ReceiptPage, ReceiptQuery } from "../types.js";
export interface ReceiptStreamOptions {
    userId: string;
    agentId?: string | undefined;
    topicId?: string | undefined;
    /** Ends the stream (the `for await` loop finishes normally). */
    signal?: AbortSignal | undefined;
}
/** `receipts.list` with a signal: how the stream catches up. */
export type ReceiptLister = (query: ReceiptQuery, signal: AbortSignal) => Promise<ReceiptPage>;
export declare const CATCH_UP_PAGES = 200;
export declare class ReceiptStream implements AsyncIterable<Receipt> {
    #private;
    /**
     * Resolves once the server has subscribed (receipts written from then on arrive); rejects if it refused, or
     * with `stream_ended` if the stream ended (an abort) before it opened.
     */
    readonly opened: Promise<void>;
    constructor(http: Http, options: ReceiptStreamOptions, list: ReceiptLister);
    [Symbol.asyncIterator](): AsyncIterator<Receipt>;
}
