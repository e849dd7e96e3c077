// Runs: the live list of events (GET /v1/events, newest first, filters and a cursor), and one page per run
// (#/runs/<eventId>): payload, every attempt, the chain's steps and graph, receipts, outbox calls and the
// scope's neighbours, with the actions that fit its state. Also the chain inspector (#/chains?q=…), which
// finds a run by event id, source id or chain id. Helpers (el, api, livePoll, …) live in app.js.
"use strict";

const RUNS_PAGE_SIZE = 50;
const RUN_STATUSES = ["queued", "processing", "done", "dead", "cancelled", "discarded"];
const RUN_FILTERS = ["status", "sourceType", "scopeKey", "userId", "since", "until"];
const TIME_PRESETS = [["", "any time"], ["900000", "last 15 min"], ["3600000", "last hour"], ["86400000", "last 24 h"], ["604800000", "last 7 days"]];

// datetime-local inputs speak local time without a zone; the API speaks epoch milliseconds.
function localInputValue(ms) {
  if (!ms) return "";
  const d = new Date(Number(ms));
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function msFromInput(value) {
  if (!value) return "";
  const ms = new Date(value).getTime();
  return Number.isNaN(ms) ? "" : String(ms);
}

function sourceTypeOptions(id) {
  const types = new Set([...DECLARED_SOURCE_TYPES, ...Object.keys(SOURCE_EXAMPLES)]);
  return el("datalist", { id }, [...types].sort().map((t) => el("option", { value: t })));
}

function runsPage(sub) {
  if (sub) { runDetailPage(sub); return; }
  const params = hashParams();
  const filters = Object.fromEntries(RUN_FILTERS.map((k) => [k, params[k] || ""]));
  const pageSize = Math.max(1, Math.min(200, Number(params.limit) || RUNS_PAGE_SIZE)); // #/runs?limit=N
  const form = el(
    "form",
    { class: "bar filters", role: "search", "aria-label": "Filter runs" },
    el("label", {}, "Status", el("select", { name: "status" }, el("option", { value: "" }, "any"), RUN_STATUSES.map((s) => el("option", { value: s, selected: s === filters.status }, s)))),
    el("label", {}, "Source type", el("input", { name: "sourceType", value: filters.sourceType, list: "runs-source-types", autocomplete: "off" })),
    sourceTypeOptions("runs-source-types"),
    el("label", {}, "Scope", el("input", { name: "scopeKey", value: filters.scopeKey, autocomplete: "off" })),
    el("label", {}, "User", el("input", { name: "userId", value: filters.userId, autocomplete: "off" })),
    el("label", {}, "Enqueued", el("select", { name: "preset" }, TIME_PRESETS.map(([v, t]) => el("option", { value: v }, t)))),
    el("label", {}, "Since", el("input", { name: "since", type: "datetime-local", value: localInputValue(filters.since) })),
    el("label", {}, "Until", el("input", { name: "until", type: "datetime-local", value: localInputValue(filters.until) })),
    el("button", { type: "submit" }, "Apply"),
    el("button", { type: "button", class: "secondary", onclick: () => { replaceHashQuery({}); route(); } }, "Clear"),
  );
  form.elements.preset.addEventListener("change", () => {
    const span = Number(form.elements.preset.value);
    form.elements.since.value = span ? localInputValue(Date.now() - span) : "";
    form.elements.until.value = "";
  });
  const live = el("span", { class: "live", "aria-live": "off" });
  const holder = el("div", { "data-testid": "runs" });
  const more = el("button", { type: "button", class: "secondary", hidden: true }, "Load more");
  main().replaceChildren(el("h2", {}, "Runs"), form, el("div", { class: "bar" }, live), holder, el("div", { class: "pager" }, more));

  const rows = new Map();
  let cursor = null;
  let loadedMore = false;
  let shown = "";
  const query = (extra) => qs({ ...filters, limit: pageSize, ...extra });

  function render() {
    const list = [...rows.values()].sort((a, b) => (b.enqueuedAt || 0) - (a.enqueuedAt || 0) || String(b.eventId).localeCompare(String(a.eventId)));
    const key = JSON.stringify(list);
    more.hidden = !cursor;
    if (key === shown) return;
    shown = key;
    if (!list.length) {
      const any = RUN_FILTERS.some((k) => filters[k]);
      holder.replaceChildren(el("div", { class: "empty" }, any ? "No run matches these filters." : "No runs yet. Send one from the Send page, or: ", any ? null : emptyHint({})));
      return;
    }
    holder.replaceChildren(
      table(
        ["Event", "Status", "Source type", "Source id", "Scope", "User", "Enqueued", "Took", "Attempts", "Error"],
        list.map((e) =>
          el(
            "tr",
            { "data-event-id": e.eventId },
            el("td", {}, runLink(e.eventId)),
            el("td", {}, badge(e.status, { "data-testid": "run-status" })),
            el("td", {}, e.sourceType || ""),
            el("td", { class: "id" }, e.sourceId || ""),
            el("td", { class: "id opt" }, e.scopeKey || ""),
            el("td", { class: "opt" }, e.userId || ""),
            el("td", { class: "opt" }, fmtTime(e.enqueuedAt)),
            el("td", { class: "opt" }, e.finishedAt || e.doneAt ? fmtAge((e.finishedAt || e.doneAt) - e.enqueuedAt) : ""),
            el("td", { class: "opt" }, String(e.attempts ?? "")),
            el("td", { class: "err" }, e.error || ""),
          ),
        ),
        { class: "runs" },
      ),
    );
  }

  // The first page again: new runs come in at the top, changed ones are replaced, and runs of this page's
  // time span that no longer match (a status filter) leave. Pages loaded with "Load more" stay as they are.
  async function refresh() {
    const { body } = await api(`/v1/events?${query({})}`);
    const seen = new Set();
    for (const e of body.events) { rows.set(e.eventId, e); seen.add(e.eventId); }
    const floor = body.cursor ? Math.min(...body.events.map((e) => e.enqueuedAt || 0)) : -Infinity;
    for (const [id, e] of rows) if (!seen.has(id) && (e.enqueuedAt || 0) >= floor) rows.delete(id);
    if (!loadedMore) cursor = body.cursor || null;
    live.textContent = `Live · every ${LIVE_MS / 1000} s · updated ${new Date().toLocaleTimeString()}`;
    render();
  }

  more.addEventListener("click", async () => {
    if (!cursor) return;
    more.disabled = true;
    try {
      const { body } = await api(`/v1/events?${query({ cursor })}`);
      for (const e of body.events) rows.set(e.eventId, e);
      cursor = body.cursor || null;
      loadedMore = true;
      render();
    } finally { more.disabled = false; }
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = {
      status: form.elements.status.value,
      sourceType: form.elements.sourceType.value.trim(),
      scopeKey: form.elements.scopeKey.value.trim(),
      userId: form.elements.userId.value.trim(),
      since: msFromInput(form.elements.since.value),
      until: msFromInput(form.elements.until.value),
      limit: params.limit,
    };
    replaceHashQuery(next);
    route();
  });
  livePoll(refresh);
}

// ---------------------------------------------------------------------------------------------------------
// Run detail

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
  for (let offset = 0; offset < 4 * LIMIT; offset += LIMIT) {
    const { body } = await api(`/v1/dlq?${qs({ state, offset, limit: LIMIT })}`, { allow: [404, 422] });
    const events = (body && body.events) || [];
    const hit = events.find((e) => e.eventId === eventId);
    if (hit || events.length < LIMIT) return hit || null;
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
        el("td", {}, a.finishedAt ? fmtTime(a.finishedAt) : "running"),
        el("td", {}, a.finishedAt && a.startedAt ? fmtAge(a.finishedAt - a.startedAt) : ""),
        el("td", {}, badge(a.status)),
        el("td", { class: "err" }, a.error || ""),
      ),
    ),
    { "data-testid": "attempts" },
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
    const { status, body } = await api(`/v1/events/${encodeURIComponent(eventId)}`, { allow: [404, 409] });
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
      payloadBox.replaceChildren(el("pre", { "data-testid": "payload" }, pretty(known.payload)));
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
        el("tr", {}, el("td", {}, o.kind), el("td", { class: "id" }, o.key), el("td", {}, badge(o.state)), el("td", {}, String(o.attempts ?? 0)), el("td", {}, fmtTime(o.createdAt)), el("td", {}, fmtTime(o.deliveredAt)), el("td", { class: "err" }, o.lastError || ""))))
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
    const around = i < 0 ? [] : list.slice(Math.max(0, i - 2), i + 3);
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

