// One run's page (#/runs/<eventId>): payload, every attempt, the chain (drawn by chains.js), receipts, outbox
// calls and the scope's neighbours, with the actions that fit its state (cancel, redrive, discard, replay as a
// new run). Also what other pages reuse from it: `payloadEditor` (dlq.js), `withoutEmpty` (send.js) and
// `candidates` (chains.js). Helpers (el, api, livePoll, …) live in app.js.
"use strict";

// What is known about the event itself (type, ids, payload): from its record, its chain, or the dead-letter
// list, whichever has it. Dead and retrying events often have no chain yet.
async function knownEvent(rec, chain) {
  const out = { sourceType: rec.sourceType, sourceId: rec.sourceId, scopeKey: rec.scopeKey, userId: rec.userId, agentId: rec.agentId };
  let event = rec.event;
  if (typeof event === "string") { try { event = JSON.parse(event); } catch { event = null; } }
  if (event && typeof event === "object") Object.assign(out, withoutEmpty(event));
  if (rec.payload !== undefined) out.payload = rec.payload;
  if (out.payload === undefined && chain) {
    const src = chain.envelope.source;
    for (const k of ["sourceType", "sourceId", "scopeKey", "userId", "agentId", "payload"]) if (out[k] === undefined && src[k] !== undefined) out[k] = src[k];
  }
  if (out.payload === undefined && (rec.status === "dead" || rec.status === "discarded")) {
    const found = await findInDlq(rec.eventId, rec.status === "discarded" ? "discarded" : "");
    if (found) {
      let ev = found.event;
      if (typeof ev === "string") { try { ev = JSON.parse(ev); } catch { ev = null; } }
      if (ev) Object.assign(out, withoutEmpty(ev));
      else if (found.payload !== undefined) out.payload = found.payload;
    }
  }
  return out;
}

function withoutEmpty(obj) {
  return Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== undefined && v !== null));
}

async function findInDlq(eventId, state) {
  const LIMIT = 500;
  let cursor = null;
  for (let page = 0; page < 4; page += 1) { // the latest 2,000, each page after the last one's cursor
    const { body } = await api(`/v1/dlq?${qs({ state, limit: LIMIT, cursor })}`, { allow: [404, 422] });
    const events = (body && body.events) || [];
    const hit = events.find((e) => e.eventId === eventId);
    cursor = body && body.cursor;
    if (hit || !cursor) return hit || null;
  }
  return null;
}

function panel(title, ...children) {
  return el("section", { class: "panel" }, el("h3", {}, title), ...children);
}

function attemptsTable(rec) {
  const history = rec.attemptsHistory || [];
  if (!history.length) {
    return el("p", { class: "muted" }, rec.attempts ? `${rec.attempts} attempt(s); this server keeps no per-attempt history.` : "Not started yet.");
  }
  return table(
    ["#", "Started", "Finished", "Took", "Status", "Error"],
    history.map((a) =>
      el(
        "tr",
        { "data-attempt": a.attempt },
        el("td", {}, String(a.attempt)),
        el("td", {}, fmtTime(a.startedAt)),
        // no end: still running, or lost with its worker (it never finished)
        el("td", {}, a.finishedAt ? fmtTime(a.finishedAt) : a.status === "running" ? "running" : "—"),
        el("td", {}, a.finishedAt && a.startedAt ? fmtAge(a.finishedAt - a.startedAt) : ""),
        el("td", {}, badge(a.status)),
        el("td", { class: "err" }, a.error || ""),
      ),
    ),
    { "data-testid": "attempts" },
    "Attempts",
  );
}

