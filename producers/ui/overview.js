// Overview (#/overview): the tenant's runs by source type and status, with cards that add up the same table
// (both from the store's runs index, whichever process did the work), the door's counters (the stats hash),
// queues, workers, and the last hour as a chart with labelled axes.
"use strict";

// The smallest 1, 2 or 5 × 10^k at or above v (an axis maximum that makes round tick labels); at least 5.
function niceMax(v) {
  if (!(v > 5)) return 5;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

function lineChart(series) {
  const ns = "http://www.w3.org/2000/svg";
  const W = 720, H = 250, L = 58, R = 70, T = 34, B = 46;
  const make = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const svg = make("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": "Events done per minute (left axis) and average enqueue-to-done latency in ms (right axis), over the last 60 minutes" });
  const maxDone = niceMax(Math.max(0, ...series.map((p) => p.done)));
  const maxLat = niceMax(Math.max(0, ...series.map((p) => p.avgLatencyMs || 0)));
  const n = Math.max(1, series.length - 1);
  const x = (i) => L + (i * (W - L - R)) / n;
  const yDone = (v) => H - B - ((v || 0) * (H - T - B)) / maxDone;
  const yLat = (v) => H - B - ((v || 0) * (H - T - B)) / maxLat;
  // grid and the three axes
  const STEPS = 5; // a 1, 2 or 5 × 10^k maximum in five steps: round labels on both axes
  const label = (v) => String(+v.toFixed(2));
  for (let k = 0; k <= STEPS; k += 1) {
    const y = H - B - (k * (H - T - B)) / STEPS;
    svg.append(make("line", { x1: L, x2: W - R, y1: y, y2: y, class: "grid" }));
    svg.append(make("text", { x: L - 6, y: y + 4, class: "tick", "text-anchor": "end" }, label((maxDone * k) / STEPS)));
    svg.append(make("text", { x: W - R + 6, y: y + 4, class: "tick", "text-anchor": "start" }, label((maxLat * k) / STEPS)));
  }
  svg.append(make("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
  svg.append(make("line", { x1: W - R, x2: W - R, y1: T, y2: H - B, class: "axis" }));
  svg.append(make("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
  for (let m = 60; m >= 0; m -= 10) {
    const i = series.length - 1 - m;
    if (i < 0) continue;
    svg.append(make("line", { x1: x(i), x2: x(i), y1: H - B, y2: H - B + 4, class: "axis" }));
    svg.append(make("text", { x: x(i), y: H - B + 16, class: "tick", "text-anchor": "middle" }, m ? `−${m} min` : "now"));
  }
  svg.append(make("text", { x: (L + W - R) / 2, y: H - 6, class: "axis-title", "text-anchor": "middle" }, "time (minutes ago, one point per minute)"));
  svg.append(make("text", { x: 14, y: (T + H - B) / 2, class: "axis-title done", "text-anchor": "middle", transform: `rotate(-90 14 ${(T + H - B) / 2})` }, "events done / min"));
  svg.append(make("text", { x: W - 12, y: (T + H - B) / 2, class: "axis-title latency", "text-anchor": "middle", transform: `rotate(90 ${W - 12} ${(T + H - B) / 2})` }, "avg latency (ms)"));
  const path = (values, y) => values.map((v, i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  svg.append(make("path", { d: path(series.map((p) => p.done), yDone), class: "series done" }));
  svg.append(make("path", { d: path(series.map((p) => p.avgLatencyMs), yLat), class: "series latency" }));
  // legend
  svg.append(make("line", { x1: L, x2: L + 22, y1: 14, y2: 14, class: "series done" }));
  svg.append(make("text", { x: L + 28, y: 18, class: "legend" }, "events done per minute (left)"));
  svg.append(make("line", { x1: L + 250, x2: L + 272, y1: 14, y2: 14, class: "series latency" }));
  svg.append(make("text", { x: L + 278, y: 18, class: "legend" }, "avg enqueue → done latency, ms (right)"));
  return svg;
}

const OVERVIEW_STATUSES = ["queued", "processing", "done", "dead", "cancelled", "discarded"];

function overviewPage() {
  const holder = el("div");
  main().replaceChildren(el("h2", {}, "Overview"), holder);
  livePoll(async () => {
    const { body } = await api("/v1/overview");
    const s = body.statusCounts || {};
    const card = (label, value, href) => el("div", { class: "card" }, el("div", { class: "num" }, String(value ?? 0)), href ? el("a", { href }, label) : el("div", {}, label));
    const types = Object.entries(body.bySourceType || {}).sort();
    const statuses = [...new Set([...OVERVIEW_STATUSES, ...types.flatMap(([, st]) => Object.keys(st))])].filter((st) => types.some(([, c]) => c[st]));
    // The run cards add up the table below (the same runs index); the door's counters come from the stats hash.
    const total = (st) => types.reduce((sum, [, c]) => sum + (c[st] || 0), 0);
    keepFocus(holder, () => holder.replaceChildren(
      el(
        "div",
        { class: "cards", "data-testid": "run-cards" },
        card("queued or running", total("queued") + total("processing"), "#/scopes"),
        card("done", total("done"), "#/runs?status=done"),
        card("dead", total("dead"), "#/dlq"),
        card("cancelled", total("cancelled"), "#/runs?status=cancelled"),
        card("discarded", total("discarded"), "#/dlq?state=discarded"),
        card("workers", (body.workers || []).length, "#/scopes"),
      ),
      el(
        "div",
        { class: "cards" },
        card("accepted at the door", s.accepted, "#/runs"),
        card("duplicates refused", s.duplicate),
        card("rejected at the door", s.rejected),
      ),
      el("h3", {}, "Events by source type and status"),
      types.length
        ? table(["Source type", ...statuses, "total"], types.map(([t, counts]) => el(
          "tr",
          { "data-source-type": t },
          el("td", {}, el("a", { href: `#/runs?${qs({ sourceType: t })}` }, t)),
          statuses.map((st) => el("td", { class: "num-cell" }, counts[st] ? el("a", { href: `#/runs?${qs({ sourceType: t, status: st })}` }, String(counts[st])) : "")),
          el("td", { class: "num-cell" }, String(Object.values(counts).reduce((a, b) => a + b, 0))),
        )), { class: "by-type" }, "Events by source type and status")
        : el("div", { class: "empty" }, "No events yet. ", emptyHint({})),
      el("h3", {}, "Queues"),
      table(["Queue", "Events waiting or running", "Scopes with work"], (body.queues || []).map((q) => el("tr", {}, el("td", {}, q.name), el("td", {}, String(q.eventsWaiting)), el("td", {}, String(q.activeScopes)))), {}, "Queues"),
      el("h3", {}, "Workers"),
      ...workerLines(body.workers || []),
      el("h3", {}, "Last hour"),
      scrollBox("chart", "Last hour chart", lineChart(body.series || [])),
    ));
  }, 10000);
}

// The Overview's workers: each with its heartbeat's age, "silent" when the service says it is not alive (the rule of
// the agent_signal_workers gauge), and "No worker is running" when none is: a worker killed (SIGKILL, a lost node) stays listed until a live worker's
// sweep forgets it, an hour later, and said nothing of it being gone.
function workerLines(workers) {
  const ageOf = (w) => Math.max(0, serverNow() - (w.lastSeenAt || 0));
  const none = workers.some((w) => w.alive)
    ? []
    : [el("p", { "data-testid": "no-worker" }, "No worker is running: accepted events wait until one starts (agent-signal worker).")];
  const listed = workers.length
    ? [el("ul", {}, workers.map((w) => el("li", {}, `${w.name} · ${w.alive ? "" : "silent · "}heartbeat ${fmtAge(ageOf(w))} ago`)))]
    : [];
  return [...none, ...listed];
}