// A source id that names several events (409): each of them, to pick from.
function candidates(sourceId, body) {
  const list = (body && body.candidates) || [];
  return el(
    "div",
    { class: "empty" },
    el("p", {}, `Source id “${sourceId}” names ${list.length} events; pick one:`),
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

// ---------------------------------------------------------------------------------------------------------
// The chain: dominant path, steps with timing and inputs/outputs, and the edge graph.

function chainView(chain) {
  const { envelope, record } = chain;
  const graph = el("div", { class: "graph", "data-testid": "chain-graph" });
  drawGraph(graph, envelope, record);
  return el(
    "div",
    { class: "chain" },
    el("p", {}, "Dominant path: ", el("span", { class: "path", "data-testid": "dominant-path" }, record.conclusionChain.dominantPath.join(" → "))),
    el("p", {}, `Final status: ${record.finalStatus || "none"}${record.conclusionChain.finalReason ? ` — ${record.conclusionChain.finalReason}` : ""} · ${record.durationMs ?? "?"} ms${envelope.metadata && envelope.metadata.attempt !== undefined ? ` · attempt ${envelope.metadata.attempt}` : ""}`),
    graph,
    chainSteps(envelope),
  );
}

function jsonDetails(label, value) {
  if (value === undefined || value === null || (typeof value === "object" && !Object.keys(value).length)) return null;
  return el("details", {}, el("summary", {}, label), el("pre", {}, pretty(value)));
}

function chainSteps(envelope) {
  const t0 = envelope.source.timestamp;
  const at = (ts) => (ts && t0 ? `+${ts - t0} ms` : "");
  const results = new Map(envelope.results.map((r) => [r.actionId, r]));
  const src = envelope.source;
  return el(
    "div",
    { class: "steps" },
    el("section", { class: "step" }, el("h4", {}, "1. Source"), el("p", {}, `${src.sourceType} · ${src.sourceId} · scope ${src.scopeKey} · ${fmtTime(src.timestamp)}`), jsonDetails("input (payload)", src.payload)),
    el("section", { class: "step" }, el("h4", {}, "2. Signals"), envelope.signals.length
      ? el("ul", {}, envelope.signals.map((s) => el("li", {}, el("span", { class: "step-title" }, s.signalType), ` ${at(s.timestamp)}`, el("div", { class: "id" }, s.signalId), jsonDetails("payload", s.payload))))
      : el("p", {}, "(none)")),
    el("section", { class: "step" }, el("h4", {}, "3. Actions and results"), envelope.actions.length
      ? el("ul", {}, envelope.actions.map((a) => {
        const r = results.get(a.actionId);
        const took = r && r.attempt && r.attempt.completedAt ? `${r.attempt.completedAt - r.attempt.startedAt} ms` : "";
        return el(
          "li",
          {},
          el("span", { class: "step-title" }, a.actionType), ` ${at(a.timestamp)} `,
          r ? badge(r.status) : badge("no result"),
          took ? ` in ${took}` : "",
          r && r.detail ? el("div", {}, r.detail) : null,
          r && r.error ? el("div", { class: "err" }, `${r.error.code}: ${r.error.message}`) : null,
          el("div", { class: "id" }, a.actionId),
          jsonDetails("input", a.payload),
          r ? jsonDetails("output", r.output) : null,
        );
      }))
      : el("p", {}, "(none)")),
  );
}

// The graph is laid out for the width it has: left to right when every layer fits side by side, otherwise
// top to bottom with each layer's nodes wrapping into rows. It is redrawn when its box changes width, and
// its box scrolls if even one node is wider than the screen.
function drawGraph(box, envelope, record) {
  let lastWidth = -1;
  const draw = () => {
    const width = box.clientWidth;
    if (!width || width === lastWidth) return;
    lastWidth = width;
    box.replaceChildren(graphSvg(envelope, record, width - 2));
  };
  const observer = new ResizeObserver(draw);
  observer.observe(box);
  teardown.push(() => observer.disconnect());
}

function graphNodes(envelope, record) {
  const nodes = new Map();
  const add = (id, label, sub, kind, extra = {}) => nodes.set(id, { id, label, sub, kind, ...extra });
  add(envelope.source.sourceId, envelope.source.sourceType, "source", "source");
  for (const s of envelope.signals) add(s.signalId, s.signalType, "signal", "signal");
  for (const a of envelope.actions) add(a.actionId, a.actionType, "action", "action");
  for (const r of envelope.results) {
    const took = r.attempt && r.attempt.completedAt ? ` in ${r.attempt.completedAt - r.attempt.startedAt} ms` : "";
    const id = `${r.actionId}:result`;
    const signal = nodes.get(id); // the result is often announced as a signal of that id (signal.action.applied)
    if (signal) Object.assign(signal, { sub: `result · ${r.status}${took}`, status: r.status, actionId: r.actionId });
    else add(id, `result: ${r.status}`, `result${took}`, "result", { status: r.status, actionId: r.actionId });
  }
  const parent = new Map();
  for (const e of envelope.edges) if (nodes.has(e.from) && nodes.has(e.to) && !parent.has(e.to)) parent.set(e.to, e.from);
  const depth = (id, seen = new Set()) => {
    if (!parent.has(id) || seen.has(id)) return 0;
    seen.add(id);
    return depth(parent.get(id), seen) + 1;
  };
  const dominant = new Set(record.conclusionChain.dominantPath);
  for (const n of nodes.values()) {
    n.layer = depth(n.id);
    n.dominant = n.kind === "source" || n.id === record.finalActionId || (n.kind === "signal" && dominant.has(n.label))
      || (n.kind === "result" && n.actionId === record.finalActionId);
  }
  return nodes;
}

// A dotted type name on at most `lines` lines of `chars` characters, broken after a dot where it can be.
function wrapLabel(text, chars, lines = 2) {
  const parts = String(text).match(/[^.]+\.?/g) || [""];
  const out = [""];
  for (const part of parts) {
    const last = out.length - 1;
    if ((out[last] + part).length <= chars || !out[last]) out[last] += part;
    else out.push(part);
  }
  const fitted = out.flatMap((line) => (line.length > chars ? line.match(new RegExp(`.{1,${chars}}`, "g")) : [line]));
  if (fitted.length <= lines) return fitted;
  const kept = fitted.slice(0, lines);
  kept[lines - 1] = `${kept[lines - 1].slice(0, Math.max(1, chars - 1))}…`;
  return kept;
}

function graphSvg(envelope, record, available) {
  const nodes = graphNodes(envelope, record);
  const layers = [];
  for (const n of nodes.values()) (layers[n.layer] ||= []).push(n);
  const filled = layers.filter(Boolean);
  const PAD = 8, GX = 32, GY = 28, H = 58;
  // Left to right when each node gets at least 140 px that way; else top to bottom, nodes up to 260 px wide.
  const across = Math.min(220, Math.floor((available - 2 * PAD - (filled.length - 1) * GX) / filled.length));
  const horizontal = across >= 140;
  const W = horizontal ? across : Math.max(140, Math.min(260, available - 2 * PAD));
  const pos = new Map();
  let width = 0, height = 0;
  if (horizontal) {
    filled.forEach((items, col) => items.forEach((n, row) => pos.set(n.id, { x: PAD + col * (W + GX), y: PAD + row * (H + GY / 2) })));
    width = 2 * PAD + filled.length * W + (filled.length - 1) * GX;
    height = 2 * PAD + Math.max(...filled.map((l) => l.length)) * (H + GY / 2) - GY / 2;
  } else {
    const perRow = Math.max(1, Math.floor((available - 2 * PAD + GX / 2) / (W + GX / 2)));
    let y = PAD;
    for (const items of filled) {
      items.forEach((n, i) => pos.set(n.id, { x: PAD + (i % perRow) * (W + GX / 2), y: y + Math.floor(i / perRow) * (H + GY / 2) }));
      y += Math.ceil(items.length / perRow) * (H + GY / 2) - GY / 2 + GY;
    }
    width = 2 * PAD + Math.min(perRow, Math.max(...filled.map((l) => l.length))) * (W + GX / 2) - GX / 2;
    height = y - GY + PAD;
  }
  const ns = "http://www.w3.org/2000/svg";
  const make = (tag, attrs) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  };
  const svg = make("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", class: horizontal ? "across" : "down", "aria-label": "Chain graph, source to results; the dominant path is highlighted" });
  const defs = make("defs", {});
  const marker = make("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  marker.append(make("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }));
  defs.append(marker);
  svg.append(defs);
  for (const e of envelope.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const [x1, y1, x2, y2] = horizontal ? [a.x + W, a.y + H / 2, b.x, b.y + H / 2] : [a.x + W / 2, a.y + H, b.x + W / 2, b.y];
    const d = horizontal
      ? `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`
      : `M${x1},${y1} C${x1},${y1 + GY / 2} ${x2},${y2 - GY / 2} ${x2},${y2}`;
    const dom = nodes.get(e.from).dominant && nodes.get(e.to).dominant;
    const path = make("path", { d, class: `edge${dom ? " dominant" : ""}`, "marker-end": "url(#arrow)" });
    const title = make("title", {});
    title.textContent = `${e.from} ${e.relation} ${e.to}`;
    path.append(title);
    svg.append(path);
  }
  const chars = Math.floor((W - 16) / 6.6);
  for (const n of nodes.values()) {
    const p = pos.get(n.id);
    const g = make("g", { class: `node ${n.kind}${n.status ? ` ${n.status}` : ""}${n.dominant ? " dominant" : ""}`, "data-node-id": n.id });
    g.append(make("rect", { x: p.x, y: p.y, width: W, height: H, rx: 6 }));
    wrapLabel(n.label, chars).forEach((line, i) => {
      const text = make("text", { x: p.x + 8, y: p.y + 17 + i * 14, class: "label" });
      text.textContent = line;
      g.append(text);
    });
    const sub = make("text", { x: p.x + 8, y: p.y + 50, class: "sub" });
    sub.textContent = wrapLabel(n.sub, chars + 1, 1)[0];
    const title = make("title", {});
    title.textContent = `${n.label}\n${n.sub}\n${n.id}`;
    g.append(sub, title);
    svg.append(g);
  }
  return svg;
}

