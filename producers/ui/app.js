// Agent Signal UI: receipts next to the messages that caused them, and the operator's console (runs and their
// detail, dead letters, send and replay, scopes and workers, overview). Plain JavaScript, no dependencies, no
// CDN. This file holds the shared helpers, the Conversation page and the router, and is loaded last; each
// other page is a file of its own (runs.js, run_detail.js, chains.js, dlq.js, send.js, scopes.js, overview.js,
// examples.js) that only defines functions. Every API error is shown in the banner.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const main = () => $("#main");
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
// LobeHub's polling backoff when the live stream is unavailable.
const POLL_INITIAL_MS = 3000;
const POLL_MAX_MS = 60000;
const POLL_WINDOW_MS = 5 * 60000;
// The live stream reconnects after 1 s, 2 s, 4 s … (at most 30 s); after this many attempts in a row that
// never opened, the page stays on polling. 401, 403 and 404 go to polling at once (retrying cannot help).
const STREAM_RETRY_INITIAL_MS = 1000;
const STREAM_RETRY_MAX_MS = 30000;
const STREAM_MAX_FAILURES = 5;
const TOKEN_KEY = "agentSignalToken";
const OWNER_KEY = "agentSignalOwner"; // the conversation page's last user, agent and topic (sessionStorage)

let teardown = [];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// The banner shows the last call that failed (`call`: its method and path). It goes when that call succeeds again
// (a refresh that recovers), when the next action starts (any call but a GET; a Find by id lookup), and when the
// page changes.
let failedCall = null;

function showError(message, call = null) {
  const box = $("#error");
  failedCall = message ? call : null;
  if (!message) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = message;
  box.hidden = false;
}

// ---------------------------------------------------------------------------------------------------------
// The credential. A user token handed over in the page's fragment (`/#token=…`, or `&token=…` after a page's
// query) never reaches the server: it is moved to sessionStorage and removed from the address bar before
// anything else runs. A key typed into the "API token" field is kept in sessionStorage too, never in
// localStorage: it lasts as long as the tab, and closing the tab forgets it (a key kept in localStorage by an
// older version is removed at load). Requests carry it in the Authorization header only, never in a URL (URLs
// end up in logs).

function adoptFragmentToken() {
  const hash = location.hash.slice(1);
  const [route, query] = hash.startsWith("token=") ? ["", hash] : [hash.split("?")[0], hash.split("?").slice(1).join("?")];
  const params = new URLSearchParams(query);
  const token = params.get("token");
  if (token === null) return;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  params.delete("token");
  const rest = route + (params.toString() ? `?${params}` : "");
  history.replaceState(null, "", `${location.pathname}${location.search}${rest ? `#${rest}` : ""}`);
}

function currentToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function headers() {
  const token = currentToken();
  const h = { "content-type": "application/json" };
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

// ---------------------------------------------------------------------------------------------------------
// Server-sent events over fetch() (EventSource cannot send an Authorization header).

// A parser for a text/event-stream body: feed it text as it arrives; it calls onEvent(type, data, id) once per
// complete event (the SSE rules: lines end in \r\n, \n or \r; a blank line ends an event; ":" starts a comment;
// the value after "field:" loses one leading space; several data lines are joined with \n).
function sseParser(onEvent) {
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
    if (text.startsWith(":")) return;
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

// Reads one stream until it ends; rejects with error.status (and error.retryAfterS) when it is refused.
async function readEventStream(path, signal, { open, event }) {
  const response = await fetch(path, { headers: { ...headers(), accept: "text/event-stream" }, signal, cache: "no-store" });
  const type = response.headers.get("content-type") || "";
  if (!response.ok || !response.body || !type.startsWith("text/event-stream")) {
    const error = new Error(`stream answered HTTP ${response.status}`);
    error.status = response.status;
    error.retryAfterS = Number(response.headers.get("retry-after")) || 0;
    throw error;
  }
  open();
  const parse = sseParser(event);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parse(decoder.decode(value, { stream: true }));
  }
}

// A user token reaches only its own user's data: an operator route answers it 403 with this message, and the
// console then says once what is needed instead of that 403 (the Conversation page and Send work with one).
const USER_TOKEN_REFUSAL = "a user token reaches only";
const USER_TOKEN_NOTICE = "The operator pages need an API key: the token given is a user token, which reaches only its own user's conversation (receipts, memories, skills). Enter an API key under “API token”; with a user token, use the Conversation page or Send.";

// The answer's status and JSON body (and Retry-After, in s); a refusal not in `allow` is shown in the banner
// and thrown (error.status, error.retryAfterS).
async function api(path, options = {}) {
  const method = options.method || "GET";
  const call = `${method} ${path.split("?")[0]}`;
  if (method !== "GET") showError("");
  let response;
  try {
    response = await fetch(path, { ...options, headers: headers() });
  } catch (err) {
    showError(`Cannot reach the API: ${err.message}`, call);
    throw err;
  }
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = null; }
  const retryAfterS = Number(response.headers.get("retry-after")) || 0;
  if (!response.ok && !(options.allow || []).includes(response.status)) {
    const detail = body && body.error ? `${body.error.message}${body.error.field ? ` (field: ${body.error.field})` : ""}` : `HTTP ${response.status}`;
    const userToken = response.status === 403 && String(detail).startsWith(USER_TOKEN_REFUSAL);
    showError(userToken ? USER_TOKEN_NOTICE : `${method} ${path}: ${detail}`, call);
    throw Object.assign(new Error(userToken ? USER_TOKEN_NOTICE : detail), { status: response.status, retryAfterS });
  }
  if (call === failedCall) showError("");
  return { status: response.status, body, retryAfterS };
}

function fmtTime(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleString();
}

function qs(params) {
  return new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "")).toString();
}

