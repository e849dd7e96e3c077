/**
 * The request core every resource shares: URL building, the bearer header, JSON bodies, and retries.
 *
 * Retried: `429` and `503` answers, a gateway's `502` and `504`, and failures before any answer (network errors),
 * at most `maxRetries` times. The wait is the answer's `Retry-After` (seconds, or an HTTP date); a `503`, `502`,
 * `504` or a network error without one waits an exponential backoff with jitter (0.25-0.5 s, 0.5-1 s, 1-2 s, … at
 * most 8 s), and so does an answer whose `Retry-After` is 0 or a date already past. A `429` without
 * `Retry-After` is not retried: the server sends one wherever waiting frees the limit, so its absence means
 * waiting will not help (a storage quota). A `Retry-After` over {@link MAX_RETRY_AFTER_S} is not waited for either: the error carries
 * it as `retryAfterS` for the caller to decide.
 *
 * A network failure may come after the server acted (the answer was lost), so it is retried only where a repeat
 * answers what the first call would have: reads, and sends (the server dedupes them; what the lost attempt stored
 * answers `duplicate`), and calls marked `replayable` (a session's settings, a receipt's rollback: see each
 * resource). Other calls (cancel, pause, resume, redrive, discard, minting a token, a session call that acts anew:
 * a repeat would answer `changed: false` or `notDead`, mint a second token, or append or signal twice) are
 * retried only when nothing reached the server (the connection was refused, or the name did not resolve);
 * otherwise the `network_error` is thrown with
 * `requestSent: true` for the caller to decide. The same holds for a `503`: the server answers
 * `store_unavailable` when its store failed partway through a call (a redrive of ten events may have redriven
 * three), so such a call is retried on a `503` only when the answer says it was refused before any work (`busy`,
 * `too_many_connections`); any other `503` is thrown with its `retryAfterS`. A `502` or `504` comes from a proxy in
 * front of the server, which may have passed the request on before it gave up: like a network failure after
 * sending, it is retried only where a repeat is safe, and thrown at once elsewhere. A success whose body breaks off or
 * is not JSON throws `AgentSignalError` too (`network_error` or `invalid_response`, with the status).
 *
 * An attempt whose answer has not begun within `timeoutMs` (default 30 s; `0`: none) is abandoned like a network
 * failure after the request was sent: retried where a network failure would be, else thrown as a `network_error`
 * with `requestSent: true`. The caller's `signal` still bounds the whole call, waits included.
 *
 * A `baseUrl` holding a user name or password is refused: fetch refuses such a URL and its error would carry
 * the password into the message. One with a query or a fragment is refused too: every path would land inside it
 * (the error shows it without them). A `token` that is not visible ASCII (a CR, an LF, a trailing newline) is
 * refused without being quoted, and no error quotes the token. A body holding `NaN` or `Infinity` is refused
 * before sending (`invalid_json`, status 0), not sent as `null`.
 */
import { AgentSignalError, errorFromResponse } from "./errors.js";

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

/** The codes of a `503` the server answers before it acts on a request: safe to retry whatever the call. */
const REFUSED_BEFORE_ACTING = new Set(["busy", "too_many_connections"]);

/** A proxy's answers for a server that is down or too slow: the request may have reached it. */
const GATEWAY_FAILURES = new Set([502, 504]);

/** Node's codes for failures before any byte reached the server: safe to retry whatever the call. */
const NOTHING_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"]);

/** The longest `Retry-After` the client waits by itself, in seconds. */
export const MAX_RETRY_AFTER_S = 60;
const BACKOFF_BASE_MS = 500;
const BACKOFF_CAP_MS = 8_000;

export interface HttpOptions {
  baseUrl: string;
  token?: string | undefined;
  fetch?: FetchLike | undefined;
  maxRetries?: number | undefined;
  timeoutMs?: number | undefined;
}

