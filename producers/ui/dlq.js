// Dead letters: the workbench (#/dlq) lists dead events with their error; each row opens its payload in a
// JSON-checked editor to redrive as is or edited, or to discard with a reason; rows can be picked by hand
// or by filter for bulk redrive and discard. Every action says what it did, and a row that was acted on
// stays in the list and follows its event live (queued, processing, then done or dead again).
// #/dlq?state=discarded lists discarded events with the reason and time (their audit record); #/dlq?state=outbox
// the outbound calls (webhooks, agent runs) that failed every attempt, each sent again by a button (or all at once).
// The list comes a page at a time (GET /v1/dlq's cursor, which no death or redrive meanwhile shifts): "Load more"
// reads the next page, a refresh re-reads as many as are shown, and the counts say how many are shown of how many
// there are.
"use strict";

const DLQ_FETCH_LIMIT = 500; // GET /v1/dlq's largest page
// A row acted on is followed with GET /v1/events/{id}: at most this many a refresh, the least recently read first
// (hundreds each 2 s pushed the key over its rate limit); after a 429 none for its Retry-After, at least 10 s.
const DLQ_FOLLOW_MAX = 20;
const DLQ_FOLLOW_PAUSE_MS = 10000;

function dlqTabs(current) {
  const tab = (state, label) => el("a", { href: state ? `#/dlq?state=${state}` : "#/dlq", class: "tab", "aria-current": current === state ? "page" : null }, label);
  return el("nav", { class: "tabs", "aria-label": "Dead-letter lists" }, tab("", "Dead"), tab("discarded", "Discarded"), tab("outbox", "Outbox"));
}

function eventOf(record) {
  let event = record.event;
  if (typeof event === "string") { try { event = JSON.parse(event); } catch { event = null; } }
  return event && typeof event === "object" ? event : { sourceType: record.sourceType, sourceId: record.sourceId, payload: record.payload };
}

// GET /v1/dlq's order: the latest death first, then event id, descending. True when a comes after b.
function listedAfter(a, b) {
  return (a.deadAt || 0) !== (b.deadAt || 0) ? (a.deadAt || 0) < (b.deadAt || 0) : String(a.eventId) < String(b.eventId);
}

