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
export declare class AgentSignalError extends Error {
    /** The HTTP status, or 0 when no answer came. */
    readonly status: number;
    /** The server's stable, machine-readable reason (`invalid_field`, `not_found`, `rate_limited`, …). */
    readonly code: string;
    /** The offending field as a dotted path (`events[1].sourceId`), when the server named one. */
    readonly field?: string;
    /** The server's `Retry-After`, in seconds, when it sent one. */
    readonly retryAfterS?: number;
    /** The whole decoded body, for extras such as the `candidates` of a 409 `ambiguous_source_id`. */
    readonly body?: unknown;
    /**
     * For a `network_error`: false when nothing reached the server (the connection was refused, the name did not
     * resolve), true when the server may have acted on the request though its answer was lost.
     */
    readonly requestSent?: boolean;
    /**
     * For a `dlq.redrive`/`dlq.discard` of `{all: true}` that failed after earlier requests of its sweep acted:
     * what they did (`redriven` or `discarded`, `notDead`) and the sweep's `until`, to go on from (send
     * `{all: true}` again; the events already done are no longer dead).
     */
    partial?: {
        redriven?: string[];
        discarded?: string[];
        notDead?: string[];
        until?: number;
    };
    constructor(init: {
        status: number;
        code: string;
        message: string;
        field?: string | null | undefined;
        retryAfterS?: number | undefined;
        body?: unknown;
        cause?: unknown;
        requestSent?: boolean | undefined;
    });
}
/**
 * The error for a non-2xx `response` (its body is read here). A body that is not the server's error shape (a
 * proxy's page) is quoted through `redact`, in the message's excerpt and as `body`: such a page may echo the
 * request's `Authorization` header, and the error is made to be logged.
 */
export declare function errorFromResponse(response: Response, retryAfterS: number | undefined, redact?: (text: string) => string): Promise<AgentSignalError>;
export declare function isRecord(value: unknown): value is Record<string, unknown>;