// ---------------------------------------------------------------------------------------------------------
// Conversation view

function anchorFor(receipt, messages) {
  const byId = new Map(messages.map((m) => [m.id, m]));
  if (receipt.anchorMessageId) return byId.has(receipt.anchorMessageId) ? receipt.anchorMessageId : null;
  if (receipt.triggerMessageId) {
    const reply = messages.find((m) => m.role === "assistant" && m.parentId === receipt.triggerMessageId);
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
    actions.append(el("button", { class: "secondary", type: "button", "aria-label": `Open ${receipt.title}`, onclick: () => openDocument(receipt, owner) }, "Open"));
  }
  const rollback = state.undo.get(receipt.id) || meta.rollbackStatus;
  // Shown when a rollback was ever possible; after one, the persisted state (Reverted, Newer version, …).
  const undoable = meta.documentId && meta.historyId && (rollback === "available" || UNDO_LABELS[rollback]);
  if (undoable) {
    const label = rollback === "available" ? "Undo" : UNDO_LABELS[rollback] || rollback;
    const button = el("button", { type: "button", "data-testid": "undo", "aria-label": `Undo ${receipt.title}`, disabled: rollback !== "available" }, label);
    button.addEventListener("click", () => undo(receipt, state));
    actions.append(button);
  }
  return el(
    "div",
    { class: "receipt", "data-receipt-id": receipt.id, "data-kind": receipt.kind },
    el("span", { class: `icon ${receipt.kind}`, "aria-hidden": "true", title: receipt.kind }, KIND_ICONS[receipt.kind] || "•"),
    el(
      "div",
      {},
      el("div", { class: "title" }, receipt.title, " ", receiptBadge(receipt, rollback)),
      el("div", {}, receipt.detail || target.summary || ""),
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
  $("#doc-dialog").showModal();
}

async function undo(receipt, state) {
  if (state.undo.get(receipt.id) === "pending") return; // double clicks are ignored while pending
  state.undo.set(receipt.id, "pending");
  state.render();
  try {
    const { body } = await api(`/v1/receipts/${encodeURIComponent(receipt.id)}/rollback?${qs({ userId: receipt.userId })}`, { method: "POST", allow: [404] });
    state.undo.set(receipt.id, body.status);
    if (body.receipt) state.receipts.set(receipt.id, body.receipt);
  } catch {
    state.undo.set(receipt.id, "failed");
  }
  state.render();
}

function conversationPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const saved = JSON.parse(sessionStorage.getItem(OWNER_KEY) || "{}");
  const owner = {
    userId: params.get("userId") || saved.userId || "",
    agentId: params.get("agentId") || saved.agentId || "",
    topicId: params.get("topicId") || saved.topicId || "",
  };
  const state = { messages: [], receipts: new Map(), undo: new Map(), render: () => {} };
  const form = el(
    "form",
    { class: "bar", "aria-label": "Choose a conversation" },
    el("label", {}, "User", el("input", { name: "userId", value: owner.userId, required: true })),
    el("label", {}, "Agent", el("input", { name: "agentId", value: owner.agentId, required: true })),
    el("label", {}, "Topic", el("input", { name: "topicId", value: owner.topicId, required: true })),
    el("button", { type: "submit" }, "Show"),
  );
  const known = el("label", {}, "Recent conversations", el("select", { "aria-label": "Recent conversations" }, el("option", { value: "" }, "—")));
  const live = el("span", { class: "live", "aria-live": "polite" });
  const list = el("div", { class: "messages", "aria-live": "polite" });
  main().replaceChildren(el("h2", {}, "Conversation"), form, el("div", { class: "bar" }, known, live), list);

  api("/v1/conversations").then(({ body }) => {
    const select = known.querySelector("select");
    for (const c of body.conversations) {
      select.append(el("option", { value: JSON.stringify(c) }, `${c.userId} / ${c.agentId} / ${c.topicId}`));
    }
    select.addEventListener("change", () => {
      if (!select.value) return;
      const c = JSON.parse(select.value);
      for (const key of ["userId", "agentId", "topicId"]) form.elements[key].value = c[key];
      form.requestSubmit();
    });
  }).catch(() => {});

  state.render = () => {
    if (!owner.userId) {
      list.replaceChildren(emptyState());
      return;
    }
    if (!state.messages.length) {
      list.replaceChildren(el("div", { class: "empty" }, "No messages in this conversation yet. ", emptyHint(owner)));
    }
    const receiptsByAnchor = new Map();
    for (const r of [...state.receipts.values()].sort((a, b) => a.createdAt - b.createdAt)) {
      const anchor = anchorFor(r, state.messages);
      if (!anchor) continue;
      if (!receiptsByAnchor.has(anchor)) receiptsByAnchor.set(anchor, []);
      receiptsByAnchor.get(anchor).push(r);
    }
    if (state.messages.length) {
      list.replaceChildren(
        ...state.messages.map((m) =>
          el(
            "article",
            { class: `msg ${m.role}`, "data-message-id": m.id, "aria-label": `${m.role} message` },
            el("div", { class: "who" }, `${m.role} · ${fmtTime(m.createdAt)}`),
            el("div", {}, m.content),
            receiptsByAnchor.has(m.id) ? el("div", { class: "receipts" }, receiptsByAnchor.get(m.id).map((r) => receiptCard(r, owner, state))) : null,
          ),
        ),
      );
    }
  };

  let stopped = false;
  let pollTimer = null;
  let pollRound = 0; // a tick of an older polling round does not reschedule itself
  let stream = null; // { controller, timer, open } while the page streams (or waits to reconnect)
  let lastMessageId = null;
  let newest = 0;

  async function loadMessages() {
    if (!owner.userId) return;
    const { body } = await api(`/v1/conversations/messages?${qs(owner)}`);
    const last = body.messages.length ? body.messages[body.messages.length - 1].id : null;
    const changed = JSON.stringify(body.messages) !== JSON.stringify(state.messages);
    state.messages = body.messages;
    if (last && last !== lastMessageId) {
      lastMessageId = last;
      if (!(stream && stream.open)) startPolling(); // a new message restarts the polling window
    }
    if (changed) state.render();
  }

  async function loadReceipts() {
    const { body } = await api(`/v1/receipts?${qs({ ...owner, limit: 50, sinceCreatedAt: newest || undefined })}`);
    let news = 0;
    for (const r of body.receipts) {
      if (!state.receipts.has(r.id)) news += 1;
      state.receipts.set(r.id, r);
      newest = Math.max(newest, r.createdAt);
    }
    if (news) state.render();
    return news;
  }

  function stopPolling() {
    pollRound += 1;
    clearTimeout(pollTimer);
  }

  function startPolling() {
    stopPolling();
    const round = pollRound;
    const started = Date.now();
    let emptyRefreshes = 0;
    const tick = async () => {
      if (stopped || round !== pollRound) return;
      let news = 0;
      try { news = await loadReceipts(); } catch { news = 0; }
      if (stopped || round !== pollRound) return;
      emptyRefreshes = news ? 0 : emptyRefreshes + 1;
      const remaining = POLL_WINDOW_MS - (Date.now() - started);
      if (remaining <= 0) { live.textContent = "Polling stopped (no news for 5 minutes)."; return; }
      const interval = Math.min(POLL_INITIAL_MS * 2 ** Math.max(emptyRefreshes - 1, 0), POLL_MAX_MS, remaining);
      live.textContent = `Polling every ${Math.round(interval / 1000)} s`;
      pollTimer = setTimeout(tick, interval);
    };
    tick();
  }

  function onStreamEvent(type, data) {
    if (type === "receipt") {
      const r = JSON.parse(data);
      state.receipts.set(r.id, r);
      newest = Math.max(newest, r.createdAt);
      state.render();
    } else if (type === "resync") {
      loadReceipts().catch(() => {}); // the server dropped some announcements: re-read the list
    }
  }

  // The live stream: fetch() with the Authorization header, reconnecting with backoff; polling covers the
  // gaps and takes over for good when the stream keeps failing or is refused.
  function startStream() {
    stopStream();
    if (!window.fetch || !window.ReadableStream || !window.TextDecoder) { startPolling(); return; }
    const current = { controller: new AbortController(), timer: null, open: false, failures: 0 };
    stream = current;
    const connect = async () => {
      let retryAfterS = 0;
      try {
        await readEventStream(`/v1/receipts/stream?${qs(owner)}`, current.controller.signal, {
          open: () => {
            current.open = true;
            current.failures = 0;
            live.textContent = "Live";
            stopPolling();
            loadReceipts().catch(() => {}); // whatever arrived while the stream was down
          },
          event: onStreamEvent,
        });
      } catch (err) {
        if (current.controller.signal.aborted) return;
        if ([401, 403, 404].includes(err.status)) { fallBack(current); return; }
        retryAfterS = err.retryAfterS || 0;
      }
      if (stopped || stream !== current) return;
      current.open = false;
      current.failures += 1;
      if (current.failures > STREAM_MAX_FAILURES) { fallBack(current); return; }
      const delay = Math.max(retryAfterS * 1000, Math.min(STREAM_RETRY_INITIAL_MS * 2 ** (current.failures - 1), STREAM_RETRY_MAX_MS));
      startPolling();
      live.textContent = `Live stream interrupted; polling, reconnecting in ${Math.round(delay / 1000)} s.`;
      current.timer = setTimeout(connect, delay);
    };
    connect();
  }

  function fallBack(current) {
    if (stream !== current) return;
    stopStream();
    live.textContent = "Live stream unavailable; polling.";
    startPolling();
  }

  function stopStream() {
    if (!stream) return;
    clearTimeout(stream.timer);
    stream.controller.abort();
    stream = null;
  }

  async function start() {
    state.messages = [];
    state.receipts = new Map();
    newest = 0;
    state.render();
    if (!owner.userId) return;
    sessionStorage.setItem(OWNER_KEY, JSON.stringify(owner)); // the tab's only, like the token
    try {
      await loadMessages();
      await loadReceipts();
    } catch { /* shown in the banner */ }
    startStream();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    for (const key of ["userId", "agentId", "topicId"]) owner[key] = form.elements[key].value.trim();
    stopStream();
    stopPolling();
    start();
  });

  const messageTimer = setInterval(() => { loadMessages().catch((err) => { if ([401, 403].includes(err.status)) clearInterval(messageTimer); }); }, 1500);
  teardown.push(() => { stopped = true; clearInterval(messageTimer); stopPolling(); stopStream(); });
  start();
}

