export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;
export type QueryValue = string | number | boolean | null | undefined;
export interface RequestOptions {
    /** Aborts the call, including a wait between retries. */
    signal?: AbortSignal | undefined;
}
export interface CallOptions extends RequestOptions {
    query?: Record<string, QueryValue> | undefined;
    body?: unknown;
    accept?: string;
    /**
     * A repeat answers what the first call would have, so a network failure that may have reached the server is
     * retried (default: true for GET, false for anything else).
     */
    replayable?: boolean;
    /** Called with the headers of the successful answer, before its body is returned. */
    onHeaders?: ((headers: Headers) => void) | undefined;
}
/** The longest `Retry-After` the client waits by itself, in seconds. */
export declare const MAX_RETRY_AFTER_S = 60;
export interface HttpOptions {
    baseUrl: string;
    token?: string | undefined;
    fetch?: FetchLike | undefined;
    maxRetries?: number | undefined;
    timeoutMs?: number | undefined;
}
/** The default {@link HttpOptions.timeoutMs}: how long one attempt waits for its answer to begin. */
export declare const TIMEOUT_MS = 30000;
/** The longest timer `setTimeout` keeps (a longer one fires at once): the bound of every `…Ms` option. */
export declare const MAX_TIMER_MS = 2147483647;
export declare class Http {
    #private;
    readonly baseUrl: string;
    readonly maxRetries: number;
    readonly timeoutMs: number;
    constructor(options: HttpOptions);
    url(path: string, query?: Record<string, QueryValue>): string;
    /**
     * The decoded JSON answer of a successful call. A body that breaks off is read again for a replayable call,
     * within the same `maxRetries` as the answers before it (at most `maxRetries + 1` requests in all); else, or
     * past them, it is a `network_error`; a body that is not JSON an `invalid_response`. Both carry the answer's
     * status.
     */
    json<T>(method: string, path: string, options?: CallOptions): Promise<T>;
    /**
     * The successful response (body unread), after retries; an AgentSignalError for any other answer. The
     * caller's signal stays tied to the body (aborting it ends the read): pass a signal that lives no longer
     * than the response, as the receipt stream's per-connection one does.
     */
    send(method: string, path: string, options?: CallOptions): Promise<Response>;
}
/** `Retry-After` in seconds: a number of seconds, or an HTTP date; undefined when absent or unreadable. */
export declare function parseRetryAfter(value: string | null, nowMs?: number): number | undefined;
/** Exponential backoff with jitter: half of the step is fixed, half random. */
export declare function backoffMs(attempt: number): number;
/** Resolves after `ms`; rejects with the signal's reason as soon as it aborts. */
export declare function sleep(ms: number, signal?: AbortSignal): Promise<void>;
export declare function isAbortError(error: unknown): boolean;
/**
 * True when `error` (fetch's, or its `cause`) says no byte reached the server: Node's connection codes, or
 * undici's `bad port` (a port the Fetch standard blocks, such as 1 or 6667, refused before any connection).
 */
export declare function nothingSent(error: unknown): boolean;
/**
 * A path segment: ids may hold `/`, `:`, `#`, `+` and the like, all percent-encoded. An id of `.` or `..` is
 * refused: URL parsing removes such a segment even percent-encoded, so the call would reach another route.
 */
export declare function segment(value: string): string;
