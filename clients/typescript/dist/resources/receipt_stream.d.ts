import { type Http } from "../http.js";
import type { Receipt, ReceiptPage, ReceiptQuery } from "../types.js";
export interface ReceiptStreamOptions {
    /** Whose receipts: required with an API key; with a user token, left out means the token's user. */
    userId?: string | undefined;
    agentId?: string | undefined;
    topicId?: string | undefined;
    /** Ends the stream (the `for await` loop finishes normally). */
    signal?: AbortSignal | undefined;
    /**
     * How far before the newest receipt seen a catch-up reads, in ms (default 10 minutes): a receipt committed
     * while the stream was away may be dated up to this much before it and still be yielded. The list before the
     * first connection reads as far back, so that the receipts already written there are never yielded.
     */
    catchUpLagMs?: number | undefined;
    /**
     * How long a connection may send nothing, in ms, before it is taken for dead and replaced (then caught up),
     * like one that dropped (default 45 s: three of the server's 15 s keep-alive comments). A half-open
     * connection (a NAT or a mobile network that dropped it silently) would otherwise wait for ever. `0`: never.
     */
    idleTimeoutMs?: number | undefined;
    /**
     * How long, in ms, the stream goes on reconnecting through drops in a row (default 60 s: a web rollout). It
     * ends with `stream_closed` only when it has dropped more than the client's `maxRetries` times in a row and
     * this long has passed since the first drop of that row; a stream that ended cannot resume (a new one yields
     * only the receipts written after it opens), so the receipts of a longer outage would be lost. The wait
     * between reconnects grows with the backoff, up to its cap (8 s). `0`: the `maxRetries` drops alone end it.
     */
    reconnectForMs?: number | undefined;
}
/** The default {@link ReceiptStreamOptions.catchUpLagMs}. */
export declare const CATCH_UP_LAG_MS = 600000;
/** The default {@link ReceiptStreamOptions.idleTimeoutMs}. */
export declare const IDLE_TIMEOUT_MS = 45000;
/** The default {@link ReceiptStreamOptions.reconnectForMs}. */
export declare const RECONNECT_FOR_MS = 60000;
/** `receipts.list` with a signal: how the stream catches up. */
export type ReceiptLister = (query: ReceiptQuery, signal: AbortSignal) => Promise<ReceiptPage>;
export declare const CATCH_UP_PAGES = 200;
export declare class ReceiptStream implements AsyncIterable<Receipt> {
    #private;
    /**
     * Resolves once the server has subscribed (receipts written from then on arrive); rejects if it refused (the
     * first list of receipts, or the stream) or could not be reached before then, or with `stream_ended` if the
     * stream ended (an abort) before it opened, iterated or not. The stream connects when it is iterated: start the
     * `for await` (in a task of its own) before awaiting this, as the README's first example does, and give that
     * task's promise a handler: a refusal rejects the loop together with this, and an unhandled rejection ends a
     * Node process.
     */
    readonly opened: Promise<void>;
    constructor(http: Http, options: ReceiptStreamOptions, list: ReceiptLister);
    [Symbol.asyncIterator](): AsyncIterator<Receipt>;
}
