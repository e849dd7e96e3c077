/**
 * `client.sessions`: an agent session's tools over `/v1/sessions/{sessionId}` (docs/dmail.md and docs/api.md):
 * its settings, its context store (append, read, checkpoint, revert, clear, compact), D-Mail and the step end,
 * the `signal` tool and the function runtime (activate, deactivate, turn, idle, tool-after, state, attention,
 * artifacts). The same calls as the Python SDK's `SessionClient`.
 *
 * Retries (see http.ts): reads, and the calls whose repeat answers what the first would have (`configure`,
 * `putArtifact`, `clear`, `compact`, `activate`, `deactivate`: they set a state, so a second time sets the
 * same one), are retried after a lost answer, a gateway's 502/504 and any 503. The others act anew each time
 * (`append` appends again, `checkpoint` makes another, `revert` finds its checkpoint gone and answers 422, a
 * second `signal` or `sendDMail` is a second one, `endStep`, `turn`, `idle` and `toolAfter` advance the session
 * again): they are retried only when the server cannot have acted (nothing reached it, `503 busy`,
 * `too_many_connections`, a 429 with `Retry-After`), else the error is thrown (`requestSent: true` for a lost
 * answer): read `context()` or `state()` to learn what happened.
 *
 * A session id follows the server's rule (1-200 of `A-Z a-z 0-9 . _ : -`, not `.` or `..`), checked before
 * sending: the server routes on the decoded path, so an id holding `/` (even encoded) would reach another
 * session's route. One that breaks it is an `AgentSignalError` `invalid_id` (status 0, `field: "sessionId"`),
 * nothing sent; an artifact's name with `/`, or `.`/`..`, is `invalid_field` naming `name`, likewise.
 */
import { AgentSignalError } from "../errors.js";
import { segment, type Http, type RequestOptions } from "../http.js";
import type {
  Artifact,
  Artifacts,
  AttentionList,
  CheckpointCreated,
  ContextLength,
  ContextMessage,
  ContextView,
  DMailArguments,
  DMailResult,
  FunctionsState,
  IdleDecision,
  IdleInput,
  Injects,
  Recorded,
  SessionSettings,
  SessionSettingsChange,
  SignalOutput,
  SignalType,
  StepEnd,
  StepEndResult,
  ToolCallDone,
  Turn,
} from "../types.js";

/** The server's session id rule (sessions/ids.py), also the pattern of the path parameter in its OpenAPI document. */
const SESSION_ID = /^(?!\.\.?$)[A-Za-z0-9._:-]{1,200}$/;
const SESSION_ID_RULE = "1-200 of A-Z a-z 0-9 . _ : -, and not . or ..";

/** The answer header naming a record's refusal (producers/http/records.py). */
const RECORD_ERROR_HEADER = "agent-signal-record-error";

export interface AppendOptions extends RequestOptions {
  /** The context's token count after these messages (kimi's `_usage` record), 0 … 10¹⁴ − 1. */
  tokenCount?: number | undefined;
}

export class Sessions {
  readonly #http: Http;

  constructor(http: Http) {
    this.#http = http;
  }

  // settings

  /**
   * Change the session's settings (merged: what is left out stays): `dmailEnabled`, `root`, `functions` (the
   * functions kept active, locked), `userId`, `agentId`, `topicId`; answers them all. With a user token this
   * claims a session that does not exist yet for the token's user (call it first: every other call on a session
   * that is not the user's answers 404), and `userId` may only be the token's own (`422 forbidden_user`).
   * Retried after a lost answer (the same settings again).
   */
  async configure(sessionId: string, settings: SessionSettingsChange = {}, options?: RequestOptions): Promise<SessionSettings> {
    return this.#call<SessionSettings>("PUT", sessionId, "", { body: settings, replayable: true, options });
  }

  /** The session's settings (defaults for a session never configured). */
  async settings(sessionId: string, options?: RequestOptions): Promise<SessionSettings> {
    return this.#call<SessionSettings>("GET", sessionId, "", { options });
  }

  // the context store

  /**
   * Append messages to the context → its `length` after them. Not retried after a lost answer (it would
   * append them twice).
   */
  async append(sessionId: string, messages: readonly ContextMessage[], options?: AppendOptions): Promise<ContextLength> {
    const body: Record<string, unknown> = { messages };
    if (options?.tokenCount !== undefined) body.tokenCount = options.tokenCount;
    return this.#call<ContextLength>("POST", sessionId, "/context/messages", { body, options });
  }

  /** The context: `{messages, nCheckpoints, tokenCount}` (checkpoint records are not messages). */
  async context(sessionId: string, options?: RequestOptions): Promise<ContextView> {
    return this.#call<ContextView>("GET", sessionId, "/context", { options });
  }