/** The default {@link HttpOptions.timeoutMs}: how long one attempt waits for its answer to begin. */
export const TIMEOUT_MS = 30_000;
/** The longest timer `setTimeout` keeps (a longer one fires at once): the bound of every `…Ms` option. */
export const MAX_TIMER_MS = 2_147_483_647;

export class Http {
  readonly baseUrl: string;
  readonly maxRetries: number;
  readonly timeoutMs: number;
  readonly #token: string | undefined;
  readonly #fetch: FetchLike;

  constructor(options: HttpOptions) {
    if (!options || typeof options.baseUrl !== "string") {
      throw new TypeError("AgentSignal: baseUrl is required (for example http://127.0.0.1:8000)");
    }
    let parsed: URL | undefined;
    try {
      parsed = new URL(options.baseUrl);
    } catch {
      parsed = undefined;
    }
    if (parsed === undefined || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
      throw new TypeError(`AgentSignal: baseUrl must be an http(s) URL (got ${shownUrl(options.baseUrl)})`);
    }
    if (parsed.username || parsed.password) {
      // not echoed: it holds a password
      throw new TypeError("AgentSignal: baseUrl must not hold a user name or password; pass options.token");
    }
    if (parsed.search || parsed.hash || options.baseUrl.includes("?") || options.baseUrl.includes("#")) {
      // shown without them: a query is where a key such as `?api_key=…` would sit
      throw new TypeError(
        `AgentSignal: baseUrl must not hold a query or a fragment: every path would land inside it (got ${shownUrl(options.baseUrl)}, its query and fragment not shown)`,
      );
    }
    this.baseUrl = parsed.href.replace(/\/+$/, "");
    const retries = options.maxRetries ?? 3;
    if (!Number.isInteger(retries) || retries < 0) {
      throw new TypeError(`AgentSignal: maxRetries must be a whole number >= 0 (got ${String(options.maxRetries)})`);
    }
    this.maxRetries = retries;
    const timeout = options.timeoutMs ?? TIMEOUT_MS;
    if (!Number.isFinite(timeout) || timeout < 0 || timeout > MAX_TIMER_MS) {
      throw new TypeError(
        `AgentSignal: timeoutMs must be a number of ms from 0 to ${MAX_TIMER_MS} (got ${String(options.timeoutMs)})`,
      );
    }
    this.timeoutMs = timeout;
    this.#token = checkedToken(options.token);
    const given = options.fetch;
    if (given) {
      this.#fetch = given;
    } else if (typeof globalThis.fetch === "function") {
      // Called through globalThis each time: some browsers refuse a fetch detached from its window.
      this.#fetch = (input, init) => globalThis.fetch(input, init);
    } else {
      throw new TypeError("AgentSignal: no global fetch here; pass options.fetch");
    }
  }