function dlqPage() {
  if (hashParams().state === "discarded") { discardedPage(); return; }
  if (hashParams().state === "outbox") { outboxDeadPage(); return; }
  const typeFilter = el("select", { "aria-label": "Source type" }, el("option", { value: "" }, "any"));
  const errorFilter = el("input", { type: "search", placeholder: "text in the error", "aria-label": "Error contains" });
  const selectAll = el("input", { type: "checkbox", "aria-label": "Select every row shown" });
  const reason = el("input", { type: "text", placeholder: "why they are dropped", "aria-label": "Reason for bulk discard" });
  const redriveSel = el("button", { type: "button" }, "Redrive selected");
  const discardSel = el("button", { type: "button", class: "danger" }, "Discard selected");
  const redriveAll = el("button", { type: "button", class: "secondary" }, "Redrive all");
  const discardAll = el("button", { type: "button", class: "secondary danger" }, "Discard all");
  const bulkOutcome = outcomeLine({ "data-testid": "dlq-outcome", tabindex: "-1" });
  const count = el("span", { class: "live", "data-testid": "dlq-count" });
  const more = el("button", { type: "button", class: "secondary", hidden: true }, "Load more");
  const tbody = el("tbody");
  const tableEl = el(
    "table",
    { class: "dlq list" },
    el("colgroup", {}, ["pick", "id", "source", "attempts", "err", "time", "status", "outcome", "actions"].map((kind) => el("col", { class: kind }))),
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, selectAll), ["Event", "Source", "Attempts", "Error", "Died", "Status", "Outcome"].map((h) => el("th", { scope: "col", title: h }, h)), el("th", { scope: "col", class: "row-actions" }, el("span", { class: "visually-hidden" }, "Actions")))),
    tbody,
  );
  const empty = el("div", { class: "empty", hidden: true }, "The dead-letter list is empty. Events that keep failing land here with their payload and last error.");
  main().replaceChildren(
    el("h2", {}, "Dead letters"),
    dlqTabs(""),
    el("div", { class: "bar", role: "search", "aria-label": "Filter dead letters" }, el("label", {}, "Source type", typeFilter), el("label", {}, "Error contains", errorFilter), count),
    el("div", { class: "bar" }, redriveSel, el("label", {}, "Reason", reason), discardSel, redriveAll, discardAll),
    bulkOutcome,
    scrollBox("table-wrap", "Dead letters", tableEl),
    empty,
    el("div", { class: "pager" }, more),
  );

  let dead = new Map(); // eventId → its DLQ record (the last list read)
  let total = 0;
  let wanted = DLQ_FETCH_LIMIT; // how many of the list's first entries are read ("Load more" adds a page)
  let cursor = null; // where the next page starts (GET /v1/dlq's cursor; null: nothing follows)
  let reading = Promise.resolve(); // reads and "Load more" take turns, so neither undoes the other
  const inTurn = (fn) => (reading = reading.then(fn, fn));
  const tracked = new Map(); // eventId → { record, status, outcome, readAt } for rows acted on here
  let following = 0; // how many rows acted on are still followed (not settled)
  let followPausedUntil = 0; // after a 429 on a lookup
  const rows = new Map(); // eventId → the row's elements
  const selected = new Set();
  const open = new Set();

  function statusOf(id) {
    const t = tracked.get(id);
    return t && t.status ? t.status : "dead";
  }

  function matches(record) {
    const event = eventOf(record);
    const type = typeFilter.value;
    const text = errorFilter.value.trim().toLowerCase();
    return (!type || event.sourceType === type) && (!text || String(record.error || "").toLowerCase().includes(text));
  }

  function shownIds() {
    const records = new Map(dead);
    for (const [id, t] of tracked) if (!records.has(id)) records.set(id, t.record);
    return [...records.values()].filter(matches).sort((a, b) => (b.deadAt || 0) - (a.deadAt || 0)).map((r) => r.eventId);
  }

  function recordOf(id) {
    return dead.get(id) || tracked.get(id).record;
  }

  function makeRow(id) {
    const record = recordOf(id);
    const event = eventOf(record);
    const check = el("input", { type: "checkbox", "aria-label": `Select ${id}` });
    check.addEventListener("change", () => { if (check.checked) selected.add(id); else selected.delete(id); syncBulk(); });
    const status = el("td");
    const outcome = el("td", { class: "outcome-cell", "aria-live": "polite" });
    const toggle = el("button", { type: "button", class: "secondary", "aria-expanded": "false", "aria-label": `Payload of ${id}` }, "Payload");
    const redrive = el("button", { type: "button", "aria-label": `Redrive ${id}` }, "Redrive");
    const tr = el(
      "tr",
      { "data-event-id": id },
      el("td", {}, check),
      clipCell(id, { class: "id" }, runLink(id)),
      clipCell(`${event.sourceType || "?"} · ${event.sourceId || "?"}`),
      el("td", { class: "num-cell" }, String(record.attempts ?? "")),
      errorCell(record.error),
      clipCell(fmtTime(record.deadAt)),
      status,
      outcome,
      el("td", { class: "row-actions" }, toggle, redrive),
    );
    const detail = el("tr", { class: "detail", "data-detail-for": id, hidden: true }, el("td", { colspan: 9 }));
    toggle.addEventListener("click", () => {
      if (open.has(id)) open.delete(id); else open.add(id);
      toggle.setAttribute("aria-expanded", String(open.has(id)));
      detail.hidden = !open.has(id);
      if (open.has(id) && !detail.firstChild.firstChild) {
        detail.firstChild.append(event.payload === undefined
          ? el("p", { class: "muted" }, "No payload stored (erased with its user's data).")
          : payloadEditor(id, event.payload, { redrive: (payload) => act([id], payload), discard: (why) => drop([id], why) }));
      }
    });
    // Escape in the open editor closes it, and focus goes back to its Payload button
    detail.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && open.has(id)) { toggle.click(); toggle.focus(); }
    });
    redrive.addEventListener("click", () => act([id]));
    return { tr, detail, check, status, outcome, redrive };
  }

  function sync() {
    const ids = shownIds();
    const listed = new Set(ids);
    for (const id of ids) if (!rows.has(id)) rows.set(id, makeRow(id));
    for (const [id, row] of rows) {
      if (!listed.has(id) && !tracked.has(id)) { row.tr.remove(); row.detail.remove(); rows.delete(id); selected.delete(id); open.delete(id); }
    }
    for (const id of ids) {
      const row = rows.get(id);
      const status = statusOf(id);
      if (row.status.textContent !== status) row.status.replaceChildren(badge(status, { "data-testid": "dlq-status" }));
      const t = tracked.get(id);
      if (t && row.outcome.textContent !== t.outcome) row.outcome.replaceChildren(fewLines(t.outcome)); // a long reason: all of it in the title
      row.redrive.disabled = status !== "dead";
      row.check.disabled = status !== "dead";
      if (status !== "dead") { row.check.checked = false; selected.delete(id); }
    }
    // Put the rows in order without touching those already in place (an open editor keeps its focus).
    const current = [...tbody.children].filter((tr) => tr.dataset.eventId).map((tr) => tr.dataset.eventId);
    const hidden = [...rows.keys()].filter((id) => !listed.has(id));
    for (const id of hidden) { rows.get(id).tr.remove(); rows.get(id).detail.remove(); }
    if (current.join("\n") !== ids.join("\n")) {
      for (const id of ids) tbody.append(rows.get(id).tr, rows.get(id).detail);
    }
    empty.hidden = ids.length > 0;
    tableEl.hidden = ids.length === 0;
    const types = new Set([...dead.values()].map((r) => eventOf(r).sourceType).filter(Boolean));
    const have = new Set([...typeFilter.options].map((o) => o.value));
    for (const t of [...types].sort()) if (!have.has(t)) typeFilter.append(el("option", { value: t }, t));
    const followed = [...tracked.values()].filter((t) => t.status !== "dead").length;
    const paused = Date.now() < followPausedUntil;
    const filtered = typeFilter.value || errorFilter.value.trim();
    const partial = dead.size < total; // the filters and "Select every row shown" cover the rows read only
    const matching = ids.filter((id) => statusOf(id) === "dead").length;
    count.textContent = [
      partial ? `${dead.size} of ${total} dead shown` : `${total} dead`,
      filtered ? (partial ? `${matching} of the ${dead.size} shown match` : `${matching} match`) : "",
      followed ? `${followed} acted on here` : "",
      paused ? "status lookups paused (rate limited)" : following > DLQ_FOLLOW_MAX ? `following ${DLQ_FOLLOW_MAX} of ${following} per refresh` : "",
      `live every ${LIVE_MS / 1000} s`,
    ].filter(Boolean).join(" · ");
    more.hidden = !cursor;
    more.textContent = `Load more (the next ${Math.min(DLQ_FETCH_LIMIT, total - dead.size)} of ${total - dead.size} not shown)`;
    syncBulk();
  }

  function syncBulk() {
    const n = selected.size;
    redriveSel.textContent = `Redrive selected (${n})`;
    discardSel.textContent = `Discard selected (${n})`;
    redriveSel.disabled = discardSel.disabled = n === 0;
    redriveAll.disabled = discardAll.disabled = total === 0;
    const selectable = shownIds().filter((id) => statusOf(id) === "dead");
    selectAll.checked = selectable.length > 0 && selectable.every((id) => selected.has(id));
  }

  // The list's first ``wanted`` entries, a page at a time, each after the last one's cursor; unless ``deep`` is
  // false, then the first page alone, the entries below it kept as last read (and the cursor after them).
  async function readDead(deep = true) {
    const read = new Map();
    let after = null;
    let first = true;
    while (first || (after && read.size < wanted)) {
      const { body } = await api(`/v1/dlq?${qs({ limit: DLQ_FETCH_LIMIT, cursor: after })}`);
      for (const e of body.events) read.set(e.eventId, e);
      total = body.total;
      after = body.cursor || null;
      const edge = body.events[body.events.length - 1];
      if (first && !deep && after && edge && dead.size > read.size) {
        for (const e of dead.values()) if (!read.has(e.eventId) && listedAfter(e, edge)) read.set(e.eventId, e);
        dead = read;
        return;
      }
      first = false;
    }
    dead = read;
    cursor = after;
  }

  more.addEventListener("click", () => inTurn(async () => {
    if (!cursor) return;
    more.disabled = true;
    try {
      const { body } = await api(`/v1/dlq?${qs({ limit: DLQ_FETCH_LIMIT, cursor })}`);
      for (const e of body.events) dead.set(e.eventId, e);
      total = body.total;
      cursor = body.cursor || null;
      wanted = dead.size;
      sync();
    } finally { more.disabled = false; }
  }).catch(() => {})); // shown in the banner

  let refreshes = 0;
  const refresh = (poked) => inTurn(async () => {
    await readDead(refreshes++ % LIVE_DEEP_EVERY === 0 || poked === true); // every page after an action
    const pending = [...tracked].filter(([id, t]) => !(t.status === "dead" && dead.has(id)) && !(TERMINAL.has(t.status) && t.settled));
    following = pending.length;
    pending.sort(([, a], [, b]) => (a.readAt || 0) - (b.readAt || 0));
    for (const [id, t] of Date.now() < followPausedUntil ? [] : pending.slice(0, DLQ_FOLLOW_MAX)) {
      const { status, body: rec, retryAfterS } = await api(`/v1/events/${encodeURIComponent(id)}`, { allow: [404, 429] });
      if (status === 429) { followPausedUntil = Date.now() + Math.max(retryAfterS * 1000, DLQ_FOLLOW_PAUSE_MS); break; }
      t.readAt = Date.now();
      if (rec && rec.status) {
        t.status = rec.status;
        t.settled = TERMINAL.has(rec.status);
        if (rec.status === "done") t.outcome = `${t.outcome.split(" → ")[0]} → done`;
        if (rec.status === "dead") { t.outcome = `${t.outcome.split(" → ")[0]} → dead again`; t.record = { ...t.record, ...rec }; }
      }
    }
    sync();
  });

  // One request acts on at most AGENT_SIGNAL_DLQ_BATCH_MAX dead events: {all: true} answers `more` while others
  // remain, so it is sent again with the answer's `until` (an event that dies again meanwhile is not taken twice),
  // the count shown as it goes, and the answers are joined.
  async function untilDone(path, body, doneKey, label) {
    const joined = { [doneKey]: [], notDead: [] };
    for (;;) {
      const { body: result } = await postJson(path, body);
      if (result.until !== undefined) body = { ...body, until: result.until };
      joined[doneKey].push(...(result[doneKey] || []));
      joined.notDead.push(...(result.notDead || []));
      if (!(body.all && result.more && (result[doneKey] || []).length)) return joined;
      bulkOutcome.say(`${label} ${joined[doneKey].length} so far…`);
    }
  }

  async function act(ids, editedPayload) {
    const body = ids === "all" ? { all: true }
      : editedPayload !== undefined ? { events: [{ eventId: ids[0], payload: editedPayload }] }
      : { eventIds: ids };
    setBusy(true);
    try {
      const result = await untilDone("/v1/dlq/redrive", body, "redriven", "Redriven");
      const how = editedPayload !== undefined ? "redriven with edited payload" : "redriven";
      for (const id of result.redriven || []) follow(id, "queued", how);
      for (const id of result.notDead || []) follow(id, undefined, "not dead: nothing to redrive");
      bulkOutcome.say(`Redriven: ${(result.redriven || []).length}${(result.notDead || []).length ? `; no longer dead: ${result.notDead.length}` : ""}.`);
    } catch (err) {
      bulkOutcome.say(`Redrive failed: ${err.message}`, "bad");
    } finally { setBusy(false); }
    poll.poke();
  }

  async function drop(ids, why) {
    const body = ids === "all" ? { all: true } : { eventIds: ids };
    if (why) body.reason = why;
    setBusy(true);
    try {
      const result = await untilDone("/v1/dlq/discard", body, "discarded", "Discarded");
      for (const id of result.discarded || []) follow(id, "discarded", `discarded${why ? `: ${why}` : ""}`, true);
      for (const id of result.notDead || []) follow(id, undefined, "not dead: nothing to discard");
      bulkOutcome.say(`Discarded: ${(result.discarded || []).length}${(result.notDead || []).length ? `; no longer dead: ${result.notDead.length}` : ""}. They are listed under Discarded.`);
      return true;
    } catch (err) {
      bulkOutcome.say(`Discard failed: ${err.message}`, "bad");
      return false;
    } finally { setBusy(false); poll.poke(); }
  }

  // The bulk Reason is used once: emptied after the discard it went with.
  const dropWithReason = async (ids) => { if (await drop(ids, reason.value.trim())) reason.value = ""; };

  // "all" is the tenant's whole list, whatever the filter and the selection: asked first, with the count.
  const confirmAll = (verb) => window.confirm(`${verb} all ${total} dead events? This ignores the filter and the selection: it acts on the whole dead-letter list (as last read), not only the rows shown.`);

  function follow(id, status, outcome, settled = false) {
    const record = dead.get(id) || (tracked.get(id) || {}).record || { eventId: id };
    const t = tracked.get(id) || { record };
    if (status) t.status = status;
    t.outcome = outcome;
    t.settled = settled;
    tracked.set(id, t);
    selected.delete(id);
    if (rows.has(id)) rows.get(id).check.checked = false;
    sync();
  }

  // A bulk button pressed is disabled while it works (and after, with nothing selected): focus goes to the line
  // that says what it did, not to <body>.
  function setBusy(busy) {
    const buttons = [redriveSel, discardSel, redriveAll, discardAll];
    if (busy && buttons.includes(document.activeElement)) bulkOutcome.focus();
    for (const b of buttons) b.disabled = busy;
    if (!busy) syncBulk();
  }

  selectAll.addEventListener("change", () => {
    for (const id of shownIds()) {
      if (statusOf(id) !== "dead") continue;
      if (selectAll.checked) selected.add(id); else selected.delete(id);
      rows.get(id).check.checked = selectAll.checked;
    }
    syncBulk();
  });
  redriveSel.addEventListener("click", () => act([...selected]));
  discardSel.addEventListener("click", () => dropWithReason([...selected]));
  redriveAll.addEventListener("click", () => { if (confirmAll("Redrive")) act("all"); });
  discardAll.addEventListener("click", () => { if (confirmAll("Discard")) dropWithReason("all"); });
  typeFilter.addEventListener("change", sync);
  errorFilter.addEventListener("input", sync);
  const poll = livePoll(refresh);
}

