// Conversation (#/conversation?userId=…&agentId=…&topicId=…): a conversation's messages with the receipts each
// one caused next to it, kept up to date by the receipts stream (server-sent events over fetch) and by polling
// while the stream is down. Also the receipt card the run page reuses (run_detail.js). Helpers (el, api, qs, …)
// live in app.js.
"use strict";

// Kind icons are letters in a coloured disc: no icon font or emoji font is needed on the machine.
const KIND_ICONS = { memory: "M", skill: "S", review: "R", context: "C" };
const UNDO_LABELS = {
  pending: "Rolling back",
  rolled_back: "Reverted",
  conflict: "Newer version",
  not_found: "Cannot undo",
  failed: "Failed",
  unsupported: "Unsupported",
};

// A browser test shortens these timings by setting window.agentSignalTimings before the scripts run
// (tests/browser/test_conversation_live.py); the app itself never sets it.
function timing(name, ms) {
  const value = Number((window.agentSignalTimings || {})[name]);
  return Number.isFinite(value) && value > 0 ? value : ms;
}

// LobeHub's polling backoff while the live stream is down: 3 s, then twice as long after each poll that brought
// nothing new, at most 60 s. Polling never ends by itself while the stream is down (a page that silently stops
// updating was the defect): it ends when the stream opens, when the page is left, or when the API refuses the
// listing (401, 403, 404: asking again cannot help), and then the status says so.
const POLL_INITIAL_MS = timing("pollInitialMs", 3000);
const POLL_MAX_MS = timing("pollMaxMs", 60000);
// The live stream reconnects after 1 s, 2 s, 4 s … at most 30 s (longer when the server's Retry-After says so),
// for as long as the page is open, and the page is Live again once it opens. An attempt counts as failed also
// when the stream opened and ended before it brought an event or stayed open STREAM_STABLE_MS (a proxy that
// closes streaming responses must not cause a reconnect, and a catch-up, every second). After this many failed
// attempts in a row, the status calls the stream unavailable. 401, 403 and 404 end the retries (polling goes
// on), and so does an ending the server announces as final (STREAM_FINAL_COMMENTS).
const STREAM_RETRY_INITIAL_MS = timing("streamRetryInitialMs", 1000);
const STREAM_RETRY_MAX_MS = timing("streamRetryMaxMs", 30000);
const STREAM_STABLE_MS = timing("streamStableMs", 30000);
const STREAM_QUIET_FAILURES = 5;
// The server sends a `: keep-alive` comment every 15 s (PING_S, producers/http/routes/self_iteration.py): a
// stream that brought nothing at all (not even that) for 2.5 times as long is taken for dead (a NAT timeout, a
// laptop that slept) and reopened. Also the wait for the stream's headers.
const STREAM_IDLE_MS = timing("streamIdleMs", 37500);
// The comments the server ends a stream with when reopening it cannot help (producers/http/streams/receipts.py).
const STREAM_FINAL_COMMENTS = ["credential no longer valid", "user erased"];
// Each wait is stretched by a random 0.5 to 1.5: tabs that lost the server together do not retry in lockstep.
const jitter = (ms) => ms * (0.5 + Math.random());
// A catch-up (the stream (re)opened, a `resync`, a poll) re-lists the receipts created since this long before
// the newest one seen, skipping ids already shown: a receipt's createdAt is its event's time, not its commit's,
// so one committed late (a paused scope, a retry, a redrive) is dated before receipts already shown. As the
// TypeScript client's catchUpLagMs (docs/api.md, GET /v1/receipts/stream).
const RECEIPT_CATCH_UP_LAG_MS = 10 * 60000;
const RECEIPT_PAGE_SIZE = 50; // GET /v1/receipts's largest page
const RECEIPT_MAX_PAGES = 40; // a listing follows the cursor for at most 2,000 receipts
const RECEIPTS_KEPT = 2000; // the page keeps the newest this many receipts (a stream brings more for ever)
const REFUSALS = [401, 403, 404];

// ---------------------------------------------------------------------------------------------------------
// Server-sent events over fetch() (EventSource cannot send an Authorization header).

