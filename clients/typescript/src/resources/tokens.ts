/** `client.tokens`: user tokens, minted by an `operate` or `admin` key for one user of its tenant. */
import type { Http, RequestOptions } from "../http.js";
import type { MintedToken } from "../types.js";

export interface TokenCreate {
  userId: string;
  /** Seconds the token is valid (server default 3600, at most 86400). */
  ttlS?: number | undefined;
}

export class Tokens {
  readonly #http: Http;

  constructor(http: Http) {
    this.#http = http;
  }

  /**
   * A token that reads and changes only `userId`'s data and stamps its events with that user; hand it to that
   * user's browser or device as `new AgentSignal({ baseUrl, token })`. `expiresAt` is in Unix milliseconds.
   */
  async create(request: TokenCreate, options?: RequestOptions): Promise<MintedToken> {
    const body: Record<string, unknown> = { userId: request.userId };
    if (request.ttlS !== undefined) body.ttlS = request.ttlS;
    return this.#http.json<MintedToken>("POST", "/v1/tokens", { body, signal: options?.signal });
  }
}
