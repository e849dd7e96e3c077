/** `client.receipts`: list a user's receipts, stream new ones live over server-sent events, and undo a skill update. */
import { segment, type Http, type RequestOptions } from "../http.js";
import type { Receipt, ReceiptPage, ReceiptQuery, Rollback, RollbackQuery } from "../types.js";
import { ReceiptStream, type ReceiptStreamOptions } from "./receipt_stream.js";

export class Receipts {
  readonly #http: Http;

  constructor(http: Http) {
    this.#http = http;
  }

  /** Receipts newest first (`limit` 1..50, default 20); pass the answer's `cursor` back for the next page. */
  async list(query: ReceiptQuery, options?: RequestOptions): Promise<ReceiptPage> {
    return this.#http.json<ReceiptPage>("GET", "/v1/receipts", { query: { ...query }, signal: options?.signal });
  }

  /**
   * New receipts as they are written (never one written before the stream began), until `signal` aborts (the
   * loop then ends without an error) or the consumer stops iterating. `userId` may be left out with a user token
   * (the token's user), as in `list`. When iteration starts, one list of the receipts already there comes first
   * (so that no catch-up yields them), then the connection; `opened` resolves once the server has subscribed.
   * A `resync` from the server (it fell behind, or lost its store) and a dropped connection are caught up with
   * `GET /v1/receipts`, so no receipt is missed or repeated.
   */
  stream(options: ReceiptStreamOptions = {}): ReceiptStream {
    return new ReceiptStream(this.#http, options, (query, signal) => this.list(query, { signal }));
  }

  /**
   * Undo the skill update a receipt records (LobeHub's receipt rollback) → `{status, receipt}`: `rolled_back`
   * (the document's previous version restored), `conflict` (the document changed since), `failed`, or
   * `unsupported` (not a skill update); the status is kept on the receipt (`metadata.rollbackStatus`). The
   * receipt is a user token's own user's, else `userId`'s; a key without `userId` is answered when one user has
   * a receipt with this id (else `409 ambiguous_receipt_id`, `field: "userId"`). No such receipt, or not the
   * caller's: `404 not_found`, with `status: "not_found"` in the error's `body`. Needs the `operate` grant (an
   * operate or admin key, or a user token). Retried after a lost answer: the server answers a repeated undo
   * `rolled_back` again and changes nothing.
   */
  async rollback(receiptId: string, query: RollbackQuery = {}, options?: RequestOptions): Promise<Rollback> {
    return this.#http.json<Rollback>("POST", `/v1/receipts/${segment(receiptId)}/rollback`, {
      query: { ...query },
      signal: options?.signal,
      replayable: true,
    });
  }
}

export type { Receipt, ReceiptStream, ReceiptStreamOptions, Rollback };
