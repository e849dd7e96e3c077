/**
 * The request core every resource shares: URL building, the bearer header, JSON bodies, and retries.
 *
 * Retried: `429` and `503` answers, and failures before any answer (network errors), at most `maxRetries` times.
 * The wait is the answer's `Retry-After` (seconds, or an HTTP date); a `503` or a network error without one waits
 * an exponential backoff with jitter (0.25-0.5 s, 0.5-1 s, 1-2 s, … at most 8 s). A `429` without `Retry-After` is not
 * retried: the server sends one wherever waiting frees the limit, so its absence means waiting will not help
 * (a storage quota). A `Retry-After` over {@link MAX_RETRY_AFTER_S} is not waited for either: the error carries
 * it as `retryAfterS` for the caller to decide. Every route the client calls is safe to repeat (sends are deduped
 * by the server; cancel, pause, resume, redrive and discard are idempotent).
 */
import { AgentSignalError, errorFromResponse } from "./errors.js";
/** The longest `Retry-After` the client waits by itself, in seconds. */
export const MAX_RETRY_AFTER_S = 60;
const BACKOFF_BASE_MS = 500;
const BACKOFF_CAP_MS = 8_000;
export class Http {
    baseUrl;
    maxRetries;
    #token;
    #fetch;
    constructor(options) {
        if (!options || typeof options.baseUrl !== "string") {
            throw new TypeError("AgentSignal: baseUrl is required (for example http://127.0.0.1:8000)");
        }
        let parsed;
        try {
            parsed = new URL(options.baseUrl);
        }
        catch {
            parsed = undefined;
        }
        if (parsed === undefined || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
            throw new TypeError(`AgentSignal: baseUrl must be an http(s) URL (got ${JSON.stringify(options.baseUrl)})`);
        }
        this.baseUrl = parsed.href.replace(/\/+$/, "");
        const retries = options.maxRetries ?? 3;
        if (!Number.isInteger(retries) || retries < 0) {
            throw new TypeError(`AgentSignal: maxRetries must be a whole number >= 0 (got ${String(options.maxRetries)})`);
        }
        this.maxRetries = retries;
        this.#token = options.token || undefined;
        const given = options.fetch;
        if (given) {
            this.#fetch = given;
        }
        else if (typeof globalThis.fetch === "function") {
            // Called through globalThis each time: some browsers refuse a fetch detached from its window.
            this.#fetch = (input, init) => globalThis.fetch(input, init);
        }
        else {
            throw new TypeError("AgentSignal: no global fetch here; pass options.fetch");
        }
    }
    url(path, query) {
        const search = new URLSearchParams();
        for (const [name, value] of Object.entries(query ?? {})) {
            if (value !== undefined && value !== null)
                search.append(name, String(value));
        }
        const text = search.toString();
        return `${this.baseUrl}${path}${text ? `?${text}` : ""}`;
    }
    /** The decoded JSON answer of a successful call. */
    async json(method, path, options = {}) {
        const response = await this.send(method, path, options);
        return (await response.json());
    }
    /** The successful response (body unread), after retries; an AgentSignalError for any other answer. */
    async send(method, path, options = {}) {
        const { signal } = options;
        const headers = { accept: options.accept ?? "application/json" };
        if (this.#token)
            headers.authorization = `Bearer ${this.#token}`;
        let body;
        if (options.body !== undefined) {
            headers["content-type"] = "application/json";
            body = JSON.stringify(options.body);
        }
        const url = this.url(path, options.query);
        for (let attempt = 0;; attempt += 1) {
            signal?.throwIfAborted();
            let response;
            try {
                response = await this.#fetch(url, { method, headers, body, signal });
            }
            catch (error) {
                if (signal?.aborted || isAbortError(error))
                    throw error;
                if (attempt >= this.maxRetries) {
                    throw new AgentSignalError({
                        status: 0,
                        code: "network_error",
                        message: `${method} ${path} failed before any answer: ${describe(error)}`,
                        cause: error,
                    });
                }
                await sleep(backoffMs(attempt), signal);
                continue;
            }
            if (response.ok)
                return response;
            const retryAfterS = parseRetryAfter(response.headers.get("retry-after"));
            const waitMs = retryWaitMs(response.status, retryAfterS, attempt);
            if (waitMs === undefined || attempt >= this.maxRetries) {
                throw await errorFromResponse(response, retryAfterS);
            }
            await response.body?.cancel().catch(() => undefined); // let the connection go back to the pool
            await sleep(waitMs, signal);
        }
    }
}
/** How long to wait before retrying an answer with `status`, or undefined when it is not retried. */
function retryWaitMs(status, retryAfterS, attempt) {
    if (status !== 429 && status !== 503)
        return undefined;
    if (retryAfterS !== undefined)
        return retryAfterS <= MAX_RETRY_AFTER_S ? retryAfterS * 1000 : undefined;
    return status === 503 ? backoffMs(attempt) : undefined;
}
/** `Retry-After` in seconds: a number of seconds, or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value, nowMs = Date.now()) {
    if (value === null)
        return undefined;
    const text = value.trim();
    if (/^\d+(\.\d+)?$/.test(text))
        return Number(text);
    const at = Date.parse(text);
    return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - nowMs) / 1000));
}
/** Exponential backoff with jitter: half of the step is fixed, half random. */
export function backoffMs(attempt) {
    const step = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt);
    return step / 2 + Math.random() * (step / 2);
}
/** Resolves after `ms`; rejects with the signal's reason as soon as it aborts. */
export function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted) {
            reject(signal.reason);
            return;
        }
        const onAbort = () => {
            clearTimeout(timer);
            reject(signal?.reason);
        };
        const timer = setTimeout(() => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
        }, ms);
        signal?.addEventListener("abort", onAbort, { once: true });
    });
}
export function isAbortError(error) {
    return error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError");
}
function describe(error) {
    if (error instanceof Error) {
        const cause = error.cause;
        return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
    }
    return String(error);
}
/**
 * A path segment: ids may hold `/`, `:`, `#`, `+` and the like, all percent-encoded. An id of `.` or `..` is
 * refused: URL parsing removes such a segment even percent-encoded, so the call would reach another route.
 */
export function segment(value) {
    if (typeof value !== "string" || value === "")
        throw new TypeError("AgentSignal: an id must be a non-empty string");
    if (value === "." || value === "..")
        throw new TypeError(`AgentSignal: ${JSON.stringify(value)} cannot be an id in a URL path`);
    return encodeURIComponent(value);
}
