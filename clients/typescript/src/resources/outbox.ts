/** `client.outbox`: the outbound calls (webhooks, agent runs) that failed every attempt, and sending them again. */
import type { Http, RequestOptions } from "../http.js";
import type { DeadRecordsPage, DeadRecordsQuery, RecordRef, RecordsRedriven } from "../types.js";

/** Every dead outbound call at once, instead of a list of records. */
export interface AllDeadRecords {
  all: true;
}

export class Outbox {
  readonly #http: Http;

  constructor(http: Http) {
    this.#http = http;
  }

  /** Dead outbound calls, latest death first (`limit`, `cursor`: the previous page's). */
  async dead(query: DeadRecordsQuery = {}, options?: RequestOptions): Promise<DeadRecordsPage> {
    return this.#http.json<DeadRecordsPage>("GET", "/v1/outbox/dead", { query: { ...query }, signal: options?.signal });
  }

  /**
   * Send dead outbound calls again (pending, attempts at zero, the same idempotency key): records as `dead()` lists
   * them (`[{scopeKey, recordId}, …]`, at most 500) or `{all: true}`. One not dead, or gone, comes back in `notDead`.
   */
  async redrive(target: readonly RecordRef[] | AllDeadRecords, options?: RequestOptions): Promise<RecordsRedriven> {
    let body: unknown;
    if (Array.isArray(target)) body = { records: target.map(({ scopeKey, recordId }) => ({ scopeKey, recordId })) };
    else if (isAll(target)) body = { all: true };
    else {
      throw new TypeError("AgentSignal: outbox.redrive takes an array of {scopeKey, recordId} or {all: true}");
    }
    return this.#http.json<RecordsRedriven>("POST", "/v1/outbox/redrive", { body, signal: options?.signal });
  }
}

function isAll(target: unknown): boolean {
  if (typeof target !== "object" || target === null || target instanceof Set) return false;
  const keys = Object.keys(target);
  return keys.length === 1 && keys[0] === "all" && (target as { all: unknown }).all === true;
}