// A parser for a text/event-stream body: feed it text as it arrives; it calls onEvent(type, data, id) once per
// complete event and onComment(text) per comment line (the SSE rules: lines end in \r\n, \n or \r; a blank line
// ends an event; ":" starts a comment; the value after "field:" loses one leading space; several data lines are
// joined with \n).
function sseParser(onEvent, onComment) {
  let buffer = "";
  let type = "";
  let data = [];
  let id = null;
  const line = (text) => {
    if (text === "") {
      if (data.length) onEvent(type || "message", data.join("\n"), id);
      type = ""; data = [];
      return;
    }
    if (text.startsWith(":")) { onComment(text.slice(1).trim()); return; }
    const colon = text.indexOf(":");
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") type = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  };
  return (chunk) => {
    buffer += chunk;
    const lines = buffer.split(/\r\n|\n|\r/);
    buffer = lines.pop();
    for (const text of lines) line(text);
  };
}

// Reads one stream until it ends; rejects with error.status, error.code and error.retryAfterS when it is refused,
// and with error.stalled when neither the headers nor, later, any bytes (a keep-alive comment will do) came for
// idleMs: the connection is then aborted.
async function readEventStream(path, signal, { open, event, comment, idleMs }) {
  const connection = new AbortController();
  const abort = () => connection.abort();
  signal.addEventListener("abort", abort);
  let stalled = false;
  let watchdog = null;
  const alive = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => { stalled = true; connection.abort(); }, idleMs);
  };
  try {
    alive();
    const response = await fetch(path, { headers: { ...headers(), accept: "text/event-stream" }, signal: connection.signal, cache: "no-store" });
    const type = response.headers.get("content-type") || "";
    if (!response.ok || !response.body || !type.startsWith("text/event-stream")) {
      const error = new Error(`stream answered HTTP ${response.status}`);
      error.status = response.status;
      error.retryAfterS = Number(response.headers.get("retry-after")) || 0;
      try { error.code = ((await response.json()).error || {}).code || ""; } catch { error.code = ""; }
      throw error;
    }
    alive();
    open();
    const parse = sseParser(event, comment);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      alive();
      parse(decoder.decode(value, { stream: true }));
    }
  } catch (err) {
    if (!stalled || signal.aborted) throw err;
    const error = new Error("stream went quiet");
    error.stalled = true;
    throw error;
  } finally {
    clearTimeout(watchdog);
    signal.removeEventListener("abort", abort);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Receipts and messages

// The messages by id, and each message's first assistant reply by the message's id: built once per render.
function messageIndex(messages) {
  const byId = new Map();
  const replyTo = new Map();
  for (const m of messages) {
    byId.set(m.id, m);
    if (m.role === "assistant" && !replyTo.has(m.parentId)) replyTo.set(m.parentId, m);
  }
  return { byId, replyTo };
}

function anchorFor(receipt, { byId, replyTo }) {
  if (receipt.anchorMessageId) return byId.has(receipt.anchorMessageId) ? receipt.anchorMessageId : null;
  if (receipt.triggerMessageId) {
    const reply = replyTo.get(receipt.triggerMessageId);
    if (reply) return reply.id;
    return byId.has(receipt.triggerMessageId) ? receipt.triggerMessageId : null;
  }
  return null;
}

function receiptCard(receipt, owner, state) {
  const meta = receipt.metadata || {};
  const actions = el("div", { class: "actions" });
  const target = receipt.target || {};
  if (receipt.kind === "memory" || receipt.kind === "skill") {
    // a refusal is in the banner already
    actions.append(el("button", { class: "secondary", type: "button", "aria-label": `Open ${receipt.title}`, onclick: () => openDocument(receipt, owner).catch(() => {}) }, "Open"));
  }
  const rollback = state.undo.get(receipt.id) || meta.rollbackStatus;
  // Shown when a rollback was ever possible; after one, the persisted state (Reverted, Newer version, …).
  const undoable = meta.documentId && meta.historyId && (rollback === "available" || UNDO_LABELS[rollback]);
  if (undoable) {
    const label = rollback === "available" ? "Undo" : UNDO_LABELS[rollback] || rollback;
    // aria-disabled, not disabled: the button keeps keyboard focus while the rollback runs and after it
    const button = el("button", { type: "button", "data-testid": "undo", "aria-label": `${label} ${receipt.title}`, "aria-disabled": rollback !== "available" && "true" }, label);
    if (rollback === "available") button.addEventListener("click", () => undo(receipt, state));
    actions.append(button);
  }
  return el(
    "div",
    { class: "receipt", "data-receipt-id": receipt.id, "data-kind": receipt.kind },
    el("span", { class: `icon ${receipt.kind}`, "aria-hidden": "true", title: receipt.kind }, KIND_ICONS[receipt.kind] || "•"),
    el(
      "div",
      {},
      el("div", { class: "title" }, el("bdi", {}, receipt.title), " ", receiptBadge(receipt, rollback)),
      el("div", { dir: "auto" }, receipt.detail || target.summary || ""),
      el("div", { class: "meta" }, `${receipt.kind} · ${fmtTime(receipt.createdAt)}`),
    ),
    actions,
  );
}

// The receipt's state as it is now: after an Undo the badge says what the rollback did, not "applied".
const ROLLBACK_BADGES = { pending: "reverting", rolled_back: "reverted", conflict: "conflict", failed: "undo failed" };

function receiptBadge(receipt, rollback) {
  const status = String(ROLLBACK_BADGES[rollback] || receipt.status || "");
  return el("span", { class: `badge ${status.replace(/\s+/g, "-")}`, "data-testid": "receipt-status", hidden: !status }, status);
}

async function openDocument(receipt, owner) {
  const target = receipt.target || {};
  const meta = receipt.metadata || {};
  let path;
  if (receipt.kind === "memory") path = `/v1/memories/${encodeURIComponent(target.memoryId || target.id)}?${qs({ userId: receipt.userId || owner.userId })}`;
  else path = `/v1/skills/${encodeURIComponent(meta.documentId || target.documentId || target.id)}?${qs({ userId: receipt.userId || owner.userId, agentId: receipt.agentId || owner.agentId })}`;
  const { body } = await api(path);
  $("#doc-title").textContent = body.title || receipt.title;
  $("#doc-body").textContent = body.content || body.summary || JSON.stringify(body, null, 2);
  showModalFrom($("#doc-dialog"));
}

async function undo(receipt, state) {
  if (state.undo.get(receipt.id) === "pending") return; // double clicks are ignored while pending
  state.undo.set(receipt.id, "pending");
  state.render();
  state.announce(`${UNDO_LABELS.pending}: ${receipt.title}`);
  try {
    const { body } = await api(`/v1/receipts/${encodeURIComponent(receipt.id)}/rollback?${qs({ userId: receipt.userId })}`, { method: "POST", allow: [404] });
    if (state.receipts.has(receipt.id)) state.undo.set(receipt.id, body.status); // not for one the cap dropped
    if (body.receipt && state.receipts.has(receipt.id)) state.receipts.set(receipt.id, body.receipt); // not one the cap dropped meanwhile
  } catch {
    if (state.receipts.has(receipt.id)) state.undo.set(receipt.id, "failed");
  }
  state.render();
  const outcome = state.undo.get(receipt.id);
  if (outcome) state.announce(`${UNDO_LABELS[outcome] || outcome}: ${receipt.title}`);
}

function renderConversation(list, owner, state) {
  if (!owner.userId) {
    list.replaceChildren(emptyState());
    return;
  }
  if (!state.messages.length) {
    list.replaceChildren(el("div", { class: "empty" }, "No messages in this conversation yet. ", emptyHint(owner)));
    return;
  }
  const receiptsByAnchor = new Map();
  const index = messageIndex(state.messages);
  for (const r of [...state.receipts.values()].sort((a, b) => a.createdAt - b.createdAt)) {
    const anchor = anchorFor(r, index);
    if (!anchor) continue;
    if (!receiptsByAnchor.has(anchor)) receiptsByAnchor.set(anchor, []);
    receiptsByAnchor.get(anchor).push(r);
  }
  keepFocus(list, () => list.replaceChildren(
    ...state.messages.map((m) =>
      el(
        "article",
        { class: `msg ${m.role}`, "data-message-id": m.id, "aria-label": `${m.role} message` },
        el("div", { class: "who" }, `${m.role} · ${fmtTime(m.createdAt)}`),
        el("div", { dir: "auto" }, m.content),
        receiptsByAnchor.has(m.id) ? el("div", { class: "receipts" }, receiptsByAnchor.get(m.id).map((r) => receiptCard(r, owner, state))) : null,
      ),
    ),
  ));
}

function emptyState() {
  return el("div", { class: "empty" }, el("p", {}, "Choose a user, agent and topic above to see the conversation and its receipts."), emptyHint({}));
}

// ---------------------------------------------------------------------------------------------------------
// The page

function conversationPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const saved = JSON.parse(sessionStorage.getItem(OWNER_KEY) || "{}");
  const owner = {
    userId: params.get("userId") || saved.userId || "",
    agentId: params.get("agentId") || saved.agentId || "",
    topicId: params.get("topicId") || saved.topicId || "",
  };
  const state = { messages: [], receipts: new Map(), undo: new Map(), render: () => {}, announce: () => {} };
  const form = el(
    "form",
    { class: "bar", "aria-label": "Choose a conversation" },
    el("label", {}, "User", el("input", { name: "userId", value: owner.userId, required: true })),
    el("label", {}, "Agent", el("input", { name: "agentId", value: owner.agentId, required: true })),
    el("label", {}, "Topic", el("input", { name: "topicId", value: owner.topicId, required: true })),
    el("button", { type: "submit" }, "Show"),
  );
  const known = el("label", {}, "Recent conversations", el("select", { "aria-label": "Recent conversations" }, el("option", { value: "" }, "—")));
  const live = el("span", { class: "live", "aria-live": "polite", "data-testid": "live-status" });
  const progress = el("span", { class: "receipts-progress", "data-testid": "receipts-progress" });
  // The list is redrawn as receipts come and go; a screen reader hears only what is new, here, in a sentence.
  const list = el("div", { class: "messages" });
  const news = el("p", { class: "visually-hidden", role: "status", "data-testid": "conversation-news" });
  main().replaceChildren(el("h2", {}, "Conversation"), form, el("div", { class: "bar" }, known, live, progress), news, list);
  state.render = () => renderConversation(list, owner, state);
  state.announce = (text) => { news.textContent = text; };

  api("/v1/conversations").then(({ body }) => {
    const select = known.querySelector("select");
    for (const c of body.conversations) {
      const name = `${c.userId} / ${c.agentId} / ${c.topicId}`;
      select.append(el("option", { value: JSON.stringify(c), title: name }, name));
    }
    select.addEventListener("change", () => {
      if (!select.value) return;
      const c = JSON.parse(select.value);
      for (const key of ["userId", "agentId", "topicId"]) form.elements[key].value = c[key];
      form.requestSubmit();
    });
  }).catch(() => {});

  let feed = null; // the receipts of the conversation shown (receiptFeed), replaced when another is chosen
  let lastMessageId = null;

  async function loadMessages() {
    if (!owner.userId) return;
    const shown = feed;
    const { body } = await api(`/v1/conversations/messages?${qs(owner)}`);
    if (shown !== feed) return; // another conversation was chosen meanwhile
    const last = body.messages.length ? body.messages[body.messages.length - 1].id : null;
    const changed = JSON.stringify(body.messages) !== JSON.stringify(state.messages);
    state.messages = body.messages;
    if (last && last !== lastMessageId) {
      lastMessageId = last;
      feed.newMessage(); // while the stream is down, a new message brings the next poll forward
    }
    if (changed) state.render();
  }

  async function start() {
    if (feed) feed.stop();
    state.messages = [];
    state.receipts = new Map();
    live.textContent = "";
    progress.textContent = "";
    const mine = receiptFeed(owner, state, { live, progress });
    feed = mine;
    state.render();
    if (!owner.userId) return;
    sessionStorage.setItem(OWNER_KEY, JSON.stringify(owner)); // the tab's only, like the token
    try { await loadMessages(); } catch { /* shown in the banner */ }
    if (feed === mine) mine.start(); // not when another conversation was chosen meanwhile
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    for (const key of ["userId", "agentId", "topicId"]) owner[key] = form.elements[key].value.trim();
    start();
  });

  const messageTimer = setInterval(() => { loadMessages().catch((err) => { if ([401, 403].includes(err.status)) clearInterval(messageTimer); }); }, 1500);
  teardown.push(() => { clearInterval(messageTimer); if (feed) feed.stop(); });
  start();
}

