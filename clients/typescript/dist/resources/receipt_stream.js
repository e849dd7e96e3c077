/**
 * `client.receipts.stream(...)`: `GET /v1/receipts/stream` as an `AsyncIterable<Receipt>` of new receipts: those
 * written after the stream began, never one written before it.
 *
 * The server sends `: connected` once its subscription is live, `event: receipt` (the receipt's JSON, `id:` its
 * id) per new receipt, `event: resync` when this client fell behind or the server lost its store, and
 * `: keep-alive` comments. A resync, and a connection that drops (then reconnects, for as long as
 * `reconnectForMs` and `maxRetries` allow), are caught up by listing the receipts created since `catchUpLagMs` before the newest one seen
 * (`sinceCreatedAt`, inclusive; ids already yielded are skipped), so the iterable repeats no receipt. A receipt's
 * `createdAt` is its event's time, not when it was committed: events of other scopes, retries and redrives
 * commit late, so a catch-up from the newest one seen would miss a receipt dated before it and committed while
 * the stream was away. The lag reaches back for those; one whose event is older still (a redrive hours later)
 * and committed during a gap is not caught up (list with `receipts.list` to reconcile).
 *
 * A catch-up's reach back would also find receipts written before the stream began. So, before its first
 * connection, the stream lists the receipts of the last `catchUpLagMs` (a snapshot, one list of at most
 * {@link CATCH_UP_PAGES} pages) and marks them as seen without yielding them; no catch-up reads from before that
 * snapshot's start. A receipt committed between the snapshot and the server's subscription is in neither, so the
 * first connection is caught up too, as soon as it opens, like a reconnect.
 *
 * Once the stream has opened, a reconnect the server does not answer (a web process restarting: no answer, or a
 * 5xx after http's own retries) is a drop like the connection's own, and so is a 429 that carries a Retry-After
 * (`rate_limited`, `too_many_streams`, …: many streams reconnecting at once after a restart), and a catch-up
 * whose list fails either way; the wait before the next reconnect is then at least the Retry-After. An answer the
 * server means (401 for an expired user token, 403, 404, 422, a 429 without Retry-After such as `quota_exceeded`)
 * ends the stream with it. Drops end it (`stream_closed`) only when there were more than `maxRetries` in a row
 * and `reconnectForMs` has passed since the first of them: a web rollout takes longer than http's few retries,
 * and an ended stream cannot resume (a new one yields only what is written after it opens). Before the stream
 * first opened, any failure rejects `opened` and the loop. It ends,
 * without an error, when the options' `signal` aborts or the consumer stops iterating; with `user_erased` when
 * the user is erased (`DELETE /v1/users/{userId}`).
 */
