/**
 * `client.memories`: the memories self-iteration wrote for a user (the reference runner's store,
 * docs/self-iteration.md), newest first, and one by id. The server has no route that changes or deletes one:
 * `DELETE /v1/users/{userId}` (an operator's erasure) is what removes them.
 */
import { segment } from "../http.js";
export class Memories {
    #http;
    constructor(http) {
        this.#http = http;
    }
    /**
     * A user's memories, newest first. `userId` is required with an API key (`422 missing_field` without it); a
     * user token reads its own user's (it may leave `userId` out; another user's answers 404).
     */
    async list(query = {}, options) {
        return this.#http.json("GET", "/v1/memories", { query: { ...query }, signal: options?.signal });
    }
    /** One memory of the user (`userId` as for `list`); an unknown id, or another user's, is `404 not_found`. */
    async get(memoryId, query = {}, options) {
        return this.#http.json("GET", `/v1/memories/${segment(memoryId)}`, { query: { ...query }, signal: options?.signal });
    }
}