  /**
   * A new checkpoint → its `checkpointId` (numbered from 0; with D-Mail on, a `CHECKPOINT n` user message is
   * added too). Not retried after a lost answer (it would make a second one).
   */
  async checkpoint(sessionId: string, options?: RequestOptions): Promise<CheckpointCreated> {
    return this.#call<CheckpointCreated>("POST", sessionId, "/context/checkpoint", { body: {}, options });
  }

  /**
   * Back to checkpoint `checkpointId` (kimi's `revert_to`: what came before it stays, it and everything after it
   * go) → the context. An unknown id is `422 unknown_checkpoint`. Not retried after a lost answer (the repeat
   * would find the checkpoint gone).
   */
  async revert(sessionId: string, checkpointId: number, options?: RequestOptions): Promise<ContextView> {
    return this.#call<ContextView>("POST", sessionId, "/context/revert", { body: { checkpointId }, options });
  }

  /** Everything goes; checkpoint ids restart at 0 → the (empty) context. Retried after a lost answer. */
  async clear(sessionId: string, options?: RequestOptions): Promise<ContextView> {
    return this.#call<ContextView>("POST", sessionId, "/context/clear", { replayable: true, options });
  }

  /**
   * Compaction: the context cleared, checkpoint 0 made (with its `CHECKPOINT 0` message when D-Mail is on), then
   * `messages` (the summary) appended → the context. Retried after a lost answer (the same context again).
   */
  async compact(sessionId: string, messages: readonly ContextMessage[], options?: RequestOptions): Promise<ContextView> {
    return this.#call<ContextView>("POST", sessionId, "/context/compact", { body: { messages }, replayable: true, options });
  }

  // D-Mail and the step end

  /**
   * kimi's SendDMail tool with the model's arguments (`{message, checkpoint_id}`, passed on as they are) →
   * `{isError, output, message, brief}`: a refused D-Mail (a second one pending, an unknown checkpoint, arguments
   * that are not valid) is `isError: true`, still a success. Applied or discarded by `endStep`. `recordError` as
   * for `signal`. Not retried after a lost answer (the repeat would answer "Only one D-Mail can be sent at a time").
   */
  async sendDMail(sessionId: string, args: DMailArguments, options?: RequestOptions): Promise<Recorded<DMailResult>> {
    return this.#recorded<DMailResult>(sessionId, "/dmail", args, options);
  }

  /**
   * The end of the agent's step: a pending D-Mail is applied (`outcome: "applied"`: the context reverted to its
   * checkpoint, which is made again, and the D-Mail appended, those `messages` in the answer) or, in a root
   * session after a rejection without feedback, `"discarded"`; `"none"` when none was pending. Not retried after
   * a lost answer (the repeat would answer `"none"`).
   */
  async endStep(sessionId: string, step: StepEnd = {}, options?: RequestOptions): Promise<Recorded<StepEndResult>> {
    return this.#recorded<StepEndResult>(sessionId, "/steps/end", step, options);
  }

  // the function runtime

  /**
   * rolebox's `signal` tool → `{output}`, the tool's text; a type that is not one of the eight is `422
   * invalid_field` naming `type`, with the runtime guard's text. The change is also recorded as an
   * `agent.signal.emitted` event: `recordError` names that record's refusal when there was one (the signal
   * itself took effect). Not retried after a lost answer (a repeated signal is a second one).
   */
  async signal(
    sessionId: string,
    type: SignalType,
    payload?: Record<string, unknown>,
    options?: RequestOptions,
  ): Promise<Recorded<SignalOutput>> {
    const body: Record<string, unknown> = { type };
    if (payload !== undefined) body.payload = payload;
    return this.#recorded<SignalOutput>(sessionId, "/signal", body, options);
  }

  /**
   * Activate a function by name → the session's function state (an unknown name is `422 unknown_function`).
   * Retried after a lost answer (activating an active function keeps its state).
   */
  async activate(sessionId: string, name: string, options?: RequestOptions): Promise<FunctionsState> {
    return this.#call<FunctionsState>("POST", sessionId, "/functions/activate", { body: { name }, replayable: true, options });
  }

  /**
   * End a function (its state and ledger stay) → the function state; one the session's settings lock is `409
   * function_locked` (remove it from `functions` with `configure` first). Retried after a lost answer.
   */
  async deactivate(sessionId: string, name: string, options?: RequestOptions): Promise<FunctionsState> {
    return this.#call<FunctionsState>("POST", sessionId, "/functions/deactivate", { body: { name }, replayable: true, options });
  }