import { AgentSignalError } from "../errors.js";
import { backoffMs, MAX_RETRY_AFTER_S, MAX_TIMER_MS, sleep } from "../http.js";
import { readSse } from "../sse.js";
/** The default {@link ReceiptStreamOptions.catchUpLagMs}. */
export const CATCH_UP_LAG_MS = 600_000;
/** The default {@link ReceiptStreamOptions.idleTimeoutMs}. */
export const IDLE_TIMEOUT_MS = 45_000;
/** The default {@link ReceiptStreamOptions.reconnectForMs}. */
export const RECONNECT_FOR_MS = 60_000;
const SEEN_IDS = 20_000; // ids remembered to drop repeats: what a catch-up reads again within its lag
// A catch-up reads every page since the newest receipt seen (newest first, so all of them before yielding the
// oldest); past this many pages of 50 it rejects the loop with `catch_up_overflow` rather than skip the oldest.
// The snapshot before the first connection reads at most this many pages too, then stops (best effort).
export const CATCH_UP_PAGES = 200;
/** What `#connect` answers for a reconnect that failed the way a dropped connection does. */
const DROPPED = Symbol("dropped");
export class ReceiptStream {
    /**
     * Resolves once the server has subscribed (receipts written from then on arrive); rejects if it refused (the
     * first list of receipts, or the stream) or could not be reached before then, or with `stream_ended` if the
     * stream ended (an abort) before it opened, iterated or not. The stream connects when it is iterated: start the
     * `for await` (in a task of its own) before awaiting this, as the README's first example does, and give that
     * task's promise a handler: a refusal rejects the loop together with this, and an unhandled rejection ends a
     * Node process.
     */
    opened;
    #http;
    #options;
    #list;
    #seen = new Map(); // ids yielded, or already there at the snapshot: never yielded again
    #open;
    #everOpened = false; // a connection delivered once: from then on an unanswered reconnect is a drop
    #outage; // the failure this connection was dropped for, when the server did not answer
    #floorMs = 0; // where the snapshot began reading: no catch-up reads from before it
    #openedMs; // when the stream first opened, by the server's clock when it says
    #skewMs = 0; // the server's clock minus ours, from the stream's Date header
    #newestMs; // createdAt of the newest receipt yielded, never past the server's clock
    #lagMs;
    #idleMs;
    #reconnectForMs;
    #iterated = false;
    #unlisten = () => undefined; // takes the constructor's listener off the caller's signal
    constructor(http, options, list) {
        if (!options || typeof options !== "object")
            throw new TypeError("AgentSignal: receipts.stream takes an options object");
        if (options.userId != null && (typeof options.userId !== "string" || options.userId === "")) {
            // left out, the server takes a user token's own user; an empty one would be sent as `userId=`
            throw new TypeError("AgentSignal: receipts.stream's userId must be a non-empty string, or left out with a user token");
        }
        const lag = options.catchUpLagMs ?? CATCH_UP_LAG_MS;
        if (!Number.isFinite(lag) || lag < 0) {
            throw new TypeError(`AgentSignal: catchUpLagMs must be a number of ms >= 0 (got ${String(options.catchUpLagMs)})`);
        }
        this.#lagMs = lag;
        this.#idleMs = checkedMs("idleTimeoutMs", options.idleTimeoutMs, IDLE_TIMEOUT_MS);
        this.#reconnectForMs = checkedMs("reconnectForMs", options.reconnectForMs, RECONNECT_FOR_MS);
        this.#http = http;
        this.#options = options;
        this.#list = list;
        this.opened = new Promise((resolve, reject) => {
            this.#open = { resolve, reject };
        });
        this.opened.catch(() => undefined); // awaiting it is optional: no unhandled rejection when nobody does
        // aborted before anyone iterates: `opened` settles too (it waited for an iteration that will not come)
        const ended = () => {
            this.#open.reject(new AgentSignalError({ status: 0, code: "stream_ended", message: "the stream ended" }));
        };
        const { signal } = options;
        if (signal?.aborted)
            ended();
        else if (signal) {
            signal.addEventListener("abort", ended, { once: true });
            this.#unlisten = () => signal.removeEventListener("abort", ended);
        }
    }
    [Symbol.asyncIterator]() {
        if (this.#iterated)
            throw new TypeError("AgentSignal: a receipt stream can be iterated once");
        this.#iterated = true;
        // From here the loop settles `opened` itself (and ends on the signal through its own listener, removed when
        // it ends). Left on a signal the app shares among many streams, the constructor's listener would hold each
        // ended stream (its seen ids) for as long as the signal lives, and Node warns past ten listeners.
        this.#unlisten();
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
            if (!(await this.#snapshot(signal)))
                return;
            for (let drops = 0, rowStartMs = 0;;) {
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
                    this.#outage = undefined;
                    const response = await this.#connect(connection.signal);
                    if (response === undefined)
                        return;
                    // a reconnect the server did not answer has nothing to read: straight on to counting it as a drop
                    const items = response === DROPPED ? undefined : readSse(response.body);
                    if (items)
                        touch();
                    // every connection reads what was written before it subscribed: while away, or, for the first one,
                    // since the snapshot
                    let caughtUp = false;
                    try {
                        while (items) {
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
                            this.#everOpened = true;
                            this.#open.resolve();
                            if (!caughtUp) {
                                caughtUp = true;
                                clearTimeout(idle); // a catch-up's pages are not this connection's silence
                                if (!(yield* this.#caughtUp(signal)))
                                    break;
                                if (signal.aborted)
                                    return;
                                drops = 0; // a connection that delivered and was caught up: the drops in a row start again
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
                                if (!(yield* this.#caughtUp(signal)))
                                    break;
                                if (signal.aborted)
                                    return;
                                touch();
                            }
                            else if (item.kind === "comment" && item.text === "user erased") {
                                // DELETE /v1/users/{userId}: nothing of theirs is left to stream, and a reconnect would hide it
                                const who = userId == null ? "the token's user" : `user ${userId}`;
                                throw new AgentSignalError({ status: 0, code: "user_erased", message: `${who} was erased` });
                            }
                        }
                    }
                    finally {
                        await items?.return(undefined);
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
                if (drops === 1)
                    rowStartMs = Date.now();
                const rowMs = Date.now() - rowStartMs;
                if (drops > this.#http.maxRetries && rowMs >= this.#reconnectForMs) {
                    throw new AgentSignalError({
                        status: 0,
                        code: "stream_closed",
                        message: `the receipts stream closed, or could not reconnect, after ${drops} ${drops === 1 ? "drop" : "drops"} in a row over ${seconds(rowMs)} s`,
                        cause: this.#outage, // the last reconnect's failure, when it failed
                    });
                }
                try {
                    await sleep(this.#reconnectWaitMs(drops), signal);
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
    /**
     * How long to wait after the `drops`th drop in a row: the backoff, or the failure's Retry-After when that is
     * longer (a 429 `rate_limited` says when the limit frees; reconnecting sooner would only be refused again).
     */
    #reconnectWaitMs(drops) {
        const outage = this.#outage;
        const askedMs = outage instanceof AgentSignalError && outage.retryAfterS !== undefined ? outage.retryAfterS * 1000 : 0;
        return Math.min(MAX_TIMER_MS, Math.max(backoffMs(drops - 1), askedMs));
    }
    /**
     * Before the first connection: the receipts written since `catchUpLagMs` ago, marked as seen without being
     * yielded and without moving the newest seen time; at most {@link CATCH_UP_PAGES} pages, then it stops (best
     * effort). False when `signal` aborted first; a failure rejects `opened` and is thrown, as the first
     * connection's would be.
     */
    async #snapshot(signal) {
        const { userId, agentId, topicId } = this.#options;
        const sinceCreatedAt = Math.max(0, Date.now() - this.#lagMs); // by this machine's clock: the server's is not known yet
        this.#floorMs = sinceCreatedAt;
        try {
            let cursor;
            for (let page = 0; page < CATCH_UP_PAGES; page += 1) {
                const answer = await this.#list({ userId, agentId, topicId, sinceCreatedAt, limit: 50, cursor }, signal);
                for (const receipt of answer.receipts)
                    this.#note(receipt.id);
                if (!answer.cursor)
                    break;
                cursor = answer.cursor;
            }
            return true;
        }
        catch (error) {
            if (signal.aborted)
                return false;
            this.#open.reject(error);
            throw error;
        }
    }
    /**
     * The stream's response; undefined when `signal` aborted first; {@link DROPPED} when, the stream having opened
     * before, the server did not answer or asked to wait (see {@link isTemporary}): the loop counts that as a drop. Any other failure,
     * and every failure before the stream first opened, rejects `opened` and is thrown.
     */
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
            if (this.#everOpened && isTemporary(error)) {
                this.#outage = error;
                return DROPPED;
            }
            this.#open.reject(error);
            throw error;
        }
    }
    /**
     * `#catchUp`, answering true once it was read; false when it failed the way a dropped connection does (see
     * {@link isTemporary}): the loop then drops the connection, and the next one catches up again.
     */
    async *#caughtUp(signal) {
        try {
            yield* this.#catchUp(signal);
            return true;
        }
        catch (error) {
            if (!isTemporary(error))
                throw error;
            this.#outage = error;
            return false;
        }
    }
    /** The receipts created since the newest one seen that were not yielded yet, oldest first (none once aborted). */
    async *#catchUp(signal) {
        const { userId, agentId, topicId } = this.#options;
        const newest = this.#newestMs ?? this.#openedMs;
        // never from before the snapshot: what was written there before the stream began is not marked as seen
        const sinceCreatedAt = Math.max(this.#floorMs, newest === undefined ? 0 : newest - this.#lagMs);
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
    /** False for a receipt already seen; otherwise notes it (and its time) and answers true. */
    #remember(receipt) {
        if (this.#seen.has(receipt.id))
            return false;
        this.#note(receipt.id);
        if (typeof receipt.createdAt === "number") {
            // the server indexes a receipt dated ahead of its clock at that clock: a catch-up from a future date misses
            const at = Math.min(receipt.createdAt, Date.now() + this.#skewMs);
            this.#newestMs = Math.max(this.#newestMs ?? 0, at);
        }
        return true;
    }
    /** Notes `id` as seen, forgetting the oldest past {@link SEEN_IDS}. */
    #note(id) {
        this.#seen.set(id, true);
        if (this.#seen.size > SEEN_IDS)
            this.#seen.delete(this.#seen.keys().next().value);
    }
}
/**
 * A failure that says nothing about the stream itself: no answer (a web process restarting, the network away), a
 * 5xx left after http's own retries (a proxy with nothing behind it, a store briefly unavailable), or a 429 with a
 * Retry-After (`rate_limited`, `tenant_rate_limited`, `too_many_streams`, `too_many_connections`): the server
 * sends one only where waiting frees the limit, as when every stream of a user reconnects at once after a
 * restart. Once the stream has opened, it is a drop: waited out and retried. A 401 (an expired user token), 403,
 * 404, 422 or a 429 without Retry-After (`quota_exceeded`: waiting will not help), or with one past
 * {@link MAX_RETRY_AFTER_S} (http does not wait that long either: the stream would sleep unseen), is the server's
 * answer, and ends the stream.
 */
function isTemporary(error) {
    if (!(error instanceof AgentSignalError))
        return false;
    if (error.status === 429)
        return error.retryAfterS !== undefined && error.retryAfterS <= MAX_RETRY_AFTER_S;
    return error.code === "network_error" || error.status >= 500;
}
/** `value` (or `fallback` when left out) as a number of ms a timer can hold; else a TypeError naming `name`. */
function checkedMs(name, value, fallback) {
    const ms = value ?? fallback;
    if (!Number.isFinite(ms) || ms < 0 || ms > MAX_TIMER_MS) {
        throw new TypeError(`AgentSignal: ${name} must be a number of ms from 0 to ${MAX_TIMER_MS} (got ${String(value)})`);
    }
    return ms;
}
/** `ms` in seconds as a message shows them: tenths under 10 s (`0.4`), whole ones above (`61`). */
function seconds(ms) {
    return (ms / 1000).toFixed(ms < 10_000 ? 1 : 0);
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
