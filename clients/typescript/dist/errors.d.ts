/**
 * The one error type the client throws for an answer it could not use.
 *
 * The server answers every error as `{"error": {"code", "message", "field"}}`; those three are copied here with
 * the HTTP status and, when the server sent `Retry-After`, the seconds it asked to wait. A failure before any
 * answer (the network, DNS, a refused connection) has `status` 0 and `code` `"network_error"`, with the
 * original error as `cause`. An aborted call rejects with the signal's own reason (an `AbortError`), not this.
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
    constructor(init: {
        status: number;
        code: string;
        message: string;
        field?: string | null | undefined;
        retryAfterS?: number | undefined;
        body?: unknown;
        cause?: unknown;
    });
}
/** The error for a non-2xx `response` (its body is read here). */
export declare function errorFromResponse(response: Response, retryAfterS: number | undefined): Promise<AgentSignalError>;
export declare function isRecord(value: unknown): value is Record<string, unknown>;