function discardedPage() {
  const holder = el("div");
  const count = el("span", { class: "live" });
  main().replaceChildren(el("h2", {}, "Dead letters"), dlqTabs("discarded"), el("div", { class: "bar" }, count), holder);
  let shown = "";
  livePoll(async () => {
    const { body } = await api(`/v1/dlq?${qs({ state: "discarded", limit: DLQ_FETCH_LIMIT })}`);
    const events = body.events || [];
    const total = body.total ?? events.length;
    const shownOf = events.length < total ? `the latest ${events.length} of ${total} discarded shown` : `${total} discarded`;
    count.textContent = `${shownOf} · live every ${LIVE_MS / 1000} s`;
    const key = JSON.stringify(events);
    if (key === shown) return;
    shown = key;
    holder.replaceChildren(events.length
      ? listTable([["Event", "id"], ["Source", "source"], ["Attempts", "attempts"], ["Last error", "err"], ["Reason", "reason"], ["Discarded", "time"]], events.map((e) => {
        const event = eventOf(e);
        return el(
          "tr",
          { "data-event-id": e.eventId },
          clipCell(e.eventId, { class: "id" }, runLink(e.eventId)),
          clipCell(`${event.sourceType || "?"} · ${event.sourceId || "?"}`),
          el("td", { class: "num-cell" }, String(e.attempts ?? "")),
          errorCell(e.error),
          el("td", { "data-testid": "discard-reason" }, fewLines(e.reason || "(no reason given)")),
          clipCell(fmtTime(e.at || e.discardedAt)),
        );
      }), { class: "discarded list" }, "Discarded events")
      : el("div", { class: "empty" }, "Nothing was discarded. A discarded event keeps an audit record here: who knows why it was dropped, and when."));
  });
}

