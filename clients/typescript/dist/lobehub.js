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
        scopeKey: input.scopeKey || resolveSourceScopeKey(input.payload, context.userId, context.agentId),
        workflowRunId: accepted ? result.eventId : "",
        eventId: result.eventId,
        status: result.status,
    };
}
/**
 * The scope of an event sent without one, by the server's rule (worker/core/scope.py `derive_scope_key`): its topic,
 * else its task, else its bot thread, else its agent and user, else its user, else `fallback:global`.
 */
export function resolveSourceScopeKey(payload, userId, agentId) {
    const text = (key) => {
        const value = payload[key];
        return typeof value === "string" && value !== "" ? value : undefined;
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