function summaryList(rec, known) {
  const finished = rec.finishedAt || rec.doneAt;
  const items = [
    ["Status", badge(rec.status, { "data-testid": "run-status" })],
    ["Source type", known.sourceType],
    ["Source id", known.sourceId],
    ["Scope", rec.scopeKey ? el("a", { href: `#/runs?${qs({ scopeKey: rec.scopeKey })}` }, rec.scopeKey) : ""],
    ["User", rec.userId || known.userId],
    ["Enqueued", fmtTime(rec.enqueuedAt)],
    ["Finished", finished ? `${fmtTime(finished)} (${fmtAge(finished - rec.enqueuedAt)} after enqueue)` : ""],
    ["Attempts", String(rec.attempts ?? "")],
    ["Redriven", rec.redrivenAt ? `${fmtTime(rec.redrivenAt)} (${rec.redrives}×${rec.outOfOrder ? ", after later events of its scope" : ""})` : ""],
    ["Duplicates refused", rec.duplicates ? String(rec.duplicates) : ""],
    ["Error", rec.error ? el("span", { class: "err" }, rec.error) : ""],
    ["Chain", rec.chainId || ""],
  ].filter(([, v]) => v);
  return el("dl", { class: "facts" }, items.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function replaySourceId(sourceId) {
  const suffix = `.replay-${Date.now().toString(36)}`;
  return `${String(sourceId || "run").slice(0, 256 - suffix.length)}${suffix}`;
}

// A new run of the same event: same type and payload, a new sourceId (so dedupe lets it in).
async function replayAsNew(known, rec) {
  const event = withoutEmpty({
    sourceType: known.sourceType,
    sourceId: replaySourceId(known.sourceId),
    userId: known.userId,
    agentId: known.agentId,
    // a scope the door put under user:<id>/ for a user token is named without it: the door adds it again
    scopeKey: rec.scopeKey && known.userId ? rec.scopeKey.replace(new RegExp(`^user:${known.userId.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}/`), "") : rec.scopeKey,
    payload: known.payload || {},
  });
  const { body } = await postJson("/v1/events", event);
  return body.results[0];
}

function runDetailPage(eventId) {
  const head = el("div", { class: "run-head" });
  const actions = el("div", { class: "bar actions-bar" });
  const outcome = outcomeLine({ "data-testid": "run-outcome" });
  const payloadBox = el("div");
  const attemptsBox = el("div");
  const chainBox = el("div");
  const receiptsBox = el("div");
  const outboxBox = el("div");
  const neighboursBox = el("div");
  main().replaceChildren(
    el("p", { class: "crumbs" }, el("a", { href: "#/runs" }, "← Runs")),
    el("h2", {}, "Run ", el("code", {}, eventId)),
    head, actions, outcome,
    panel("Payload", payloadBox),
    panel("Attempts", attemptsBox),
    panel("Chain", chainBox),
    panel("Receipts it produced", receiptsBox),
    panel("Outbox calls", outboxBox),
    panel("Neighbours in its scope", neighboursBox),
  );
  let rec = null;
  let known = {};
  let chain = null;
  let chainLoadedFor = "";
  let shownRec = "";
  let payloadState = "";
  let drawnChain = "";
  // Undo on a receipt here works as on the Conversation page: pending, then the state the API answers.
  const receiptState = { undo: new Map(), receipts: new Map(), render: () => { renderReceipts().catch(() => {}); } };
  const poll = livePoll(refresh);

  async function refresh() {
    const { status, body } = await api(`/v1/events/${encodeURIComponent(eventId)}`, { allow: [404, 409, 422] });
    if (status === 422) { // not an id the API takes: asking every 2 s cannot change that
      const reason = body && body.error ? body.error.message : "refused";
      head.replaceChildren(el("div", { class: "empty", "data-testid": "lookup-error" }, `“${eventId}” is not a run id: ${reason}. `, el("a", { href: "#/runs" }, "Back to the runs")));
      poll.stop();
      return;
    }
    if (status === 404) {
      head.replaceChildren(el("div", { class: "empty" }, `No event “${eventId}”: unknown, or older than the dedupe window. `, el("a", { href: "#/runs" }, "Back to the runs")));
      return;
    }
    if (status === 409) {
      head.replaceChildren(candidates(eventId, body));
      return;
    }
    if (body.eventId && body.eventId !== eventId) { // a source id was given: show the event's own address
      history.replaceState(null, "", `#/runs/${encodeURIComponent(body.eventId)}`);
      eventId = body.eventId;
    }
    rec = body;
    const stamp = `${rec.status}|${rec.attempts}|${rec.finishedAt || rec.doneAt || ""}`;
    if (chainLoadedFor !== stamp) {
      // this run's own trace (a chain id may name several runs: one source id of two users)
      // asked only when the run stored one (hasChain): a chainless run's page makes no 404 in the server's log
      const found = rec.hasChain ? await api(`/v1/chains/${encodeURIComponent(eventId)}`, { allow: [404] }) : { status: 404 };
      chain = found.status === 404 ? null : found.body;
      if (found.status !== 404 || TERMINAL.has(rec.status)) chainLoadedFor = stamp;
      known = await knownEvent(rec, chain);
    }
    const key = JSON.stringify(rec);
    if (key !== shownRec) {
      shownRec = key;
      head.replaceChildren(summaryList(rec, known));
      renderActions();
      attemptsBox.replaceChildren(attemptsTable(rec));
      renderPayload();
      renderOutbox();
      renderReceipts().catch(() => {});
      renderNeighbours().catch(() => {});
    }
    const chainKey = JSON.stringify(chain);
    if (chainKey !== drawnChain) {
      drawnChain = chainKey;
      chainBox.replaceChildren(chain ? chainView(chain) : noChain(rec));
    }
  }

  function renderActions() {
    const buttons = [];
    if (rec.status === "queued" || rec.status === "processing") {
      buttons.push(el("button", { type: "button", class: "danger", onclick: act(cancel) }, "Cancel"));
    }
    if (rec.status === "dead") buttons.push(el("button", { type: "button", onclick: act(redrive) }, "Redrive"));
    if (TERMINAL.has(rec.status) && known.sourceType) {
      buttons.push(el("button", { type: "button", class: "secondary", onclick: act(replay) }, "Replay as new run"));
    }
    actions.replaceChildren(...buttons);
  }

  // Runs one action with the buttons disabled, says what it did, and re-reads at once.
  function act(fn) {
    return async () => {
      for (const b of actions.querySelectorAll("button")) b.disabled = true;
      try { await fn(); } catch (err) { outcome.say(`Failed: ${err.message}`, "bad"); }
      shownRec = "";
      poll.poke();
    };
  }

  async function cancel() {
    const { body } = await postJson(`/v1/events/${encodeURIComponent(eventId)}/cancel`, {});
    outcome.say(`Cancel requested: the event is ${body && body.status ? body.status : "cancelled"}. A queued event never runs; a running one stops before its next action.`);
  }

  async function redrive(payload) {
    const body = payload === undefined ? { eventIds: [eventId] } : { events: [{ eventId, payload }] };
    const { body: result } = await postJson("/v1/dlq/redrive", body);
    if ((result.redriven || []).includes(eventId)) outcome.say(`Redriven${payload === undefined ? "" : " with the edited payload"}: back in its scope's queue.`);
    else outcome.say("Not redriven: the event is no longer dead.", "warn");
  }

  async function discard(reason) {
    const { body } = await postJson("/v1/dlq/discard", withoutEmpty({ eventIds: [eventId], reason: reason || undefined }));
    if ((body.discarded || []).includes(eventId)) outcome.say(`Discarded${reason ? `: ${reason}` : ""}. It is listed under Dead letters → Discarded.`);
    else outcome.say("Not discarded: the event is no longer dead.", "warn");
  }

  async function replay() {
    const result = await replayAsNew(known, rec);
    outcome.say(`Replayed as a new run: ${result.eventId} (${result.status}).`);
    location.hash = `#/runs/${encodeURIComponent(result.eventId)}`;
  }

  function renderPayload() {
    const editable = rec.status === "dead";
    const state = `${editable}|${known.payload === undefined}`;
    if (state === payloadState) return; // keep an edit in progress
    payloadState = state;
    if (known.payload === undefined) {
      payloadBox.replaceChildren(el("p", { class: "muted" }, rec.erasedAt ? "The payload was erased with its user's data." : "The payload is not known here (not in the record, the chain or the dead-letter list)."));
      return;
    }
    if (!editable) {
      payloadBox.replaceChildren(el("pre", { "data-testid": "payload", tabindex: "0", role: "region", "aria-label": "Payload" }, pretty(known.payload)));
      return;
    }
    payloadBox.replaceChildren(payloadEditor(eventId, known.payload, {
      redrive: (payload) => act(() => redrive(payload))(),
      discard: (reason) => act(() => discard(reason))(),
    }));
  }

  function renderOutbox() {
    const calls = rec.outbox || [];
    outboxBox.replaceChildren(calls.length
      ? table(["Kind", "Key", "State", "Attempts", "Created", "Delivered", "Last error"], calls.map((o) =>
        el("tr", {}, el("td", {}, o.kind), el("td", { class: "id" }, o.key), el("td", {}, badge(o.state)), el("td", {}, String(o.attempts ?? 0)), el("td", {}, fmtTime(o.createdAt)), el("td", {}, fmtTime(o.deliveredAt)), el("td", { class: "err" }, o.lastError || ""))), {}, "Outbound calls")
      : el("p", { class: "muted" }, "No outbound calls."));
  }

  // The receipts its run produced, as the API lists them: appended by its chain, or reported by the agent
  // runs it started (memory and skill writes land a moment after the run itself is done).
  async function renderReceipts() {
    const mine = rec.receipts || [];
    const userId = rec.userId || known.userId;
    if (!mine.length) {
      receiptsBox.replaceChildren(el("p", { class: "muted" }, userId ? "None." : "None (receipts belong to a user's conversation)."));
      return;
    }
    receiptsBox.replaceChildren(el("div", { class: "receipts" }, mine.map((r) => receiptCard(r, { userId: r.userId, agentId: r.agentId, topicId: r.topicId }, receiptState))));
  }

  async function renderNeighbours() {
    if (!rec.scopeKey) return;
    const { status, body } = await api(`/v1/events?${qs({ scopeKey: rec.scopeKey, limit: 200 })}`, { allow: [404, 422] });
    if (status !== 200) { neighboursBox.replaceChildren(el("p", { class: "muted" }, "Unavailable.")); return; }
    const list = [...body.events].sort((a, b) => (a.enqueuedAt || 0) - (b.enqueuedAt || 0));
    const i = list.findIndex((e) => e.eventId === eventId);
    if (i < 0) { // the list is the scope's latest 200 runs: an older run is not in it
      const older = `#/runs?${qs({ scopeKey: rec.scopeKey, until: rec.enqueuedAt })}`;
      neighboursBox.replaceChildren(el("p", { class: "muted" }, list.length ? `Not among the scope's latest ${list.length} runs. ` : "Not in its scope's list of runs. ", rec.enqueuedAt ? el("a", { href: older }, "The scope's runs up to this one") : null));
      return;
    }
    const around = list.slice(Math.max(0, i - 2), i + 3);
    neighboursBox.replaceChildren(around.length > 1
      ? el("ol", { class: "neighbours" }, around.map((e) => el("li", { class: e.eventId === eventId ? "current" : "" }, e.eventId === eventId ? el("strong", {}, "this run") : runLink(e.eventId), " ", badge(e.status), ` ${e.sourceType || ""} · ${fmtTime(e.enqueuedAt)}`)))
      : el("p", { class: "muted" }, "It is the only run of its scope."));
  }
}

// The payload of a dead event as an editable, JSON-checked text, with redrive and discard.
function payloadEditor(eventId, payload, { redrive, discard }) {
  const original = pretty(payload);
  const area = el("textarea", { rows: Math.min(20, original.split("\n").length + 1), spellcheck: "false", "aria-label": `Payload of ${eventId}`, "data-testid": "payload-editor" });
  area.value = original;
  const check = el("p", { class: "check", role: "status" });
  const send = el("button", { type: "button" }, "Redrive with this payload");
  const reset = el("button", { type: "button", class: "secondary" }, "Reset");
  const reason = el("input", { type: "text", placeholder: "why it is dropped", "aria-label": `Reason to discard ${eventId}`, "data-testid": "discard-reason" });
  const drop = el("button", { type: "button", class: "danger" }, "Discard");
  const parse = () => {
    try {
      const value = JSON.parse(area.value);
      if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("the payload must be a JSON object");
      check.textContent = area.value === original ? "" : "Valid JSON (edited).";
      check.className = "check ok";
      send.disabled = false;
      return value;
    } catch (err) {
      check.textContent = `Not valid: ${err.message}`;
      check.className = "check bad";
      send.disabled = true;
      return undefined;
    }
  };
  area.addEventListener("input", parse);
  reset.addEventListener("click", () => { area.value = original; parse(); });
  send.addEventListener("click", () => { const value = parse(); if (value !== undefined) redrive(area.value === original ? undefined : value); });
  drop.addEventListener("click", () => discard(reason.value.trim()));
  return el(
    "div",
    { class: "editor" },
    area, check,
    el("div", { class: "bar" }, send, reset),
    el("div", { class: "bar" }, el("label", {}, "Reason", reason), drop),
  );
}

// A source id (or a chain id) that names several events (409): each of them, to pick from.
function candidates(id, body, what = "Source id") {
  const list = (body && body.candidates) || [];
  return el(
    "div",
    { class: "empty" },
    el("p", {}, `${what} “${id}” names ${list.length} events; pick one:`),
    el("ul", {}, list.map((c) => el("li", {}, runLink(c.eventId), ` ${c.sourceType || ""} in ${c.scopeKey || "?"} `, badge(c.status)))),
  );
}

function noChain(rec) {
  const why = {
    queued: "It has not run yet",
    processing: "It is running now",
    dead: "It died before any step was recorded",
    cancelled: "It was cancelled",
    discarded: "It was discarded",
  }[rec.status] || "No chain is stored for it";
  return el("p", { class: "muted", "data-testid": "no-chain" }, `${why}: no chain steps to show. The payload and attempts above are what is known.`);
}
