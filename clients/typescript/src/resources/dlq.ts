/** `client.dlq`: the dead-letter list, redrive (as they were, or with edited payloads) and discard. */
import type { Http, RequestOptions } from "../http.js";
import type { Discarded, DlqPage, DlqQuery, Redriven, RedriveEdit } from "../types.js";

/** Every dead event at once, instead of a list of ids. */
export interface AllDead {
  all: true;
}

export class Dlq {
  readonly #http: Http;

  constructor(http: Http) {
    this.#http = http;
  }

  /** Dead events, latest death first (`state: "discarded"`: the discarded ones, with reason and time). */
  async list(query: DlqQuery = {}, options?: RequestOptions): Promise<DlqPage> {
    return this.#http.json<DlqPage>("GET", "/v1/dlq", { query: { ...query }, signal: options?.signal });
  }

  /**
   * Requeue dead events at their scope's tail: ids (`["ev_1", …]`), edits (`[{eventId, payload}, …]`: each
   * payload is validated like a new event's, and a 422 names `events[i].payload.<field>`), or `{all: true}`.
   * Ids that are unknown or not dead come back in `notDead`.
   */
  async redrive(target: readonly string[] | readonly RedriveEdit[] | AllDead, options?: RequestOptions): Promise<Redriven> {
    let body: unknown;
    if (!Array.isArray(target)) body = { all: true };
    else if (target.length > 0 && typeof target[0] === "object") body = { events: target };
    else body = { eventIds: target };
    return this.#http.json<Redriven>("POST", "/v1/dlq/redrive", { body, signal: options?.signal });
  }

  /** Take dead events out of the DLQ, kept as audit records with `reason` (`GET /v1/dlq?state=discarded`). */
  async discard(target: readonly string[] | AllDead, reason?: string, options?: RequestOptions): Promise<Discarded> {
    const body: Record<string, unknown> = Array.isArray(target) ? { eventIds: target } : { all: true };
    if (reason !== undefined) body.reason = reason;
    return this.#http.json<Discarded>("POST", "/v1/dlq/discard", { body, signal: options?.signal });
  }
}