  /**
   * A model turn: every function's `currentTurn` advances, gates and transitions run with `user_approval` =
   * `userMessaged` → the function state. Not retried after a lost answer (the turn would count twice).
   */
  async turn(sessionId: string, turn: Turn = {}, options?: RequestOptions): Promise<FunctionsState> {
    return this.#call<FunctionsState>("POST", sessionId, "/turn", { body: turn, options });
  }

  /**
   * The end of an assistant turn → the continuation decision `{continued, function, reason, reminder,
   * completed}` (at most one continuation). Not retried after a lost answer (a continuation counts).
   */
  async idle(sessionId: string, input: IdleInput = {}, options?: RequestOptions): Promise<IdleDecision> {
    return this.#call<IdleDecision>("POST", sessionId, "/idle", { body: input, options });
  }

  /**
   * A finished tool call (tool-after: observed tools, evidence, captures) → `{injects}`, the texts to add to the
   * model's next input. Not retried after a lost answer (it would be observed twice).
   */
  async toolAfter(sessionId: string, call: ToolCallDone, options?: RequestOptions): Promise<Injects> {
    return this.#call<Injects>("POST", sessionId, "/tool", { body: call, options });
  }

  /** The function runtime: active functions, each function's state, artifacts, attention, the session ledger. */
  async state(sessionId: string, options?: RequestOptions): Promise<FunctionsState> {
    return this.#call<FunctionsState>("GET", sessionId, "/state", { options });
  }

  /** The pausing signals (`need_approval`, `blocked`, `need_clarification`) whose function is still gated. */
  async attention(sessionId: string, options?: RequestOptions): Promise<AttentionList> {
    return this.#call<AttentionList>("GET", sessionId, "/attention", { options });
  }

  /** The session's artifacts, name to content. */
  async artifacts(sessionId: string, options?: RequestOptions): Promise<Artifacts> {
    return this.#call<Artifacts>("GET", sessionId, "/artifacts", { options });
  }

  /**
   * Write artifact `name` (one path segment: no `/`, not `.` or `..`) → `{name, content}`. Like `configure`, a PUT
   * with a user token claims a session no one has yet. Retried after a lost answer (the same content again).
   */
  async putArtifact(sessionId: string, name: string, content: string, options?: RequestOptions): Promise<Artifact> {
    if (typeof name !== "string" || name === "" || name.includes("/") || name === "." || name === "..") {
      throw new AgentSignalError({
        status: 0,
        code: "invalid_field",
        field: "name",
        message: `name: an artifact name is one non-empty path segment (no '/', not '.' or '..'; got ${JSON.stringify(name)}); nothing was sent`,
      });
    }
    return this.#call<Artifact>("PUT", sessionId, `/artifacts/${segment(name)}`, { body: { content }, replayable: true, options });
  }

  /** A call that records its change: its answer, with `recordError` when the server names the record's refusal. */
  async #recorded<T>(sessionId: string, rest: string, body: unknown, options?: RequestOptions): Promise<Recorded<T>> {
    const heard: { recordError?: string | null } = {};
    const answer = await this.#call<Recorded<T>>("POST", sessionId, rest, {
      body,
      options,
      onHeaders: (headers) => {
        heard.recordError = headers.get(RECORD_ERROR_HEADER);
      },
    });
    if (typeof heard.recordError === "string") answer.recordError = heard.recordError;
    return answer;
  }

  #call<T>(
    method: "GET" | "PUT" | "POST",
    sessionId: string,
    rest: string,
    call: { body?: unknown; replayable?: boolean; options?: RequestOptions | undefined; onHeaders?: (headers: Headers) => void },
  ): Promise<T> {
    return this.#http.json<T>(method, `/v1/sessions/${sessionSegment(sessionId)}${rest}`, {
      body: call.body,
      signal: call.options?.signal,
      onHeaders: call.onHeaders,
      ...(call.replayable === undefined ? {} : { replayable: call.replayable }),
    });
  }
}

/** `sessionId` as a path segment, or `invalid_id` (nothing sent) when it breaks the server's rule. */
function sessionSegment(sessionId: string): string {
  if (typeof sessionId !== "string") throw new TypeError("AgentSignal: a session id must be a string");
  if (!SESSION_ID.test(sessionId)) {
    throw new AgentSignalError({
      status: 0,
      code: "invalid_id",
      field: "sessionId",
      message: `sessionId must be ${SESSION_ID_RULE} (got ${JSON.stringify(sessionId.slice(0, 80))}); nothing was sent`,
    });
  }
  return encodeURIComponent(sessionId);
}
