/**
 * A server-sent events parser over a fetch body (the WHATWG "event stream" format), so a stream can carry an
 * `Authorization` header, which `EventSource` cannot send.
 *
 * Lines end with CRLF, LF or CR (a CRLF split across two chunks counts once); a line starting with `:` is a
 * comment; `field: value` lines accumulate until a blank line dispatches the frame. Only the fields this client
 * reads are kept: `event`, `data` (lines joined with `\n`) and `id`.
 */
export type SseItem = {
    kind: "comment";
    text: string;
} | {
    kind: "event";
    event: string;
    data: string;
    id: string;
};
/** Every frame and comment of `body`, in order; the reader is released when the consumer stops. */
export declare function readSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseItem, void, undefined>;
/** The line and frame state machine, fed text in arbitrary pieces. */
export declare class SseParser {
    #private;
    /** The items completed by `text`; `end` flushes a last line without its line break (not its frame). */
    push(text: string, end?: boolean): Generator<SseItem, void, undefined>;
}
