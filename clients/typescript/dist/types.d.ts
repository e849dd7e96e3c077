/**
 * The public types, each taken from the generated OpenAPI types (src/generated/openapi.ts, `npm run generate`),
 * so a field the server adds or renames shows up here after regenerating. Only shapes the server documents
 * inline (a request body given as `oneOf`) are picked out of the path's body type.
 */
import type { components, paths } from "./generated/openapi.js";
type Schemas = components["schemas"];
type JsonBody<T> = T extends {
    requestBody?: infer B;
} ? NonNullable<B> extends {
    content: {
        "application/json": infer J;
    };
} ? J : never : never;
type QueryOf<T> = T extends {
    parameters: {
        query?: infer Q;
    };
} ? NonNullable<Q> : never;
type OkBody<T> = T extends {
    responses: {
        200: {
            content: {
                "application/json": infer J;
            };
        };
    };
} ? J : never;
/** What `POST /v1/events` takes: one event, or a batch. */
type SendBody = JsonBody<paths["/v1/events"]["post"]>;
/**
 * One source event as a producer sends it (`scopeKey` and `timestamp` are filled in by the server when absent).
 * `timestamp` is epoch milliseconds, an integer (`Date.now()`): seconds are taken as milliseconds (a date in
 * January 1970), and a fraction is refused (`422 invalid_field`).
 */
export type SourceEvent = Exclude<SendBody, {
    events: unknown;
}>;
export type IngestResult = Schemas["IngestResult"];
export type IngestResults = Schemas["IngestResults"];
export type EventState = Schemas["EventStatus"]["status"];
export type EventStatus = Schemas["EventStatus"];
export type EventDetail = Schemas["EventDetail"];
export type EventPage = Schemas["EventPage"];
export type Cancelled = Schemas["Cancelled"];
/** Filters of `GET /v1/events` (status, sourceType, scopeKey, userId, since, until, limit, cursor). */
export type EventFilters = QueryOf<paths["/v1/events"]["get"]>;
export type Receipt = Schemas["Receipt"];
export type ReceiptPage = Schemas["ReceiptPage"];
/** Query of `GET /v1/receipts`: `userId` (a user token may leave it out) and optionally agentId, topicId, limit, cursor, sinceCreatedAt. */
export type ReceiptQuery = QueryOf<paths["/v1/receipts"]["get"]>;
export type DlqEvent = Schemas["DlqEvent"];
export type DlqPage = Schemas["DlqPage"];
export type DlqQuery = QueryOf<paths["/v1/dlq"]["get"]>;
export type Redriven = Schemas["Redriven"];
export type Discarded = Schemas["Discarded"];
/** A dead event to redrive with an edited payload (validated like a new event's). */
export interface RedriveEdit {
    eventId: string;
    payload: Record<string, unknown>;
}
export type DeadRecord = Schemas["DeadRecord"];
export type DeadRecordsPage = Schemas["DeadRecordsPage"];
export type DeadRecordsQuery = QueryOf<paths["/v1/outbox/dead"]["get"]>;
export type RecordRef = Schemas["RecordRef"];
export type RecordsRedriven = Schemas["RecordsRedriven"];
export type ScopeRow = Schemas["ScopeRow"];
export type ScopeState = ScopeRow["state"];
export type ScopeList = Schemas["ScopeList"];
export type ScopeControl = Schemas["ScopeControl"];
export type MintedToken = Schemas["MintedToken"];
export type TokenRequest = Schemas["TokenRequest"];
/** What `PUT /v1/sessions/{id}` takes: the settings to change (merged into the session's). */
export type SessionSettingsChange = JsonBody<paths["/v1/sessions/{session_id}"]["put"]>;
export type SessionSettings = Schemas["SessionSettings"];
type WireMessage = JsonBody<paths["/v1/sessions/{session_id}/context/messages"]["post"]>["messages"][number];
/**
 * A content part: an object naming its `type` (`{type: "text", text}`, `{type: "image_url", image_url}`, …), its
 * other fields open (the server's schema says so: `additionalProperties`).
 */
export type ContentPart = Extract<WireMessage["content"], readonly unknown[]>[number];
/**
 * A context message in kimi's shape: `{role, content, tool_calls?, tool_call_id?}`; `content` a string, a list
 * of content parts, or null (an assistant message that only calls tools); other fields (`name`, `id`) are kept.
 */
export type ContextMessage = Pick<WireMessage, "role" | "tool_calls" | "tool_call_id"> & {
    content: string | ContentPart[] | null;
    [key: string]: unknown;
};
export type ContextLength = Schemas["ContextLength"];
export type ContextView = Schemas["ContextView"];
export type CheckpointCreated = Schemas["CheckpointCreated"];
/** The SendDMail tool's arguments, as the model gives them: `{message, checkpoint_id}`. */
export type DMailArguments = JsonBody<paths["/v1/sessions/{session_id}/dmail"]["post"]>;
export type DMailResult = Schemas["DMailResult"];
export type StepEnd = JsonBody<paths["/v1/sessions/{session_id}/steps/end"]["post"]>;
export type StepEndResult = Schemas["StepEndResult"];
/** The `signal` tool's types (`answer`, `blocked`, `need_approval`, …). */
export type SignalType = JsonBody<paths["/v1/sessions/{session_id}/signal"]["post"]>["type"];
export type SignalOutput = Schemas["SignalOutput"];
export type FunctionView = Schemas["FunctionView"];
export type FunctionsState = Schemas["FunctionsState"];
export type Turn = JsonBody<paths["/v1/sessions/{session_id}/turn"]["post"]>;
/** The end of an assistant turn: `nowMs?`, `lastTwoOutputsIdentical?`, `modelAskedQuestion?`. */
export type IdleInput = JsonBody<paths["/v1/sessions/{session_id}/idle"]["post"]>;
export type IdleDecision = Schemas["IdleDecision"];
/** A finished tool call: `{name, args?, output?}`. */
export type ToolCallDone = JsonBody<paths["/v1/sessions/{session_id}/tool"]["post"]>;
export type Injects = Schemas["Injects"];
export type AttentionItem = Schemas["AttentionItem"];
export type AttentionList = Schemas["AttentionList"];
/** A session's artifacts, name to content. */
export type Artifacts = OkBody<paths["/v1/sessions/{session_id}/artifacts"]["get"]>;
export type Artifact = Schemas["Artifact"];
/**
 * The answer of a call that also records its change as a source event (`signal`, `sendDMail`, `endStep`):
 * `recordError` is set (the server's `Agent-Signal-Record-Error`) when the change was made but its record was
 * refused (`quota_exceeded`, `inbox_full`, `store_unavailable`, `session_gone`, …); absent otherwise.
 */
export type Recorded<T> = T & {
    recordError?: string;
};
export type Memory = Schemas["Memory"];
export type MemoryList = Schemas["MemoryList"];
/** `userId`: required with an API key; a user token's own user when absent. */
export type MemoryQuery = QueryOf<paths["/v1/memories"]["get"]>;
export type Rollback = Schemas["Rollback"];
export type RollbackStatus = Rollback["status"];
/** The rollback's 404 body: the error, plus `status: "not_found"` (in `AgentSignalError.body`). */
export type RollbackNotFound = Schemas["RollbackNotFound"];
export type RollbackQuery = QueryOf<paths["/v1/receipts/{receipt_id}/rollback"]["post"]>;
/** Every error answer: `{"error": {"code", "message", "field"}}`. */
export type ErrorBody = Schemas["ErrorBody"];
export {};
