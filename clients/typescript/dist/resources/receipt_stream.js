/**
 * `client.receipts.stream(...)`: `GET /v1/receipts/stream` as an `AsyncIterable<Receipt>`.
 *
 * The server sends `: connected` once its subscription is live, `event: receipt` (the receipt's JSON, `id:` its
 * id) per new receipt, `event: resync` when this client fell behind or the server lost its store, and
 * `: keep-alive` comments. A resync, and a connection that drops (then reconnects, at most `maxRetries` times in
 * a row), are caught up by listing the receipts created since `catchUpLagMs` before the newest one seen
 * (`sinceCreatedAt`, inclusive; ids already yielded are skipped), so the iterable repeats no receipt. A receipt's
 * `createdAt` is its event's time, not when it was committed: events of other scopes, retries and redrives
 * commit late, so a catch-up from the newest one seen would miss a receipt dated before it and committed while
 * the stream was away. The lag reaches back for those; one whose event is older still (a redrive hours later)
 * and committed during a gap is not caught up (list with `receipts.list` to reconcile). It ends, without an
 * error, when the options' `signal` aborts or the consumer stops iterating; with `user_erased` when the user is
 * erased (`DELETE /v1/users/{userId}`).
 */
import { AgentSignalError } from "../errors.js";
import { backoffMs, MAX_TIMER_MS, sleep } from "../http.js";
import { readSse } from "../sse.js";
/** The default {@link ReceiptStreamOptions.catchUpLagMs}. */
export const CATCH_UP_LAG_MS = 600_000;
/** The default {@link ReceiptStreamOptions.idleTimeoutMs}. */
export const IDLE_TIMEOUT_MS = 45_000;
const SEEN_IDS = 20_000; // ids remembered to drop repeats: what a catch-up reads again within its lag
// A catch-up reads every page since the newest receipt seen (newest first, so all of them before yielding the
// oldest); past this many pages of 50 it rejects the loop with `catch_up_overflow` rather than skip the oldest.
export const CATCH_UP_PAGES = 200;
export class ReceiptStream {
    /**
     * Resolves once the server has subscribed (receipts written from then on arrive); rejects if it refused, or
     * with `stream_ended` if the stream ended (an abort) before it opened.
     */
    opened;
    #http;
    #options;
    #list;
    #seen = new Map();
    #open;
    #openedMs; // when the stream first opened, by the server's clock when it says
    #skewMs = 0; // the server's clock minus ours, from the stream's Date header
    #newestMs; // createdAt of the newest receipt yielded, never past the server's clock
    #lagMs;
    #idleMs;
    #iterated = false;
    constructor(http, options, list) {
        if (!options || typeof options.userId !== "string" || options.userId === "") {
            throw new TypeError("AgentSignal: receipts.stream needs a userId");
        }
        const lag = options.catchUpLagMs ?? CATCH_UP_LAG_MS;
        if (!Number.isFinite(lag) || lag < 0) {
            throw new TypeError(`AgentSignal: catchUpLagMs must be a number of ms >= 0 (got ${String(options.catchUpLagMs)})`);
        }
        this.#lagMs = lag;
        const idle = options.idleTimeoutMs ?? IDLE_TIMEOUT_MS;
        if (!Number.isFinite(idle) || idle < 0 || idle > MAX_TIMER_MS) {
            throw new TypeError(`AgentSignal: idleTimeoutMs must be a number of ms from 0 to ${MAX_TIMER_MS} (got ${String(options.idleTimeoutMs)})`);
        }
        this.#idleMs = idle;
        this.#http = http;
        this.#options = options;
        this.#list = list;
        this.opened = new Promise((resolve, reject) => {
            this.#open = { resolve, reject };
        });
        this.opened.catch(() => undefined); // awaiting it is optional: no unhandled rejection when nobody does
    }
    [Symbol.asyncIterator]() {
        if (this.#iterated)
            throw new TypeError("AgentSignal: a receipt stream can be iterated once");
        this.#iterated = true;
        return this.#run();
    }
    async *#run() {
        const outer = this.#options.signal;
        const controller = new AbortController();
        const onAbort = () => controller.abort(outer?.reason);
        if (outer?.aborted)
            controller.abort(outer.reason);
        else
            outer?.addEventListener("abort", onAbort, { once: true });
        const { signal } = controller;
        const { userId } = this.#options;
        try {
            for (let drops = 0;;) {
                // this connection's own abort: the stream's, or the idle timer's (then it counts as dropped)
                const connection = new AbortController();
                const onStreamAbort = () => connection.abort(signal.reason);
                signal.addEventListener("abort", onStreamAbort, { once: true });
                let idle;
                const touch = () => {
                    if (this.#idleMs === 0)
                        return;
                    clearTimeout(idle);
                    idle = setTimeout(() => connection.abort(new Error("the stream sent nothing for idleTimeoutMs")), this.#idleMs);
                };
                try {
                    const response = await this.#connect(connection.signal);
                    if (response === undefined)
                        return;
                    touch();
                    let caughtUp = drops === 0; // after a reconnect, read what was written while away
                    const items = readSse(response.body);
                    try {
                        for (;;) {
                            let next;
                            try {
                                next = await items.next();
                            }
                            catch {
                                if (signal.aborted)
                                    return;
                                break; // the connection dropped, or went silent past idleTimeoutMs
                            }
                            if (next.done || signal.aborted)
                                break;
                            touch();
                            this.#open.resolve();
                            if (!caughtUp) {
                                caughtUp = true;
                                drops = 0;
                                clearTimeout(idle); // a catch-up's pages are not this connection's silence
                                yield* this.#catchUp(signal);
                                if (signal.aborted)
                                    return;
                                touch();
                            }
                            const item = next.value;
                            if (item.kind === "event" && item.event === "receipt") {
                                const receipt = parseReceipt(item.data);
                                if (receipt && this.#remember(receipt)) {
                                    clearTimeout(idle); // the consumer's time with it is not this connection's silence
                                    yield receipt;
                                    touch();
                                }
                            }
                            else if (item.kind === "event" && item.event === "resync") {
                                clearTimeout(idle);
                                yield* this.#catchUp(signal);
                                if (signal.aborted)
                                    return;
                                touch();
                            }
                            else if (item.kind === "comment" && item.text === "user erased") {
                                // DELETE /v1/users/{userId}: nothing of theirs is left to stream, and a reconnect would hide it
                                throw new AgentSignalError({ status: 0, code: "user_erased", message: `user ${userId} was erased` });
                            }
                        }
                    }
                    finally {
                        await items.return(undefined);
                    }
                }
                finally {
                    clearTimeout(idle);
                    signal.removeEventListener("abort", onStreamAbort);
                    connection.abort();
                }
                if (signal.aborted)
                    return;
                drops += 1;
                if (drops > this.#http.maxRetries) {
                    throw new AgentSignalError({
                        status: 0,
                        code: "stream_closed",
                        message: `the receipts stream closed ${drops} times in a row`,
                    });
                }
                try {
                    await sleep(backoffMs(drops - 1), signal);
                }
                catch {
                    return;
                }
            }
        }
        finally {
            outer?.removeEventListener("abort", onAbort);
            controller.abort();
            this.#open.reject(new AgentSignalError({ status: 0, code: "stream_ended", message: "the stream ended" }));
        }
    }
    /** The stream's response, or undefined when `signal` aborted first; the first failure rejects `opened`. */
    async #connect(signal) {
        const { userId, agentId, topicId } = this.#options;
        try {
            const response = await this.#http.send("GET", "/v1/receipts/stream", {
                query: { userId, agentId, topicId },
                signal,
                accept: "text/event-stream",
            });
            if (!response.body) {
                throw new AgentSignalError({ status: response.status, code: "no_body", message: "the stream answered without a body" });
            }
            // A catch-up before any receipt starts from when the stream opened (the Date header has whole seconds).
            const date = Date.parse(response.headers.get("date") ?? "");
            if (!Number.isNaN(date))
                this.#skewMs = date - Date.now();
            this.#openedMs ??= (Number.isNaN(date) ? Date.now() : date) - 1000;
            return response;
        }
        catch (error) {
            if (signal.aborted)
                return undefined;
            this.#open.reject(error);
            throw error;
        }
    }
    /** The receipts created since the newest one seen that were not yielded yet, oldest first (none once aborted). */
    async *#catchUp(signal) {
        const { userId, agentId, topicId } = this.#options;
        const newest = this.#newestMs ?? this.#openedMs;
        const sinceCreatedAt = newest === undefined ? undefined : Math.max(0, newest - this.#lagMs);
        const found = [];
        let cursor;
        let reached; // createdAt of the oldest receipt read so far
        for (let page = 0;; page += 1) {
            // Past the page limit within the lag only (older than the newest seen): what is left is the lag's reach back
            // for late commits, read best effort, not the receipts since the newest seen, which are all read.
            if (page >= CATCH_UP_PAGES && newest !== undefined && reached !== undefined && reached < newest)
                break;
            if (page >= CATCH_UP_PAGES) {
                throw new AgentSignalError({
                    status: 0,
                    code: "catch_up_overflow",
                    message: `receipts.stream: more than ${CATCH_UP_PAGES * 50} receipts to catch up since ${String(sinceCreatedAt)}; none is skipped, so the stream stops here: list them with receipts.list({ sinceCreatedAt }) and open a new stream`,
                });
            }
            let answer;
            try {
                answer = await this.#list({ userId, agentId, topicId, sinceCreatedAt, limit: 50, cursor }, signal);
            }
            catch (error) {
                if (signal.aborted)
                    return; // the loop then ends quietly
                throw error;
            }
            found.push(...answer.receipts.filter((receipt) => !this.#seen.has(receipt.id)));
            const last = answer.receipts[answer.receipts.length - 1];
            if (last && typeof last.createdAt === "number")
                reached = last.createdAt;
            if (!answer.cursor)
                break;
            cursor = answer.cursor;
        }
        for (const receipt of found.reverse()) {
            if (signal.aborted)
                return; // the consumer aborted on an earlier one: nothing more is yielded
            if (this.#remember(receipt))
                yield receipt;
        }
    }
    /** False for a receipt already yielded; otherwise notes it (and its time) and answers true. */
    #remember(receipt) {
        if (this.#seen.has(receipt.id))
            return false;
        this.#seen.set(receipt.id, true);
        if (this.#seen.size > SEEN_IDS)
            this.#seen.delete(this.#seen.keys().next().value);
        if (typeof receipt.createdAt === "number") {
            // the server indexes a receipt dated ahead of its clock at that clock: a catch-up from a future date misses
            const at = Math.min(receipt.createdAt, Date.now() + this.#skewMs);
            this.#newestMs = Math.max(this.#newestMs ?? 0, at);
        }
        return true;
    }
}
function parseReceipt(data) {
    try {
        const value = JSON.parse(data);
        return typeof value === "object" && value !== null && typeof value.id === "string"
            ? value
            : undefined;
    }
    catch {
        return undefined;
    }
}