// The receipts of one conversation (`owner`) in `state.receipts`, kept up to date until stop(): first the whole
// list (every page, newest first), then the live stream's receipts, with a catch-up (see
// RECEIPT_CATCH_UP_LAG_MS) when the stream opens or reopens, on each `resync` and on each poll while the stream
// is down. Receipts are kept by id, so one read twice is shown once; a listing that finds one changed (an undo)
// shows it as it is now. `ui.live` says how the page is kept up to date, `ui.progress` how far a long read got.
function receiptFeed(owner, state, ui) {
  let stopped = false;
  let complete = false; // the whole list was read once; until then every listing reads it all
  let newest = 0; // createdAt of the newest receipt seen, never ahead of this machine's clock
  let floor = -Infinity; // once RECEIPTS_KEPT are kept: createdAt of the oldest kept; older ones are not taken
  let reading = null; // the listing under way; one asked for meanwhile runs once after it (`again`)
  let again = false;
  let refusal = ""; // why the API refused the listing (polling stopped)
  let stream = null; // { controller, timer, open, failures, … } while the page streams or waits to reconnect
  let streamNote = "";
  let polling = false;
  let pollRound = 0; // a tick of an older polling round does not reschedule itself
  let pollTimer = null;
  let pollWait = POLL_INITIAL_MS;
  const seconds = (ms) => `${Math.max(1, Math.round(ms / 1000))} s`;

  function say() {
    if (stopped) return;
    if (refusal) ui.live.textContent = refusal;
    else if (stream && stream.open) ui.live.textContent = "Live";
    else ui.live.textContent = `${streamNote || "Connecting"}; polling every ${seconds(pollWait)}.`;
  }

  // Take `receipts` in, and draw the list again when that changed it; with `quiet`, only note that it changed
  // (`drawn` false): a whole read draws after its first page and at its end, not after each of its 40 pages (it
  // drew some 41,000 cards to show 2,000).
  let drawn = true;
  function keep(receipts, quiet = false) {
    const fresh = [];
    let changed = false;
    for (const r of receipts) {
      const before = state.receipts.get(r.id);
      if (!before && r.createdAt < floor && state.receipts.size >= RECEIPTS_KEPT) continue; // dropped already
      if (!before) fresh.push(r);
      if (!before || JSON.stringify(before) !== JSON.stringify(r)) { state.receipts.set(r.id, r); changed = true; }
      if (typeof r.createdAt === "number") newest = Math.max(newest, Math.min(r.createdAt, serverNow()));
    }
    if (state.receipts.size > RECEIPTS_KEPT) { // the oldest go, shown or not
      const kept = [...state.receipts.values()].sort((a, b) => b.createdAt - a.createdAt);
      for (const r of kept.slice(RECEIPTS_KEPT)) { state.receipts.delete(r.id); state.undo.delete(r.id); }
      floor = kept[RECEIPTS_KEPT - 1].createdAt;
    }
    if (changed && quiet) drawn = false;
    else if (changed || !drawn) { state.render(); drawn = true; }
    if (complete && fresh.length) state.announce(fresh.length === 1 ? `New receipt: ${fresh[0].title}` : `${fresh.length} new receipts`);
    return fresh.length;
  }

  // One listing, following the cursor: the whole list (also while it is empty, which is cheap), or a catch-up
  // from the lag before the newest seen. Answers how many receipts were new.
  async function list() {
    const whole = !complete || !newest;
    const since = whole ? undefined : Math.max(0, newest - RECEIPT_CATCH_UP_LAG_MS);
    let news = 0;
    let read = 0;
    let cursor;
    try {
      for (let page = 0; page < RECEIPT_MAX_PAGES; page += 1) {
        const { body } = await api(`/v1/receipts?${qs({ ...owner, limit: RECEIPT_PAGE_SIZE, sinceCreatedAt: since, cursor })}`);
        if (stopped) return 0;
        news += keep(body.receipts, whole && page > 0); // a whole read draws its first page, then all at its end
        read += body.receipts.length;
        cursor = body.cursor;
        if (!cursor) break;
        if (whole) ui.progress.textContent = `Reading receipts… ${read} so far.`; // a catch-up reads quietly
      }
    } catch (err) {
      if (!stopped) { ui.progress.textContent = ""; keep([]); } // what the pages read so far is drawn
      throw err;
    }
    keep([]); // draws what the quiet pages read
    ui.progress.textContent = cursor && whole ? `Showing the newest ${read} receipts (the older ones are not read).` : "";
    complete = true;
    return news;
  }

  function refresh() {
    if (reading) { again = true; return reading; }
    reading = (async () => {
      let news = 0;
      try {
        do { again = false; news += await list(); } while (again && !stopped);
      } finally { reading = null; }
      return news;
    })();
    return reading;
  }

  function refuse(err) {
    refusal = `Updates stopped: the API refused to list this conversation's receipts (HTTP ${err.status}).${err.status === 401 ? " The token may have expired: enter a new one under “API token”." : ""}`;
    stopPolling();
    stopStream();
    say();
  }

  function stopPolling() {
    pollRound += 1;
    polling = false;
    clearTimeout(pollTimer);
  }

  // Polls now and then with the backoff; `soon`: from the shortest wait again even if polling already.
  function startPolling(soon = false) {
    if (stopped || refusal || (polling && !soon)) return;
    stopPolling();
    polling = true;
    const round = pollRound;
    let empty = 0;
    const tick = async () => {
      let news = 0;
      let retryAfterMs = 0;
      try { news = await refresh(); } catch (err) {
        if (REFUSALS.includes(err.status)) { refuse(err); return; }
        retryAfterMs = (err.retryAfterS || 0) * 1000;
      }
      if (stopped || round !== pollRound) return;
      empty = news ? 0 : empty + 1;
      const backoff = Math.min(POLL_INITIAL_MS * 2 ** Math.max(empty - 1, 0), POLL_MAX_MS);
      pollWait = Math.max(retryAfterMs, jitter(Math.max(retryAfterMs, backoff)));
      say();
      pollTimer = setTimeout(tick, pollWait);
    };
    pollWait = POLL_INITIAL_MS;
    say();
    tick();
  }


  // The live stream: fetch() with the Authorization header, reconnecting with backoff for as long as the page is
  // open; polling covers the gaps.
  function startStream() {
    stopStream();
    if (!window.fetch || !window.ReadableStream || !window.TextDecoder) { streamNote = "Live updates need a newer browser"; startPolling(); return; }
    const current = { controller: new AbortController(), timer: null, open: false, openedAt: 0, failures: 0, final: "" };
    stream = current;
    const event = (type, data) => {
      if (stopped) return;
      current.failures = 0; // the stream works: the next interruption retries after the shortest wait again
      if (type === "receipt") keep([JSON.parse(data)]);
      else if (type === "resync") refresh().catch(() => {}); // the server dropped some announcements: catch up
    };
    const comment = (text) => { if (STREAM_FINAL_COMMENTS.includes(text)) current.final = text; };
    const connect = async () => {
      let failure = {};
      try {
        await readEventStream(`/v1/receipts/stream?${qs(owner)}`, current.controller.signal, {
          open: () => {
            current.open = true;
            current.openedAt = Date.now();
            stopPolling();
            say();
            refresh().catch(() => {}); // whatever arrived while the stream was down (or before it began)
          },
          event,
          comment,
          idleMs: STREAM_IDLE_MS,
        });
      } catch (err) {
        if (current.controller.signal.aborted) return;
        failure = err;
      }
      if (stopped || stream !== current) return;
      if (current.open && Date.now() - current.openedAt >= STREAM_STABLE_MS) current.failures = 0;
      current.open = false;
      if (REFUSALS.includes(failure.status) || current.final) { // retrying cannot help: polling only
        streamNote = current.final ? `Live stream ended (${current.final})` : `Live stream refused (HTTP ${failure.status})`;
        startPolling();
        return;
      }
      current.failures += 1;
      const retryAfterMs = (failure.retryAfterS || 0) * 1000;
      const backoff = Math.min(STREAM_RETRY_INITIAL_MS * 2 ** (current.failures - 1), STREAM_RETRY_MAX_MS);
      const delay = Math.max(retryAfterMs, jitter(Math.max(retryAfterMs, backoff)));
      const retry = `retrying in ${seconds(delay)}`;
      if (failure.status === 429) streamNote = `Live stream refused: too many live streams open${failure.code ? ` (${failure.code})` : ""}; ${retry}`;
      else if (current.failures > STREAM_QUIET_FAILURES) streamNote = `Live stream unavailable; ${retry}`;
      else if (failure.stalled) streamNote = `Live stream went quiet; ${retry}`;
      else streamNote = `Live stream interrupted; ${retry}`;
      current.timer = setTimeout(connect, delay);
      startPolling(); // keeps its backoff when already polling
      say();
    };
    connect();
  }

  function stopStream() {
    if (!stream) return;
    clearTimeout(stream.timer);
    stream.controller.abort();
    stream = null;
  }

  return {
    async start() {
      ui.progress.textContent = "Reading receipts…";
      try { await refresh(); } catch { /* shown in the banner; the next listing reads the whole list again */ }
      if (!stopped) startStream();
    },
    newMessage() { if (polling) startPolling(true); },
    stop() { stopped = true; stopPolling(); stopStream(); },
  };
}