function outboxDeadPage() {
  const holder = el("div");
  const count = el("span", { class: "live", "data-testid": "outbox-count" });
  const sendAll = el("button", { type: "button", class: "secondary" }, "Send all again");
  const outcome = outcomeLine({ "data-testid": "outbox-outcome" });
  main().replaceChildren(el("h2", {}, "Dead letters"), dlqTabs("outbox"), el("div", { class: "bar" }, sendAll, count), outcome, holder);
  let shown = "";
  async function send(body) {
    try {
      const { body: result } = await postJson("/v1/outbox/redrive", body);
      const notDead = (result.notDead || []).length;
      outcome.say(`Sent again: ${(result.redriven || []).length}${notDead ? `; no longer dead: ${notDead}` : ""}. Each keeps its idempotency key.`);
    } catch (err) {
      outcome.say(`Send failed: ${err.message}`, "bad");
    }
    poll.poke();
  }
  sendAll.addEventListener("click", () => send({ all: true }));
  const poll = livePoll(async () => {
    const { body } = await api(`/v1/outbox/dead?${qs({ limit: DLQ_FETCH_LIMIT })}`);
    const records = body.records || [];
    const total = body.total ?? records.length;
    count.textContent = `${records.length < total ? `the latest ${records.length} of ${total}` : total} dead · live every ${LIVE_MS / 1000} s`;
    sendAll.disabled = records.length === 0;
    const key = JSON.stringify(records);
    if (key === shown) return;
    shown = key;
    holder.replaceChildren(records.length
      ? listTable([["Record", "source"], ["Scope", "source"], ["Tries", "attempts"], ["Last error", "err"], ["Died", "time"], ["Actions", "actions"]], records.map((r) => el(
        "tr",
        { "data-record-id": r.recordId },
        clipCell(r.recordId, { class: "id" }, r.eventId ? runLink(r.eventId, r.recordId) : r.recordId),
        clipCell(r.scopeKey),
        el("td", { class: "num-cell" }, String(r.attempts ?? "")),
        errorCell(r.lastError),
        clipCell(fmtTime(r.deadAt)),
        el("td", { class: "row-actions" }, el("button", { type: "button", class: "secondary", onclick: () => send({ records: [{ scopeKey: r.scopeKey, recordId: r.recordId }] }) }, "Send again")),
      )), { class: "outbox-dead list" }, "Dead outbound calls")
      : el("div", { class: "empty" }, "No outbound call is dead. A webhook or an agent run that fails every attempt lands here, and can be sent again."));
  });
}