  url(path: string, query?: Record<string, QueryValue>): string {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) search.append(name, String(value));
    }
    const text = search.toString();
    return `${this.baseUrl}${path}${text ? `?${text}` : ""}`;
  }

  /**
   * The decoded JSON answer of a successful call. A body that breaks off is read again for a replayable call,
   * within the same `maxRetries` as the answers before it (at most `maxRetries + 1` requests in all); else, or
   * past them, it is a `network_error`; a body that is not JSON an `invalid_response`. Both carry the answer's
   * status.
   */
  async json<T>(method: string, path: string, options: CallOptions = {}): Promise<T> {
    const replayable = options.replayable ?? method === "GET";
    for (let next = 0; ; ) {
      const { response, attempt, release } = await this.#send(method, path, options, next);
      let text: string;
      try {
        text = await response.text();
      } catch (error) {
        release();
        if (options.signal?.aborted || isAbortError(error)) throw error;
        if (replayable && attempt < this.maxRetries) {
          await sleep(backoffMs(attempt), options.signal);
          next = attempt + 1;
          continue;
        }
        throw new AgentSignalError({
          status: response.status,
          code: "network_error",
          message: `${method} ${path} answered ${response.status} but its body broke off: ${this.#redact(describe(error))}`,
          cause: this.#quotesToken(error) ? undefined : error,
          requestSent: true,
        });
      }
      release();
      let answer: T;
      try {
        answer = JSON.parse(text) as T;
      } catch (error) {
        // not the server's answer (a proxy's page, a captive portal): one may echo the Authorization header
        const shown = this.#redact(text);
        const excerpt = shown.trim().slice(0, 200);
        throw new AgentSignalError({
          status: response.status,
          code: "invalid_response",
          message: `${method} ${path} answered ${response.status} with a body that is not JSON${excerpt ? `: ${excerpt}` : " (empty)"}`,
          body: shown || undefined,
          // JSON.parse's message quotes the text where it failed, which may be the start of the token
          cause: shown === text ? error : parseFailure(shown),
        });
      }
      options.onHeaders?.(response.headers);
      return answer;
    }
  }

  /**
   * `text` with the token blanked out: a fetch that refuses a header quotes its value in its message, and a
   * proxy's page may echo the request's headers.
   */
  #redact(text: string): string {
    return this.#token ? text.split(this.#token).join("[token]") : text;
  }

  /** {@link errorFromResponse}, a proxy's page quoted without the token. */
  #errorFrom(response: Response, retryAfterS: number | undefined): Promise<AgentSignalError> {
    return errorFromResponse(response, retryAfterS, (text) => this.#redact(text));
  }

  /** True when `error`'s message, or a cause's, quotes the token: such an error is not kept as a `cause`. */
  #quotesToken(error: unknown): boolean {
    for (let at: unknown = error, depth = 0; at !== undefined && depth < 4; depth += 1) {
      const text = at instanceof Error ? `${at.message}\n${at.stack ?? ""}` : String(at);
      if (this.#redact(text) !== text) return true;
      at = at instanceof Error ? (at as { cause?: unknown }).cause : undefined;
    }
    return false;
  }

  #attempt(signal: AbortSignal | undefined): AttemptSignal {
    if (this.timeoutMs === 0) return { signal, timedOut: () => false, answered: () => undefined, release: () => undefined };
    const controller = new AbortController();
    let timedOut = false;
    const onAbort = (): void => controller.abort(signal?.reason);
    if (signal?.aborted) controller.abort(signal.reason);
    else signal?.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort(new DOMException("no answer within timeoutMs", "TimeoutError"));
    }, this.timeoutMs);
    return {
      signal: controller.signal,
      timedOut: () => timedOut,
      answered: () => clearTimeout(timer),
      release: () => signal?.removeEventListener("abort", onAbort),
    };
  }

  /**
   * The successful response (body unread), after retries; an AgentSignalError for any other answer. The
   * caller's signal stays tied to the body (aborting it ends the read): pass a signal that lives no longer
   * than the response, as the receipt stream's per-connection one does.
   */
  async send(method: string, path: string, options: CallOptions = {}): Promise<Response> {
    return (await this.#send(method, path, options, 0)).response;
  }

  /** `send`, its attempts counted from `firstAttempt` (a caller's earlier tries spent part of the budget); the
   * response with the attempt that got it. */
  async #send(
    method: string,
    path: string,
    options: CallOptions,
    firstAttempt: number,
  ): Promise<{ response: Response; attempt: number; release: () => void }> {
    const { signal } = options;
    const headers: Record<string, string> = { accept: options.accept ?? "application/json" };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = encodeBody(options.body);
    }
    const url = this.url(path, options.query);
    for (let attempt = firstAttempt; ; attempt += 1) {
      signal?.throwIfAborted();
      let response: Response;
      const attemptSignal = this.#attempt(signal);
      try {
        response = await this.#fetch(url, { method, headers, body, signal: attemptSignal.signal });
      } catch (error) {
        attemptSignal.release();
        const timedOut = attemptSignal.timedOut();
        if (signal?.aborted || (isAbortError(error) && !timedOut)) throw error;
        const sent = timedOut || !nothingSent(error);
        if (attempt >= this.maxRetries || (sent && !(options.replayable ?? method === "GET"))) {
          throw new AgentSignalError({
            status: 0,
            code: "network_error",
            message: `${method} ${path} failed before any answer: ${timedOut ? `no answer within ${this.timeoutMs} ms` : this.#redact(describe(error))}${
              sent && attempt < this.maxRetries ? " (not retried: the server may have acted on it)" : ""
            }`,
            cause: this.#quotesToken(error) ? undefined : error,
            requestSent: sent,
          });
        }
        await sleep(backoffMs(attempt), signal);
        continue;
      } finally {
        attemptSignal.answered();
      }
      if (response.ok) return { response, attempt, release: attemptSignal.release };
      const retryAfterS = parseRetryAfter(response.headers.get("retry-after"));
      const waitMs = retryWaitMs(response.status, retryAfterS, attempt);
      // an error's body is read whole (or cancelled) while the caller's signal can still end a read that stalls
      try {
        if (waitMs === undefined || attempt >= this.maxRetries) {
          const error = await this.#errorFrom(response, retryAfterS);
          signal?.throwIfAborted(); // an abort that ended the body's read is the call's answer
          throw error;
        }
        const replayable = options.replayable ?? method === "GET";
        if (GATEWAY_FAILURES.has(response.status) && !replayable) {
          // the proxy may have passed the request on before it gave up: a repeat may act twice
          const error = await this.#errorFrom(response, retryAfterS);
          signal?.throwIfAborted();
          throw error;
        }
        if (response.status === 503 && !replayable) {
          // the store may have failed partway through: retried only when the server acted on nothing
          const error = await this.#errorFrom(response, retryAfterS);
          signal?.throwIfAborted();
          if (!REFUSED_BEFORE_ACTING.has(error.code)) throw error;
        } else {
          await response.body?.cancel().catch(() => undefined); // let the connection go back to the pool
        }
      } finally {
        attemptSignal.release();
      }
      await sleep(waitMs, signal);
    }
  }
}

