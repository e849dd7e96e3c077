// Agent Signal UI: receipts next to the messages that caused them, and the operator's console (runs and their
// detail, dead letters, send and replay, scopes and workers, overview). Plain JavaScript, no dependencies, no
// CDN. This file holds the shared helpers and the router, and is loaded last; each page is a file of its own
// (conversation.js, runs.js, run_detail.js, chains.js, dlq.js, send.js, scopes.js, overview.js, examples.js) that
// only defines functions. Every API error of the page shown is in the banner.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const main = () => $("#main");
const TOKEN_KEY = "agentSignalToken";
const OWNER_KEY = "agentSignalOwner"; // the conversation page's last user, agent and topic (sessionStorage)

let teardown = [];
// Every call of api() carries the signal of the page it was made for: leaving the page (route()) aborts the calls
// it still waits for, and such a call never settles, so nothing of a page left behind runs on (no banner, no
// redraw, no unhandled rejection).
let pageCalls = new AbortController();
const never = () => new Promise(() => {});

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
  if (!box.hidden && box.textContent === message) return; // an alert rewritten is announced again: once is enough
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

// A user token reaches only its own user's data: an operator route answers it 403 with this message, and the
// console then says once what is needed instead of that 403 (the Conversation page and Send work with one).
const USER_TOKEN_REFUSAL = "a user token reaches only";
const USER_TOKEN_NOTICE = "The operator pages need an API key: the token given is a user token, which reaches only its own user's conversation (receipts, memories, skills). Enter an API key under “API token”; with a user token, use the Conversation page or Send.";

// The answer's status and JSON body (and Retry-After, in s); a refusal not in `allow` is shown in the banner
// and thrown (error.status, error.retryAfterS).
async function api(path, options = {}) {
  const method = options.method || "GET";
  const call = `${method} ${path.split("?")[0]}`;
  const { signal } = pageCalls;
  if (method !== "GET") showError("");
  let response;
  let text;
  try {
    response = await fetch(path, { ...options, headers: headers(), signal });
    noteServerClock(response); // as soon as its headers are in: reading the body would add its time
    text = await response.text();
  } catch (err) {
    if (signal.aborted) return never();
    showError(`Cannot reach the API: ${err.message}`, call);
    throw err;
  }
  if (signal.aborted) return never();
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

// The service's clock against this browser's, read from each answer's x-server-time-ms (the service's clock,
// Redis's: docs/operations.md, Clocks; else its Date header, the web host's, in whole seconds): an age ("heartbeat
// 3 s ago", "waiting 2 min") is the service's now minus a stored time, and a laptop minutes off showed every worker
// "silent" (ahead) or every wait as 0 ms (behind). Kept at 0 unless the two differ by more than SKEW_IN_MS (the
// answer's trip, and a Date's second, are noise), and back to 0 only within SKEW_OUT_MS (no flapping).
const SKEW_IN_MS = 3000;
const SKEW_OUT_MS = 1500;
let serverSkewMs = 0;

function noteServerClock(response) {
  const stamped = Number(response.headers.get("x-server-time-ms"));
  const date = stamped > 0 ? stamped : Date.parse(response.headers.get("date") || "") + 500; // a Date's second, at its middle
  if (Number.isNaN(date)) return;
  const skew = date - Date.now();
  const band = serverSkewMs === 0 ? SKEW_IN_MS : SKEW_OUT_MS;
  serverSkewMs = Math.abs(skew) > band ? skew : 0;
}

// Now on the server's clock (ms): what every age and "since" the pages compute starts from.
function serverNow() {
  return Date.now() + serverSkewMs;
}

function fmtTime(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleString();
}

function qs(params) {
  return new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "")).toString();
}

// ---------------------------------------------------------------------------------------------------------
// Helpers the operator pages share (runs.js, run_detail.js, chains.js, dlq.js, send.js, scopes.js, overview.js).

// Statuses after which an event does not change by itself.
const TERMINAL = new Set(["done", "dead", "cancelled", "discarded", "erased"]);
const LIVE_MS = 2000; // the operator pages re-read their data every 2 s (and right after an action)
// A list with pages loaded below its first (Runs, Dead letters) re-reads its first page each refresh and every
// page shown each LIVE_DEEP_EVERY-th (10 s): six pages of 500 dead events were six reads every 2 s per open tab.
const LIVE_DEEP_EVERY = 5;

function postJson(path, body, options = {}) {
  return api(path, { ...options, method: "POST", body: JSON.stringify(body) });
}