function emptyState() {
  return el("div", { class: "empty" }, el("p", {}, "Choose a user, agent and topic above to see the conversation and its receipts."), emptyHint({}));
}


// ---------------------------------------------------------------------------------------------------------
// Helpers the operator pages share (runs.js, run_detail.js, chains.js, dlq.js, send.js, scopes.js, overview.js).

// Statuses after which an event does not change by itself.
const TERMINAL = new Set(["done", "dead", "cancelled", "discarded", "erased"]);
const LIVE_MS = 2000; // the operator pages re-read their data every 2 s (and right after an action)

function postJson(path, body, options = {}) {
  return api(path, { ...options, method: "POST", body: JSON.stringify(body) });
}

function fmtAge(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return "";
  const s = Math.max(0, ms) / 1000;
  if (s < 1) return `${Math.round(ms)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

function pretty(value) {
  if (typeof value === "string") {
    try { return JSON.stringify(JSON.parse(value), null, 2); } catch { return value; }
  }
  return JSON.stringify(value, null, 2);
}

// The page's query (after "?" in the fragment) as an object, and a way to change it without a reload.
function hashParams() {
  return Object.fromEntries(new URLSearchParams(location.hash.split("?").slice(1).join("?")));
}

function replaceHashQuery(params) {
  const base = location.hash.split("?")[0] || "#/";
  const query = qs(params);
  history.replaceState(null, "", `${location.pathname}${location.search}${base}${query ? `?${query}` : ""}`);
}

// Calls fn now and then every `ms` until the page changes; `poke()` runs it at once (after an action).
// A round never overlaps the previous one. A round refused 401 or 403 stops it (asking again cannot help; the
// banner says why); after a 429 the next round waits longer (its Retry-After, at least twice the last wait).
function livePoll(fn, ms = LIVE_MS) {
  let timer = null;
  let stopped = false;
  let running = false;
  let wait = ms;
  const tick = async () => {
    if (stopped || running) return;
    running = true;
    clearTimeout(timer);
    try { await fn(); wait = ms; } catch (err) { // shown in the banner
      if (err && (err.status === 401 || err.status === 403)) stopped = true;
      wait = err && err.status === 429 ? Math.min(Math.max(wait * 2, err.retryAfterS * 1000), 60000) : ms;
    }
    running = false;
    if (!stopped) timer = setTimeout(tick, wait);
  };
  teardown.push(() => { stopped = true; clearTimeout(timer); });
  tick();
  return { poke: () => { if (!running) tick(); } };
}

// A line that says what the last action did (screen readers hear it too).
function outcomeLine(attrs = {}) {
  const node = el("p", { class: "outcome", role: "status", "aria-live": "polite", ...attrs });
  node.say = (text, kind = "ok") => { node.textContent = text; node.className = `outcome ${kind}`; };
  return node;
}

// ---------------------------------------------------------------------------------------------------------

const PAGES = {
  runs: runsPage,
  dlq: dlqPage,
  send: sendPage,
  scopes: scopesPage,
  overview: overviewPage,
  conversation: conversationPage,
  chains: chainsPage,
};

function route() {
  for (const fn of teardown) fn();
  teardown = [];
  showError("");
  const path = location.hash.replace(/^#\/?/, "").split("?")[0];
  const [name, ...rest] = path.split("/");
  const page = PAGES[name] ? name : "runs";
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  PAGES[page](rest.map(decodeURIComponent).join("/"));
  main().focus();
}

[TOKEN_KEY, OWNER_KEY].forEach((key) => localStorage.removeItem(key)); // older versions kept them: forget them
adoptFragmentToken();
const tokenInput = $("#api-token");
tokenInput.value = currentToken();
tokenInput.addEventListener("change", () => {
  // what the user types replaces a token handed over in the URL; it lives as long as this tab
  if (tokenInput.value) sessionStorage.setItem(TOKEN_KEY, tokenInput.value);
  else sessionStorage.removeItem(TOKEN_KEY);
  route();
});
window.addEventListener("hashchange", () => {
  adoptFragmentToken();
  tokenInput.value = currentToken();
  route();
});
route();
