// Runs: the live list of events (GET /v1/events, newest first, filters and a cursor; #/runs?status=…). Each
// row links to its run's page (run_detail.js). Helpers (el, api, livePoll, …) live in app.js, the list table's
// cells in cells.js.
"use strict";

const RUNS_PAGE_SIZE = 50;
const RUN_STATUSES = ["queued", "processing", "done", "dead", "cancelled", "discarded", "erased"]; // worker/ops/runs.py STATUSES
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
    form.elements.since.value = span ? localInputValue(serverNow() - span) : "";
    form.elements.until.value = "";
  });
  const live = el("span", { class: "live", "aria-live": "off", "data-testid": "runs-live" });
  const holder = el("div", { "data-testid": "runs" });
  const more = el("button", { type: "button", class: "secondary", hidden: true }, "Load more");
  main().replaceChildren(el("h2", {}, "Runs"), form, el("div", { class: "bar" }, live), holder, el("div", { class: "pager" }, more));

  // The rows shown, the cursor after them, and the oldest row "Load more" reached (null: the first page only).
  // A refresh re-reads the first page, and each LIVE_DEEP_EVERY-th the pages from the top down to that row, so a
  // loaded page stays (changed rows are replaced, rows that left the filter leave: below the first page, within
  // 10 s) and the cursor always continues after the last row shown. Reads and "Load more" take turns (one at a
  // time), so neither undoes the other.
  let rows = new Map();
  let cursor = null;
  let depth = null;
  let shown = "";
  let reading = Promise.resolve();
  const inTurn = (fn) => (reading = reading.then(fn, fn));
  const query = (extra) => qs({ ...filters, limit: pageSize, ...extra });
  // The API's order: enqueue time, then event id, both descending. True when run a is listed before run b.
  const before = (a, b) => ((a.enqueuedAt || 0) !== (b.enqueuedAt || 0) ? (a.enqueuedAt || 0) > (b.enqueuedAt || 0) : String(a.eventId) > String(b.eventId));
  const oldest = (list) => list.reduce((last, e) => (last && before(e, last) ? last : e), null);

  function render() {
    const list = [...rows.values()].sort((a, b) => (before(a, b) ? -1 : before(b, a) ? 1 : 0));
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
      listTable(
        [["Event", "id"], ["Status", "status"], ["Source type", "type"], ["Source id", "id"], ["Scope", "scope opt"], ["User", "user opt"], ["Enqueued", "time opt"], ["Took", "took opt"], ["Attempts", "attempts opt"], ["Error", "err"]],
        list.map((e) =>
          el(
            "tr",
            { "data-event-id": e.eventId },
            clipCell(e.eventId, { class: "id" }, runLink(e.eventId)),
            el("td", {}, badge(e.status, { "data-testid": "run-status" })),
            clipCell(e.sourceType || ""),
            clipCell(e.sourceId || "", { class: "id" }),
            clipCell(e.scopeKey || "", { class: "id opt" }),
            clipCell(e.userId || "", { class: "opt" }),
            clipCell(fmtTime(e.enqueuedAt), { class: "opt" }),
            clipCell(e.finishedAt || e.doneAt ? fmtAge((e.finishedAt || e.doneAt) - e.enqueuedAt) : "", { class: "opt" }),
            el("td", { class: "opt num-cell" }, String(e.attempts ?? "")),
            errorCell(e.error),
          ),
        ),
        { class: "runs list" },
        "Runs",
      ),
    );
  }

  // The pages again, from the top down to the oldest row "Load more" reached: new runs come in at the top,
  // changed ones are replaced, and runs that no longer match (a status filter) leave. Between the deep reads,
  // the first page only: the rows below it stay as last read, and so does the cursor after them.
  let refreshes = 0;
  const refresh = (poked) => inTurn(async () => {
    const deep = refreshes++ % LIVE_DEEP_EVERY === 0 || poked === true;
    let { body } = await api(`/v1/events?${query({})}`);
    const read = new Map(body.events.map((e) => [e.eventId, e]));
    let last = oldest(body.events);
    if (!deep && body.cursor && depth && last && before(last, depth)) {
      for (const e of rows.values()) if (!read.has(e.eventId) && before(last, e)) read.set(e.eventId, e);
    } else {
      while (body.cursor && depth && (!last || before(last, depth))) {
        ({ body } = await api(`/v1/events?${query({ cursor: body.cursor })}`));
        for (const e of body.events) read.set(e.eventId, e);
        last = oldest(body.events) || last;
      }
      cursor = body.cursor || null;
    }
    rows = read;
    if (depth) depth = oldest([...rows.values()]);
    live.textContent = `Live · every ${LIVE_MS / 1000} s · updated ${new Date().toLocaleTimeString()}`;
    live.dataset.refreshes = String(refreshes); // how many refreshes have ended (the tests wait on it)
    render();
  });

  // The next page (past pages that are empty because the API stopped examining: a page may be short and still
  // have a cursor).
  more.addEventListener("click", () => inTurn(async () => {
    if (!cursor) return;
    more.disabled = true;
    try {
      let found = [];
      while (cursor && !found.length) {
        const { body } = await api(`/v1/events?${query({ cursor })}`);
        found = body.events;
        cursor = body.cursor || null;
      }
      for (const e of found) rows.set(e.eventId, e);
      depth = oldest([...rows.values()]);
      render();
    } finally { more.disabled = false; }
  }).catch(() => {})); // shown in the banner

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
