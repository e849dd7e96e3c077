/**
 * The one error type the client throws for an answer it could not use.
 *
 * The server answers every error as `{"error": {"code", "message", "field"}}`; those three are copied here with
 * the HTTP status and, when the server sent `Retry-After`, the seconds it asked to wait. A failure before any
 * answer (the network, DNS, a refused connection) has `status` 0 and `code` `"network_error"`, with the
 * original error as `cause` (left out when it quotes the token); `requestSent` then says whether the request may
 * have reached the server. A body the client will not send (a `NaN` or `Infinity` in it) is `invalid_json` with
 * status 0 and the `field` it is in. A success whose body broke off is a `network_error` with its status; one
 * whose body is not JSON an `invalid_response`. An aborted call rejects with the signal's own reason (an
 * `AbortError`), not this.
 */
export class AgentSignalError extends Error {
    /** The HTTP status, or 0 when no answer came. */
    status;
    /** The server's stable, machine-readable reason (`invalid_field`, `not_found`, `rate_limited`, …). */
    code;
    /** The offending field as a dotted path (`events[1].sourceId`), when the server named one. */
    field;
    /** The server's `Retry-After`, in seconds, when it sent one. */
    retryAfterS;
    /** The whole decoded body, for extras such as the `candidates` of a 409 `ambiguous_source_id`. */
    body;
    /**
     * For a `network_error`: false when nothing reached the server (the connection was refused, the name did not
     * resolve), true when the server may have acted on the request though its answer was lost.
     */
    requestSent;
    constructor(init) {
        super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
        this.name = "AgentSignalError";
        this.status = init.status;
        this.code = init.code;
        if (init.field != null)
            this.field = init.field;
        if (init.retryAfterS !== undefined)
            this.retryAfterS = init.retryAfterS;
        if (init.body !== undefined)
            this.body = init.body;
        if (init.requestSent !== undefined)
            this.requestSent = init.requestSent;
    }
}
/**
 * The error for a non-2xx `response` (its body is read here). A body that is not the server's error shape (a
 * proxy's page) is quoted through `redact`, in the message's excerpt and as `body`: such a page may echo the
 * request's `Authorization` header, and the error is made to be logged.
 */
export async function errorFromResponse(response, retryAfterS, redact = (text) => text) {
    const text = await response.text().catch(() => "");
    let body;
    try {
        body = text ? JSON.parse(text) : undefined;
    }
    catch {
        body = undefined;
    }
    const error = isRecord(body) && isRecord(body.error) ? body.error : undefined;
    if (error && typeof error.code === "string" && typeof error.message === "string") {
        return new AgentSignalError({
            status: response.status,
            code: error.code,
            message: error.message,
            field: typeof error.field === "string" ? error.field : undefined,
            retryAfterS,
            body,
        });
    }
    // Not the server's error shape (a proxy's page, an empty body): keep the status and a short excerpt.
    const shown = redact(text);
    const excerpt = shown.trim().slice(0, 200);
    return new AgentSignalError({
        status: response.status,
        code: `http_${response.status}`,
        message: `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ""}${excerpt ? `: ${excerpt}` : ""}`,
        retryAfterS,
        body: shown === text ? (body ?? (text || undefined)) : decoded(shown),
    });
}
/** `text` decoded as JSON, else `text` itself (undefined when empty). */
function decoded(text) {
    try {
        return text ? JSON.parse(text) ?? text : undefined;
    }
    catch {
        return text;
    }
}
export function isRecord(value) {
    return typeof value === "object" && value !== null && !Array.isArray(value);
}
