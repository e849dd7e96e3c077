export class Tokens {
    #http;
    constructor(http) {
        this.#http = http;
    }
    /**
     * A token that reads and changes only `userId`'s data and stamps its events with that user; hand it to that
     * user's browser or device as `new AgentSignal({ baseUrl, token })`. `expiresAt` is in Unix milliseconds.
     */
    async create(request, options) {
        const body = { userId: request.userId };
        if (request.ttlS !== undefined)
            body.ttlS = request.ttlS;
        return this.#http.json("POST", "/v1/tokens", { body, signal: options?.signal });
    }
}
