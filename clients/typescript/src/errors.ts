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
  declare partial?: { redriven?: string[]; discarded?: string[]; notDead?: string[]; until?: number };

  constructor(init: {
    status: number;
    code: string;
    message: string;
    field?: string | null | undefined;
    retryAfterS?: number | undefined;
    body?: unknown;
    cause?: unknown;
    requestSent?: boolean | undefined;
  }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "AgentSignalError";
    this.status = init.status;
    this.code = init.code;
    if (init.field != null) this.field = init.field;
    if (init.retryAfterS !== undefined) this.retryAfterS = init.retryAfterS;
    if (init.body !== undefined) this.body = init.body;
    if (init.requestSent !== undefined) this.requestSent = init.requestSent;
  }
}

/**
 * The error for a non-2xx `response` (its body is read here). A body that is not the server's error shape (a
 * proxy's page) is quoted through `redact`, in the message's excerpt and as `body`: such a page may echo the
 * request's `Authorization` header, and the error is made to be logged.
 */
export async function errorFromResponse(
  response: Response,
  retryAfterS: number | undefined,
  redact: (text: string) => string = (text) => text,
): Promise<AgentSignalError> {
  const text = await response.text().catch(() => "");
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
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
function decoded(text: string): unknown {
  try {
    return text ? (JSON.parse(text) as unknown) ?? text : undefined;
  } catch {
    return text;
  }
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
