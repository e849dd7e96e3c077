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
/** What `POST /v1/events` takes: one event, or a batch. */
type SendBody = JsonBody<paths["/v1/events"]["post"]>;
/** One source event as a producer sends it (`scopeKey` and `timestamp` are filled in by the server when absent). */
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
/** Every error answer: `{"error": {"code", "message", "field"}}`. */
export type ErrorBody = Schemas["ErrorBody"];
export {};
