/**
 * A server-sent events parser over a fetch body (the WHATWG "event stream" format), so a stream can carry an
 * `Authorization` header, which `EventSource` cannot send.
 *
 * Lines end with CRLF, LF or CR (a CRLF split across two chunks counts once); a line starting with `:` is a
 * comment; `field: value` lines accumulate until a blank line dispatches the frame. Only the fields this client
 * reads are kept: `event`, `data` (lines joined with `\n`) and `id`.
 */
/** Every frame and comment of `body`, in order; the reader is released when the consumer stops. */
export async function* readSse(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder("utf-8");
    const parser = new SseParser();
    try {
        for (;;) {
            const { value, done } = await reader.read();
            const text = done ? decoder.decode() : decoder.decode(value, { stream: true });
            yield* parser.push(text);
            if (done) {
                yield* parser.push("", true);
                return;
            }
        }
    }
    finally {
        await reader.cancel().catch(() => undefined);
    }
}
/** The line and frame state machine, fed text in arbitrary pieces. */
export class SseParser {
    #buffer = "";
    #skipLf = false;
    #started = false;
    #event = "";
    #data = [];
    #id = "";
    /** The items completed by `text`; `end` flushes a last line without its line break (not its frame). */
    *push(text, end = false) {
        let chunk = text;
        if (!this.#started && chunk.length > 0) {
            this.#started = true;
            if (chunk.charCodeAt(0) === 0xfeff)
                chunk = chunk.slice(1);
        }
        if (this.#skipLf && chunk.length > 0) {
            // the CR that ended the last piece was a line's end; an LF opening this piece belongs to it (a CRLF split
            // across reads), even when the LF is all this piece holds
            if (chunk.startsWith("\n"))
                chunk = chunk.slice(1);
            this.#skipLf = false;
        }
        this.#buffer += chunk;
        for (;;) {
            const at = this.#buffer.search(/[\r\n]/);
            if (at < 0)
                break;
            const line = this.#buffer.slice(0, at);
            let next = at + 1;
            if (this.#buffer[at] === "\r") {
                if (next === this.#buffer.length)
                    this.#skipLf = true; // the LF of a CRLF may come in the next chunk
                else if (this.#buffer[next] === "\n")
                    next += 1;
            }
            this.#buffer = this.#buffer.slice(next);
            const item = this.#line(line);
            if (item)
                yield item;
        }
        if (end && this.#buffer.length > 0) {
            const item = this.#line(this.#buffer);
            this.#buffer = "";
            if (item)
                yield item;
        }
    }
    #line(line) {
        if (line === "")
            return this.#dispatch();
        if (line.startsWith(":"))
            return { kind: "comment", text: line.slice(1).replace(/^ /, "") };
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event")
            this.#event = value;
        else if (field === "data")
            this.#data.push(value);
        else if (field === "id" && !value.includes("\0"))
            this.#id = value;
        return undefined;
    }
    #dispatch() {
        const event = this.#event || "message";
        const data = this.#data;
        this.#event = "";
        this.#data = [];
        if (data.length === 0)
            return undefined;
        return { kind: "event", event, data: data.join("\n"), id: this.#id };
    }
}