/**
 * One attempt's signal: the caller's, and `timeoutMs` until `answered()` (the answer began, or it failed). The
 * caller's signal goes on aborting the answer's body until `release()` (the body was read).
 */
interface AttemptSignal {
  signal: AbortSignal | undefined;
  timedOut: () => boolean;
  answered: () => void;
  release: () => void;
}

/** How long to wait before retrying an answer with `status`, or undefined when it is not retried. */
function retryWaitMs(status: number, retryAfterS: number | undefined, attempt: number): number | undefined {
  if (status !== 429 && status !== 503 && !GATEWAY_FAILURES.has(status)) return undefined;
  if (retryAfterS === undefined) return status === 429 ? undefined : backoffMs(attempt);
  if (retryAfterS > MAX_RETRY_AFTER_S) return undefined;
  // `Retry-After: 0` (or a date already past, read as 0) would send every retry at once, as fast as the server
  // answers (and all of a user's streams together): such a wait is the backoff instead
  return retryAfterS > 0 ? retryAfterS * 1000 : backoffMs(attempt);
}

/** `Retry-After` in seconds: a number of seconds, or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, nowMs: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  // an HTTP date names its weekday first: "Wed, 21 Oct 2015 07:28:00 GMT", and the older forms a recipient must
  // read, "Wednesday, 21-Oct-15 07:28:00 GMT" and "Wed Oct 21 07:28:00 2015"; anything else is unreadable
  // (Date.parse reads "-1" as a year)
  if (!/^[A-Za-z]{3,9}[, ]/.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - nowMs) / 1000));
}

/** What a token may hold: visible ASCII, what an API key and a user token (a JWT) are made of. */
const HEADER_TOKEN = /^[\x21-\x7e]+$/;

/**
 * `token` as the header carries it (undefined for none). One holding anything but visible ASCII is refused here,
 * without quoting it: fetch would refuse the header only when sending, quoting the whole value (a secret) in
 * its error, which would then read as a network failure and be retried. A trailing newline (a key read from a
 * file) is refused too, not trimmed: what is sent is what was given.
 */
