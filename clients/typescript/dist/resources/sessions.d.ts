import { type Http, type RequestOptions } from "../http.js";
import type { Artifact, Artifacts, AttentionList, CheckpointCreated, ContextLength, ContextMessage, ContextView, DMailArguments, DMailResult, FunctionsState, IdleDecision, IdleInput, Injects, Recorded, SessionSettings, SessionSettingsChange, SignalOutput, SignalType, StepEnd, StepEndResult, ToolCallDone, Turn } from "../types.js";
export interface AppendOptions extends RequestOptions {
    /** The context's token count after these messages (kimi's `_usage` record), 0 … 10¹⁴ − 1. */
    tokenCount?: number | undefined;
}
export declare class Sessions {
    #private;
    constructor(http: Http);
    /**
     * Change the session's settings (merged: what is left out stays): `dmailEnabled`, `root`, `functions` (the
     * functions kept active, locked), `userId`, `agentId`, `topicId`; answers them all. With a user token this
     * claims a session that does not exist yet for the token's user (call it first: every other call on a session
     * that is not the user's answers 404), and `userId` may only be the token's own (`422 forbidden_user`).
     * Retried after a lost answer (the same settings again).
     */
    configure(sessionId: string, settings?: SessionSettingsChange, options?: RequestOptions): Promise<SessionSettings>;
    /** The session's settings (defaults for a session never configured). */
    settings(sessionId: string, options?: RequestOptions): Promise<SessionSettings>;
    /**
     * Append messages to the context → its `length` after them. Not retried after a lost answer (it would
     * append them twice).
     */
    append(sessionId: string, messages: readonly ContextMessage[], options?: AppendOptions): Promise<ContextLength>;
    /** The context: `{messages, nCheckpoints, tokenCount}` (checkpoint records are not messages). */
    context(sessionId: string, options?: RequestOptions): Promise<ContextView>;
    /**
     * A new checkpoint → its `checkpointId` (numbered from 0; with D-Mail on, a `CHECKPOINT n` user message is
     * added too). Not retried after a lost answer (it would make a second one).
     */
    checkpoint(sessionId: string, options?: RequestOptions): Promise<CheckpointCreated>;
    /**
     * Back to checkpoint `checkpointId` (kimi's `revert_to`: what came before it stays, it and everything after it
     * go) → the context. An unknown id is `422 unknown_checkpoint`. Not retried after a lost answer (the repeat
     * would find the checkpoint gone).
     */
    revert(sessionId: string, checkpointId: number, options?: RequestOptions): Promise<ContextView>;
    /** Everything goes; checkpoint ids restart at 0 → the (empty) context. Retried after a lost answer. */
    clear(sessionId: string, options?: RequestOptions): Promise<ContextView>;
    /**
     * Compaction: the context cleared, checkpoint 0 made (with its `CHECKPOINT 0` message when D-Mail is on), then
     * `messages` (the summary) appended → the context. Retried after a lost answer (the same context again).
     */
    compact(sessionId: string, messages: readonly ContextMessage[], options?: RequestOptions): Promise<ContextView>;
    /**
     * kimi's SendDMail tool with the model's arguments (`{message, checkpoint_id}`, passed on as they are) →
     * `{isError, output, message, brief}`: a refused D-Mail (a second one pending, an unknown checkpoint, arguments
     * that are not valid) is `isError: true`, still a success. Applied or discarded by `endStep`. `recordError` as
     * for `signal`. Not retried after a lost answer (the repeat would answer "Only one D-Mail can be sent at a time").
     */
    sendDMail(sessionId: string, args: DMailArguments, options?: RequestOptions): Promise<Recorded<DMailResult>>;
    /**
     * The end of the agent's step: a pending D-Mail is applied (`outcome: "applied"`: the context reverted to its
     * checkpoint, which is made again, and the D-Mail appended, those `messages` in the answer) or, in a root
     * session after a rejection without feedback, `"discarded"`; `"none"` when none was pending. Not retried after
     * a lost answer (the repeat would answer `"none"`).
     */
    endStep(sessionId: string, step?: StepEnd, options?: RequestOptions): Promise<Recorded<StepEndResult>>;
    /**
     * rolebox's `signal` tool → `{output}`, the tool's text; a type that is not one of the eight is `422
     * invalid_field` naming `type`, with the runtime guard's text. The change is also recorded as an
     * `agent.signal.emitted` event: `recordError` names that record's refusal when there was one (the signal
     * itself took effect). Not retried after a lost answer (a repeated signal is a second one).
     */
    signal(sessionId: string, type: SignalType, payload?: Record<string, unknown>, options?: RequestOptions): Promise<Recorded<SignalOutput>>;
    /**
     * Activate a function by name → the session's function state (an unknown name is `422 unknown_function`).
     * Retried after a lost answer (activating an active function keeps its state).
     */
    activate(sessionId: string, name: string, options?: RequestOptions): Promise<FunctionsState>;
    /**
     * End a function (its state and ledger stay) → the function state; one the session's settings lock is `409
     * function_locked` (remove it from `functions` with `configure` first). Retried after a lost answer.
     */
    deactivate(sessionId: string, name: string, options?: RequestOptions): Promise<FunctionsState>;
    /**
     * A model turn: every function's `currentTurn` advances, gates and transitions run with `user_approval` =
     * `userMessaged` → the function state. Not retried after a lost answer (the turn would count twice).
     */
    turn(sessionId: string, turn?: Turn, options?: RequestOptions): Promise<FunctionsState>;
    /**
     * The end of an assistant turn → the continuation decision `{continued, function, reason, reminder,
     * completed}` (at most one continuation). Not retried after a lost answer (a continuation counts).
     */
    idle(sessionId: string, input?: IdleInput, options?: RequestOptions): Promise<IdleDecision>;
    /**
     * A finished tool call (tool-after: observed tools, evidence, captures) → `{injects}`, the texts to add to the
     * model's next input. Not retried after a lost answer (it would be observed twice).
     */
    toolAfter(sessionId: string, call: ToolCallDone, options?: RequestOptions): Promise<Injects>;
    /** The function runtime: active functions, each function's state, artifacts, attention, the session ledger. */
    state(sessionId: string, options?: RequestOptions): Promise<FunctionsState>;
    /** The pausing signals (`need_approval`, `blocked`, `need_clarification`) whose function is still gated. */
    attention(sessionId: string, options?: RequestOptions): Promise<AttentionList>;
    /** The session's artifacts, name to content. */
    artifacts(sessionId: string, options?: RequestOptions): Promise<Artifacts>;
    /**
     * Write artifact `name` (one path segment: no `/`, not `.` or `..`) → `{name, content}`. Like `configure`, a PUT
     * with a user token claims a session no one has yet. Retried after a lost answer (the same content again).
     */
    putArtifact(sessionId: string, name: string, content: string, options?: RequestOptions): Promise<Artifact>;
}
