/** `new AgentSignal({ baseUrl, token?, fetch?, maxRetries? })`: one object per server and credential. */
import { Http } from "./http.js";
import { Dlq } from "./resources/dlq.js";
import { Events } from "./resources/events.js";
import { Receipts } from "./resources/receipts.js";
import { Scopes } from "./resources/scopes.js";
import { Tokens } from "./resources/tokens.js";
export class AgentSignal {
    events;
    receipts;
    dlq;
    scopes;
    tokens;
    constructor(options) {
        const http = new Http(options);
        this.events = new Events(http);
        this.receipts = new Receipts(http);
        this.dlq = new Dlq(http);
        this.scopes = new Scopes(http);
        this.tokens = new Tokens(http);
    }
}
