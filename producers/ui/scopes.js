// Scopes and workers (#/scopes): busy, waiting, stuck and paused scopes (inbox depth, lease holder, age of
// the head) with pause and resume; the queued and running events with Cancel; the workers and their
// heartbeats. Everything re-reads every 2 s and right after an action. Scopes come a page at a time, by scope
// key (GET /v1/scopes's cursor); "Load more" reads the next page, and a refresh re-reads every page shown.
"use strict";

const SCOPE_STATES = ["busy", "waiting", "stuck", "paused"];
const SCOPES_PAGE_SIZE = 200; // GET /v1/scopes's default page
const SCOPES_MAX_PAGE = 1000; // and its largest

function scopePath(scopeKey, verb) {
  return `/v1/scopes/${encodeURIComponent(scopeKey)}/${verb}`;
}

// The buttons' column: its header is read by screen readers, not shown.
function actionsHeading() {
  return el("span", { class: "visually-hidden" }, "Actions");
}

function scopesPage() {
  const outcome = outcomeLine({ "data-testid": "scopes-outcome" });
  const keyInput = el("input", { name: "scopeKey", required: true, placeholder: "topic:tpc_1", autocomplete: "off" });
  const form = el(
    "form",
    { class: "bar", "aria-label": "Pause or resume a scope by key" },
    el("label", {}, "Scope key", keyInput),
    el("button", { type: "submit", value: "pause" }, "Pause"),
    el("button", { type: "submit", value: "resume", class: "secondary" }, "Resume"),
  );
  const stateFilter = el("select", { "aria-label": "Show scopes that are" }, el("option", { value: "" }, "any state"), SCOPE_STATES.map((s) => el("option", { value: s }, s)));
  const scopesBox = el("div", { "data-testid": "scopes" });
  const scopesCount = el("span", { class: "live", "data-testid": "scopes-count" });
  const moreScopes = el("button", { type: "button", class: "secondary", hidden: true }, "Load more");
  const eventsBox = el("div", { "data-testid": "inflight" });
  const workersBox = el("div", { "data-testid": "workers" });
  const live = el("span", { class: "live" });
  main().replaceChildren(
    el("h2", {}, "Scopes and workers"),
    el("p", { class: "muted" }, "A scope runs its events one at a time, in order. A paused scope keeps accepting events and runs none of them until it is resumed; other scopes are not held up."),
    form, outcome,
    el("h3", {}, "Scopes"),
    el("div", { class: "bar" }, el("label", {}, "State", stateFilter), scopesCount, live),
    scopesBox,
    el("div", { class: "pager" }, moreScopes),
    el("h3", {}, "Queued and running events"),
    eventsBox,
    el("h3", {}, "Workers"),
    workersBox,
  );

  // The API says whether anything changed: a Resume of a scope that was not paused changes nothing.
  async function pauseOrResume(scopeKey, verb) {
    try {
      const { body } = await postJson(scopePath(scopeKey, verb), {});
      if (body && body.changed === false) outcome.say(`${scopeKey} ${verb === "pause" ? "was already paused" : "was not paused"}.`, "warn");
      else outcome.say(`${verb === "pause" ? "Paused" : "Resumed"} ${scopeKey}.${verb === "pause" ? " Its events wait until it is resumed." : ""}`);
    } catch (err) {
      outcome.say(`Could not ${verb} ${scopeKey}: ${err.message}`, "bad");
    }
    poll.poke();
  }

  async function cancel(eventId) {
    try {
      const { body } = await postJson(`/v1/events/${encodeURIComponent(eventId)}/cancel`, {});
      outcome.say(`Cancel requested for ${eventId}: ${body && body.status ? body.status : "cancelled"}.`);
    } catch (err) {
      outcome.say(`Could not cancel ${eventId}: ${err.message}`, "bad");
    }
    poll.poke();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = keyInput.value.trim();
    if (key) pauseOrResume(key, event.submitter && event.submitter.value === "resume" ? "resume" : "pause");
  });
  stateFilter.addEventListener("change", () => { depth = null; poll.poke(); });

  // The scopes read (pages in scope-key order), the cursor after them, and how far "Load more" went: a refresh
  // re-reads the pages down to that scope key, so a loaded page stays until the list is left or refiltered.
  // Reads and "Load more" take turns (one at a time), so neither undoes the other.
  let scopes = [];
  let cursor = null;
  let depth = null;
  let total = 0;
  let reading = Promise.resolve();
  const inTurn = (fn) => (reading = reading.then(fn, fn));
  const scopesAfter = (after, limit = SCOPES_PAGE_SIZE) => api(`/v1/scopes?${qs({ state: stateFilter.value, limit, cursor: after })}`).then(({ body }) => body);

  // Each request lists the tenant's every scope on the server: a refresh re-reads what is shown in as few as it
  // can (up to GET /v1/scopes's largest page), not a request per page "Load more" brought.
  const loadScopes = () => inTurn(async () => {
    const size = depth === null ? SCOPES_PAGE_SIZE : Math.min(SCOPES_MAX_PAGE, Math.max(SCOPES_PAGE_SIZE, scopes.length));
    let body = await scopesAfter(null, size);
    const read = [...(body.scopes || [])];
    while (body.cursor && depth !== null && body.cursor < depth) {
      body = await scopesAfter(body.cursor, SCOPES_MAX_PAGE);
      read.push(...(body.scopes || []));
    }
    scopes = read;
    cursor = body.cursor || null;
    total = body.total ?? read.length;
    if (depth !== null && read.length) depth = read[read.length - 1].scopeKey;
    renderScopes();
  });

  moreScopes.addEventListener("click", () => inTurn(async () => {
    if (!cursor) return;
    moreScopes.disabled = true;
    try {
      const body = await scopesAfter(cursor);
      scopes = [...scopes, ...(body.scopes || [])];
      cursor = body.cursor || null;
      total = body.total ?? scopes.length;
      if (scopes.length) depth = scopes[scopes.length - 1].scopeKey;
      renderScopes();
    } finally { moreScopes.disabled = false; }
  }).catch(() => {})); // shown in the banner

  function renderScopes() {
    moreScopes.hidden = !cursor;
    scopesCount.textContent = cursor ? `${scopes.length} of ${total} scopes shown (by scope key)` : `${total} ${total === 1 ? "scope" : "scopes"}`;
    const merged = new Map();
    for (const s of scopes) {
      const states = [s.state || stateFilter.value].filter(Boolean);
      if (s.paused && !states.includes("paused")) states.push("paused");
      merged.set(s.scopeKey, { ...s, states });
    }
    const list = [...merged.values()].sort((a, b) => (b.headAgeMs || 0) - (a.headAgeMs || 0) || a.scopeKey.localeCompare(b.scopeKey));
    keepFocus(scopesBox, () => scopesBox.replaceChildren(list.length
      ? table(["Scope", "State", "Inbox depth", "Lease holder", "Head age", actionsHeading()], list.map((s) => el(
        "tr",
        { "data-scope-key": s.scopeKey },
        el("td", { class: "id" }, el("a", { href: `#/runs?${qs({ scopeKey: s.scopeKey })}` }, s.scopeKey)),
        el("td", {}, s.states.map((st) => badge(st, { "data-testid": "scope-state" }))),
        el("td", {}, String(s.inboxDepth ?? "")),
        el("td", { class: "id" }, s.leaseHolder || ""),
        el("td", {}, s.headAgeMs !== undefined && s.headAgeMs !== null ? fmtAge(s.headAgeMs) : ""),
        el("td", {}, s.paused
          ? el("button", { type: "button", class: "secondary", "aria-label": `Resume ${s.scopeKey}`, onclick: () => pauseOrResume(s.scopeKey, "resume") }, "Resume")
          : el("button", { type: "button", class: "secondary", "aria-label": `Pause ${s.scopeKey}`, onclick: () => pauseOrResume(s.scopeKey, "pause") }, "Pause")),
      )), { class: "scopes" }, "Scopes")
      : el("div", { class: "empty" }, stateFilter.value ? `No ${stateFilter.value} scope.` : "No scope has work, and none is paused.")));
  }

  async function loadEvents() {
    const [queued, running] = await Promise.all(["queued", "processing"].map((status) => api(`/v1/events?${qs({ status, limit: 50 })}`).then(({ body }) => body.events)));
    const list = [...running, ...queued];
    const now = serverNow();
    keepFocus(eventsBox, () => eventsBox.replaceChildren(list.length
      ? table(["Event", "Status", "Source type", "Scope", "Waiting", actionsHeading()], list.map((e) => el(
        "tr",
        { "data-event-id": e.eventId },
        el("td", {}, runLink(e.eventId)),
        el("td", {}, badge(e.status, { "data-testid": "run-status" })),
        el("td", {}, e.sourceType || ""),
        el("td", { class: "id" }, e.scopeKey || ""),
        el("td", {}, e.enqueuedAt ? fmtAge(Math.max(0, now - e.enqueuedAt)) : ""),
        el("td", {}, el("button", { type: "button", class: "danger", "aria-label": `Cancel ${e.eventId}`, onclick: () => cancel(e.eventId) }, "Cancel")),
      )), {}, "Queued and running events")
      : el("div", { class: "empty" }, "Nothing is queued or running.")));
  }

  async function loadWorkers() {
    const { body } = await api("/v1/overview");
    const now = serverNow();
    const workers = body.workers || [];
    keepFocus(workersBox, () => workersBox.replaceChildren(workers.length
      ? table(["Worker", "Heartbeat", "Concurrency", "In-flight drains"], workers.map((w) => {
        const age = Math.max(0, now - (w.lastSeenAt || 0)); // ago: a heartbeat a moment ahead is now
        return el(
          "tr",
          { "data-worker": w.name },
          el("td", { class: "id" }, w.name),
          el("td", {}, badge(w.alive ? "alive" : "silent"), ` ${fmtAge(age)} ago`),
          el("td", {}, w.concurrency !== undefined ? String(w.concurrency) : "—"),
          el("td", {}, w.inFlight !== undefined ? String(w.inFlight) : "—"),
        );
      }), {}, "Workers")
      : el("div", { class: "empty" }, "No worker has reported. Start one with `agent-signal worker`.")));
  }

  const poll = livePoll(async () => {
    const results = await Promise.allSettled([loadScopes(), loadEvents(), loadWorkers()]);
    live.textContent = `Live · every ${LIVE_MS / 1000} s · updated ${new Date().toLocaleTimeString()}`;
    const failed = results.find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
  });
}
