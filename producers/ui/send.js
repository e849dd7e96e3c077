// Send (#/send): a form that sends one test event. Picking a source type fills the form from that type's
// example (examples.js); the payload is checked as JSON before anything is sent, and the new run is followed
// live until it is done or dead. Replaying a finished run as a new one is on its run page (runs.js).
"use strict";

function freshSourceId(sourceType) {
  return `ui-${sourceType.replace(/[^A-Za-z0-9]+/g, "-")}-${Date.now().toString(36)}`;
}

// The example's own id, wherever it appears in its payload (a messageId, say), becomes the new sourceId, so
// each send is a new message rather than a duplicate of the example.
function renamed(value, from, to) {
  if (typeof value === "string") return value === from ? to : value;
  if (Array.isArray(value)) return value.map((v) => renamed(v, from, to));
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, renamed(v, from, to)]));
  return value;
}

function sendPage() {
  const types = [...new Set([...Object.keys(SOURCE_EXAMPLES), ...DECLARED_SOURCE_TYPES])];
  const first = hashParams().sourceType || "agent.user.message";
  const form = el(
    "form",
    { class: "send-form", "aria-label": "Send a test event", novalidate: true },
    el("label", {}, "Source type", el("input", { name: "sourceType", list: "send-source-types", required: true, value: first, autocomplete: "off" })),
    el("datalist", { id: "send-source-types" }, types.map((t) => el("option", { value: t }, SOURCE_EXAMPLES[t] ? "example" : ""))),
    el("label", {}, "Source id", el("input", { name: "sourceId", required: true })),
    el("label", {}, "User", el("input", { name: "userId" })),
    el("label", {}, "Agent", el("input", { name: "agentId" })),
    el("label", {}, "Scope (empty: derived from the payload)", el("input", { name: "scopeKey" })),
    el("label", { class: "wide" }, "Payload (JSON object)", el("textarea", { name: "payload", rows: 12, spellcheck: "false" })),
    el("p", { class: "check", role: "status", "data-testid": "payload-check" }),
    el("div", { class: "bar" }, el("button", { type: "submit" }, "Send"), el("button", { type: "button", class: "secondary", "data-action": "example" }, "Reset to the example")),
  );
  const result = el("div", { "data-testid": "send-result" });
  main().replaceChildren(
    el("h2", {}, "Send a test event"),
    el("p", { class: "muted" }, "Pick a source type: the form fills in with its example from examples/events.jsonl. Each send gets a new source id, so it is a new run."),
    form,
    result,
  );
  const f = form.elements;
  const check = form.querySelector(".check");
  let filledFrom = null;

  function fill(type) {
    const example = SOURCE_EXAMPLES[type];
    const sourceId = freshSourceId(type);
    f.sourceId.value = sourceId;
    f.userId.value = example ? example.userId || "" : "";
    f.agentId.value = example ? example.agentId || "" : "";
    f.scopeKey.value = example ? example.scopeKey || "" : "";
    f.payload.value = pretty(example ? renamed(example.payload || {}, example.sourceId, sourceId) : {});
    filledFrom = type;
    parsePayload();
  }

  function parsePayload() {
    try {
      const value = JSON.parse(f.payload.value);
      if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("the payload must be a JSON object");
      check.textContent = "";
      check.className = "check";
      return value;
    } catch (err) {
      check.textContent = `Payload is not valid: ${err.message}`;
      check.className = "check bad";
      return undefined;
    }
  }

  f.sourceType.addEventListener("change", () => { if (f.sourceType.value !== filledFrom) fill(f.sourceType.value.trim()); });
  f.payload.addEventListener("input", parsePayload);
  form.querySelector('[data-action="example"]').addEventListener("click", () => fill(f.sourceType.value.trim()));

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const payload = parsePayload();
    if (payload === undefined) { f.payload.focus(); return; }
    if (!f.sourceType.value.trim() || !f.sourceId.value.trim()) { check.textContent = "A source type and a source id are needed."; check.className = "check bad"; return; }
    const body = withoutEmpty({
      sourceType: f.sourceType.value.trim(),
      sourceId: f.sourceId.value.trim(),
      userId: f.userId.value.trim() || undefined,
      agentId: f.agentId.value.trim() || undefined,
      scopeKey: f.scopeKey.value.trim() || undefined,
      payload,
    });
    const button = form.querySelector('button[type="submit"]');
    button.disabled = true;
    try {
      const { body: answer } = await postJson("/v1/events", body);
      follow(answer.results[0], body);
      // the next send is a new run too: a new source id, also where the payload repeats the old one
      f.sourceId.value = freshSourceId(body.sourceType);
      f.payload.value = pretty(renamed(payload, body.sourceId, f.sourceId.value));
    } catch (err) {
      result.replaceChildren(el("p", { class: "outcome bad" }, `Not sent: ${err.message}`));
    } finally { button.disabled = false; }
  });

  // The sent event's status, live, until it is done or dead, or the API refuses to say (401, 403: a user token
  // may send its user's events but not read runs); after another failure it asks again a little later.
  let stopFollowing = () => {};
  function follow(sent, body) {
    stopFollowing(); // one followed send at a time: the one shown
    if (sent.status !== "accepted" && sent.status !== "duplicate") {
      // refused by an admission hook (gated): never stored, nothing to follow
      result.replaceChildren(el("p", { class: "outcome warn", role: "status" }, `Not stored: ${body.sourceType} ${body.sourceId} was answered ${sent.status}.`));
      return;
    }
    const status = el("span");
    const what = sent.status === "duplicate" ? "Already sent (a duplicate): the existing run is" : `Sent ${body.sourceType} ${body.sourceId} →`;
    const line = el("p", { class: "outcome ok", role: "status" }, `${what} `, runLink(sent.eventId), " ", status);
    result.replaceChildren(line);
    const show = (s) => status.replaceChildren(badge(s, { "data-testid": "sent-status" }));
    show("queued");
    let stopped = false;
    stopFollowing = () => { stopped = true; };
    teardown.push(() => { stopped = true; });
    const tick = async () => {
      if (stopped) return;
      let rec = null;
      try {
        ({ body: rec } = await api(`/v1/events/${encodeURIComponent(sent.eventId)}`, { allow: [404] }));
      } catch (err) {
        if (err.status === 401 || err.status === 403) {
          status.replaceChildren(el("span", { class: "muted", "data-testid": "sent-status" }, `not followed: reading runs is refused here (HTTP ${err.status}).`));
          return;
        }
      }
      if (rec && rec.status) show(rec.status);
      else if (rec) { // 404: gone (erased, or past the dedupe window): nothing left to follow
        status.replaceChildren(el("span", { class: "muted", "data-testid": "sent-status" }, "not found any more."));
        return;
      }
      if (!rec || !TERMINAL.has(rec.status)) setTimeout(tick, rec ? 500 : LIVE_MS);
    };
    setTimeout(tick, 300);
  }

  fill(first);
}
