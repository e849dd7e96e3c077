// One example event per source type, for the Send page's form: the first event of each type in
// examples/events.jsonl, copied here so the UI needs no extra route (tests/browser/test_operator.py checks that
// the two agree; regenerate this object from the file when it changes).
// Also `emptyHint`, the curl command an empty page (Conversation, Runs, Overview) offers for a first event.
"use strict";

const SOURCE_EXAMPLES = {
  "agent.user.message": {
    "sourceType": "agent.user.message",
    "sourceId": "msg_u1",
    "userId": "u1",
    "agentId": "agt_1",
    "payload": {
      "agentId": "agt_1",
      "topicId": "tpc_1",
      "messageId": "msg_u1",
      "message": "Going forward, I prefer concise answers."
    }
  },
  "tool.outcome.completed": {
    "sourceType": "tool.outcome.completed",
    "sourceId": "tool-outcome:lobe-user-memory:addPreferenceMemory:succeeded:call_1",
    "userId": "u1",
    "agentId": "agt_1",
    "payload": {
      "agentId": "agt_1",
      "topicId": "tpc_1",
      "domainKey": "memory:user-preference",
      "tool": {
        "identifier": "lobe-user-memory",
        "apiName": "addPreferenceMemory"
      },
      "outcome": {
        "status": "succeeded",
        "summary": "Saved a preference memory."
      },
      "toolCallId": "call_1"
    }
  },
  "bot.message.merged": {
    "sourceType": "bot.message.merged",
    "sourceId": "merged_42",
    "payload": {
      "platform": "slack",
      "applicationId": "app_9",
      "platformThreadId": "th_3",
      "message": "Can someone look at build 42?"
    }
  },
  "tool.outcome.failed": {
    "sourceType": "tool.outcome.failed",
    "sourceId": "tool-outcome:unknown:unknown:failed:call_9",
    "userId": "u2",
    "agentId": "agt_2",
    "payload": {
      "agentId": "agt_2",
      "userId": "u2",
      "tool": {
        "identifier": "lobe-skill-store"
      },
      "outcome": {
        "status": "failed",
        "errorReason": "timeout"
      }
    }
  },
  "runtime.after_step": {
    "sourceType": "runtime.after_step",
    "sourceId": "op_55:after:0",
    "userId": "u1",
    "agentId": "agt_1",
    "payload": {
      "agentId": "agt_1",
      "topicId": "tpc_2",
      "operationId": "op_55",
      "stepIndex": 0
    }
  },
  "agent.nightly_review.requested": {
    "sourceType": "agent.nightly_review.requested",
    "sourceId": "nightly-review:u1:agt_1:2026-11-29",
    "userId": "u1",
    "agentId": "agt_1",
    "payload": {
      "agentId": "agt_1",
      "userId": "u1",
      "localDate": "2026-11-29",
      "requestedAt": 1764460800000,
      "reviewWindowStart": "2026-11-29T00:00:00Z",
      "reviewWindowEnd": "2026-11-30T00:00:00Z",
      "timezone": "UTC"
    }
  }
};

// The shipped plugins' source types (each plugin's Plugin.source_types under policies/; tests/unit/policies/
// test_shipped_source_types.py checks the two agree); the form's picker offers these and accepts any other.
const DECLARED_SOURCE_TYPES = [
  "agent.context.reverted", "agent.dmail.discarded", "agent.dmail.sent", "agent.execution.completed",
  "agent.execution.failed", "agent.nightly_review.requested", "agent.self_feedback_intent.declared",
  "agent.self_reflection.requested", "agent.signal.emitted", "agent.user.message", "bot.message.merged",
  "chat.request", "client.gateway.error", "client.gateway.runtime_end", "client.gateway.step_complete",
  "client.gateway.stream_start", "client.runtime.complete", "client.runtime.start", "runtime.after_step",
  "runtime.before_step", "tool.outcome.completed", "tool.outcome.failed",
];

// The "send a first event" hint of an empty page (Conversation, Runs, Overview): a curl command with an example.
function emptyHint(owner) {
  const example = JSON.stringify({
    sourceType: "agent.user.message",
    sourceId: "msg_u1",
    userId: owner.userId || "u1",
    agentId: owner.agentId || "agt_1",
    payload: { agentId: owner.agentId || "agt_1", topicId: owner.topicId || "tpc_1", messageId: "msg_u1", message: "Going forward, I prefer concise answers." },
  });
  return el("span", {}, "Send a first event: ", el("code", {}, `curl -X POST ${location.origin}/v1/events -H 'content-type: application/json' -d '${example}'`));
}