function fmtAge(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return "";
  if (ms < 0) return `-${fmtAge(-ms)}`; // a duration under 0: the clocks that stamped it disagree
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
// fn every ``ms`` (one call at a time; longer after a 429, stopped by a 401 or 403), not while the tab is hidden:
// a tab in the background reads nothing, and one brought back reads at once (or when a 429's wait ends).
// ``poke()`` (after an action) calls fn(true) at once: a list re-reads every page it shows then.
function livePoll(fn, ms = LIVE_MS) {
  let timer = null;
  let stopped = false;
  let running = false;
  let wait = ms;
  let due = 0; // when the next call is due (Date.now()'s ms)
  let pokedMeanwhile = false; // a poke while a call ran: it runs, poked, once that call ends
  const tick = async (poked = false) => {
    if (stopped || running) return;
    clearTimeout(timer);
    if (document.hidden) { timer = null; return; } // visibilitychange ticks again
    running = true;
    try { await fn(poked); wait = ms; } catch (err) { // shown in the banner
      if (err && (err.status === 401 || err.status === 403)) stopped = true;
      wait = err && err.status === 429 ? Math.min(Math.max(wait * 2, err.retryAfterS * 1000), 60000) : ms;
    }
    running = false;
    const again = pokedMeanwhile && !stopped;
    pokedMeanwhile = false;
    due = Date.now() + (again ? 0 : wait);
    if (!stopped) timer = again ? setTimeout(() => tick(true), 0) : setTimeout(tick, wait);
  };
  const shown = () => {
    if (document.hidden || stopped || running) return;
    const left = due - Date.now();
    if (wait > ms && left > 0) { clearTimeout(timer); timer = setTimeout(tick, left); } else tick();
  };
  document.addEventListener("visibilitychange", shown);
  teardown.push(() => { stopped = true; clearTimeout(timer); document.removeEventListener("visibilitychange", shown); });
  tick();
  // stop(): what the page shows will not change by asking again (an id the API refuses)
  return { poke: () => { if (running) pokedMeanwhile = true; else tick(true); }, stop: () => { stopped = true; clearTimeout(timer); } };
}

// Keyboard focus kept across a redraw: a live page that rebuilds a box (a table each refresh, the conversation on
// each receipt) calls keepFocus(box, rebuild). The control focused in the box before is found again in the new
// content by its row (the nearest element with one of ROW_KEYS) and its name, then by its place in that row (a
// Pause button that became Resume), and focused, with an input's caret where it was; when its row is gone, the
// box's scrolling region (the table) takes focus.
const ROW_KEYS = ["data-receipt-id", "data-message-id", "data-scope-key", "data-event-id", "data-source-type", "data-worker"];
const ROW_SELECTOR = ROW_KEYS.map((attr) => `[${attr}]`).join(",");

function controlName(node) {
  return node.getAttribute("data-testid") || node.getAttribute("aria-label") || node.getAttribute("href") || node.textContent;
}

function rowOf(node, box) {
  const row = node.closest(ROW_SELECTOR);
  if (!row || !box.contains(row)) return null;
  const attr = ROW_KEYS.find((a) => row.hasAttribute(a));
  return `[${attr}="${CSS.escape(row.getAttribute(attr))}"]`;
}

function focusMark(box) {
  const node = document.activeElement;
  if (!node || node === box || !box.contains(node)) return null;
  const row = rowOf(node, box);
  const scope = row ? box.querySelector(row) : box;
  const same = [...scope.querySelectorAll(node.tagName)];
  const named = same.filter((n) => controlName(n) === controlName(node));
  const caret = typeof node.selectionStart === "number" ? [node.selectionStart, node.selectionEnd] : null;
  return { node, row, tag: node.tagName, name: controlName(node), nth: named.indexOf(node), place: same.indexOf(node), caret };
}

function refocus(box, mark) {
  const scope = mark.row ? box.querySelector(mark.row) : box;
  const same = scope ? [...scope.querySelectorAll(mark.tag)] : [];
  const named = same.filter((n) => controlName(n) === mark.name);
  const inRow = mark.row ? same[mark.place] : null;
  const target = named[mark.nth] || named[0] || inRow || box.querySelector('[tabindex="0"]');
  if (!target) return;
  target.focus();
  if (mark.caret && typeof target.setSelectionRange === "function") target.setSelectionRange(...mark.caret);
}

function keepFocus(box, rebuild) {
  const mark = focusMark(box);
  rebuild();
  if (mark && !mark.node.isConnected) refocus(box, mark);
}

// A modal dialog opened from a live page: on closing, the browser gives focus back to the control that opened it,
// but a redraw meanwhile (a receipt arrived) may have replaced that control, and focus then fell to <body>. The
// same control of the same row is focused instead, unless the page was left meanwhile (its new page keeps focus).
function showModalFrom(dialog) {
  const box = $("#main");
  const mark = focusMark(box);
  const page = location.hash;
  dialog.addEventListener("close", () => {
    if (mark && !mark.node.isConnected && location.hash === page) refocus(box, mark);
  }, { once: true });
  dialog.showModal();
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

// A part of the address that is not valid percent-encoding (#/runs/%E0%A4%A) is taken as it is written.
function decodePart(part) {
  try { return decodeURIComponent(part); } catch { return part; }
}

function route() {
  for (const fn of teardown) fn();
  teardown = [];
  pageCalls.abort();
  pageCalls = new AbortController();
  showError("");
  const path = location.hash.replace(/^#\/?/, "").split("?")[0];
  const [name, ...rest] = path.split("/");
  const page = PAGES[name] ? name : "runs";
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const dialog = $("#doc-dialog");
  if (dialog.open) dialog.close(); // a document opened on the page left does not stay over the next one
  PAGES[page](rest.map(decodePart).join("/"));
  announcePage();
}

// Each page has a title of its own (tabs and history entries tell pages apart), and focus goes to its heading,
// so a screen reader says which page opened.
function announcePage() {
  const heading = $("h2", main());
  if (!heading) { document.title = "Agent Signal"; main().focus(); return; }
  document.title = `${heading.textContent} — Agent Signal`;
  heading.tabIndex = -1;
  heading.focus();
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
