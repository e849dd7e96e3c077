export async function enqueueAgentSignalSourceEvent(input, context) {
    const event = {
        sourceType: input.sourceType,
        sourceId: input.sourceId,
        payload: input.payload,
        timestamp: input.timestamp ?? Date.now(),
    };
    if (input.scopeKey)
        event.scopeKey = input.scopeKey;
    if (context.userId)
        event.userId = context.userId;
    if (context.agentId)
        event.agentId = context.agentId;
    if (context.workspaceId)
        event.workspaceId = context.workspaceId;
    const { results } = await context.client.events.send(event, { signal: context.signal });
    const result = results[0];
    if (!result)
        throw new TypeError("AgentSignal: the server answered no result for the event");
    const accepted = result.status === "accepted" || result.status === "duplicate";
    return {
        accepted,
        scopeKey: scopeUsed(input, context),
        workflowRunId: accepted ? result.eventId : "",
        eventId: result.eventId,
        status: result.status,
    };
}
/** The scope the server runs the event in (producers/http/routes/events.py `_own_scope` for a user token). */
function scopeUsed(input, context) {
    const user = context.client.tokenUserId;
    if (user === undefined) {
        return input.scopeKey || resolveSourceScopeKey(input.payload, context.userId, context.agentId);
    }
    const payload = { ...input.payload, userId: user }; // the server stamps the token's user on the payload
    const scope = input.scopeKey || resolveSourceScopeKey(payload, user, context.agentId);
    // worker/core/scope.py `own_scope_key`: `user:<id>`, `agent:<a>:user:<id>` and `user:<id>/…` are the user's own
    const own = scope === `user:${user}` ||
        scope.startsWith(`user:${user}/`) ||
        (scope.startsWith("agent:") && scope.endsWith(`:user:${user}`));
    return own ? scope : `user:${user}/${scope}`;
}
/**
 * The scope of an event sent without one, by the server's rule (worker/core/scope.py `derive_scope_key`): its topic,
 * else its task, else its bot thread, else its agent and user, else its user, else `fallback:global`.
 */
export function resolveSourceScopeKey(payload, userId, agentId) {
    const text = (key) => {
        const value = payload[key];
        if (typeof value === "string")
            return value !== "" ? value : undefined;
        // a whole number is read as its digits, as the server reads what JSON.stringify sends for it
        return Number.isInteger(value) && Math.abs(value) < 1e21 ? String(value) : undefined;
    };
    const topic = text("topicId");
    if (topic)
        return `topic:${topic}`;
    const task = text("taskId");
    if (task)
        return `task:${task}`;
    const [platform, application, thread] = [text("platform"), text("applicationId"), text("platformThreadId")];
    if (platform && application && thread)
        return `bot:${platform}:${application}:${thread}`;
    const agent = text("agentId") ?? (agentId || undefined);
    const user = text("userId") ?? (userId || undefined);
    if (agent && user)
        return `agent:${agent}:user:${user}`;
    if (user)
        return `user:${user}`;
    return "fallback:global";
}