function checkedToken(token: string | undefined): string | undefined {
  if (!token) return undefined;
  if (typeof token !== "string") throw new TypeError("AgentSignal: token must be a string");
  if (!HEADER_TOKEN.test(token)) {
    throw new TypeError(
      "AgentSignal: token must be a printable header value: visible ASCII only (no CR, LF, space or other control characters; a trailing newline counts)",
    );
  }
  return token;
}

/**
 * A baseUrl as an error shows it: without its query or fragment, where a key such as `?api_key=…` sits, nor
 * anything up to an `@` (a password).
 */
function shownUrl(text: string): string {
  const head = text.split(/[?#]/, 1)[0] ?? "";
  const at = head.lastIndexOf("@");
  return JSON.stringify(at < 0 ? head : `…${head.slice(at)}`);
}

/**
 * `body` as JSON, or an `invalid_json` AgentSignalError (status 0: nothing is sent) naming the first number JSON
 * has no form for: JSON.stringify would send `NaN`, `Infinity` and `-Infinity` as `null`, and the server refuses
 * them with a 422, as the Python client does before sending. The field is a path in the errors' style
 * (`payload.score`, `events[1].payload.x`); JSON.stringify's own walk finds it, so what `toJSON` makes counts.
 */
function encodeBody(body: unknown): string {
  const paths = new Map<object, string>(); // each object and array met, by its path
  return JSON.stringify(body, function (this: object, key: string, value: unknown): unknown {
    const path = pathOf(paths.get(this), key, Array.isArray(this));
    const number = value instanceof Number ? value.valueOf() : value;
    if (typeof number === "number" && !Number.isFinite(number)) {
      throw new AgentSignalError({
        status: 0,
        code: "invalid_json",
        field: path || undefined,
        message: `${path ? `${path} is` : "the body is"} ${String(number)}, which is not JSON (numbers must be finite: no NaN or Infinity); nothing was sent`,
      });
    }
    if (typeof value === "object" && value !== null) paths.set(value, path);
    return value;
  });
}

/** The path of `key` in a holder found at `holder` (undefined: the wrapper JSON.stringify puts the body in). */
function pathOf(holder: string | undefined, key: string, inArray: boolean): string {
  if (holder === undefined) return "";
  if (inArray) return `${holder}[${key}]`;
  return holder ? `${holder}.${key}` : key;
}

/** Exponential backoff with jitter: half of the step is fixed, half random. */
export function backoffMs(attempt: number): number {
  const step = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt);
  return step / 2 + Math.random() * (step / 2);
}

/** Resolves after `ms`; rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
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

export function isAbortError(error: unknown): boolean {
  return error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError");
}

/**
 * True when `error` (fetch's, or its `cause`) says no byte reached the server: Node's connection codes, or
 * undici's `bad port` (a port the Fetch standard blocks, such as 1 or 6667, refused before any connection).
 */
export function nothingSent(error: unknown): boolean {
  for (let at: unknown = error, depth = 0; at instanceof Error && depth < 4; depth += 1) {
    const code = (at as { code?: unknown }).code;
    if (typeof code === "string" && NOTHING_SENT.has(code)) return true;
    if (at.message === "bad port") return true;
    at = (at as { cause?: unknown }).cause;
  }
  return false;
}

/** The error JSON.parse throws for `text` (undefined if it parses). */
function parseFailure(text: string): unknown {
  try {
    JSON.parse(text);
    return undefined;
  } catch (error) {
    return error;
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}

/**
 * A path segment: ids may hold `/`, `:`, `#`, `+` and the like, all percent-encoded. An id of `.` or `..` is
 * refused: URL parsing removes such a segment even percent-encoded, so the call would reach another route.
 */
export function segment(value: string): string {
  if (typeof value !== "string" || value === "") throw new TypeError("AgentSignal: an id must be a non-empty string");
  if (value === "." || value === "..") throw new TypeError(`AgentSignal: ${JSON.stringify(value)} cannot be an id in a URL path`);
  return encodeURIComponent(value);
}