// ---------------------------------------------------------------------------------------------------------
// Chain inspector: an event id or source id opens its run; a chain id shows the chain alone.

function chainsPage() {
  const params = hashParams();
  const form = el(
    "form",
    { class: "bar", role: "search", "aria-label": "Find a chain" },
    el("label", {}, "Event id, source id or chain id", el("input", { name: "q", value: params.q || "", required: true, size: 40 })),
    el("button", { type: "submit" }, "Inspect"),
  );
  const out = el("div");
  main().replaceChildren(el("h2", {}, "Chain inspector"), form, out);
  async function show(query) {
    showError("");
    out.replaceChildren(el("p", {}, "Loading…"));
    if (!query.startsWith("chain:")) {
      const { status, body } = await api(`/v1/events/${encodeURIComponent(query)}`, { allow: [404, 409] });
      if (status === 200 && body.eventId) { location.hash = `#/runs/${encodeURIComponent(body.eventId)}`; return; }
      if (status === 409) { out.replaceChildren(candidates(query, body)); return; }
    }
    const chainId = query.startsWith("chain:") ? query : `chain:${query}`;
    const { status, body } = await api(`/v1/chains/${encodeURIComponent(chainId)}`, { allow: [404] });
    out.replaceChildren(status === 404
      ? el("div", { class: "empty" }, `Nothing found for “${query}”: no event with that id or source id, and no chain ${chainId}. `, el("a", { href: "#/runs" }, "Browse the runs"), " to find it by status, type, scope or user.")
      : chainView(body));
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = form.elements.q.value.trim();
    replaceHashQuery({ q });
    show(q).catch(() => {});
  });
  if (params.q) show(params.q).catch(() => {});
}
