// Chains: one chain drawn as its dominant path, its steps with timing and inputs/outputs, and its edge graph
// (`chainView`, shown on a run's page by run_detail.js), and the chain inspector (#/chains?q=…), which finds a
// run by event id, source id or chain id. Helpers (el, api, …) live in app.js.
"use strict";

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
    showError(""); // a lookup is a new action
    out.replaceChildren(el("p", {}, "Loading…"));
    try {
      if (!query.startsWith("chain:")) {
        const { status, body } = await api(`/v1/events/${encodeURIComponent(query)}`, { allow: [404, 409] });
        if (status === 200 && body.eventId) { location.hash = `#/runs/${encodeURIComponent(body.eventId)}`; return; }
        if (status === 409) { out.replaceChildren(candidates(query, body)); return; }
      }
      const chainId = query.startsWith("chain:") ? query : `chain:${query}`;
      const { status, body } = await api(`/v1/chains/${encodeURIComponent(chainId)}`, { allow: [404, 409] });
      out.replaceChildren(status === 404
        ? el("div", { class: "empty" }, "Nothing found for “", el("bdi", {}, query), "”: no event with that id or source id, and no chain ", el("bdi", {}, chainId), ". ", el("a", { href: "#/runs" }, "Browse the runs"), " to find it by status, type, scope or user.")
        : status === 409 ? candidates(chainId, body, "Chain id") // one source id run in several scopes
          : chainView(body));
    } catch (err) { // refused (a 422 for what cannot be an id, a 403 …): said where the answer goes
      out.replaceChildren(el("div", { class: "empty", "data-testid": "lookup-error" }, "Could not look up “", el("bdi", {}, query), "”: ", el("bdi", {}, err.message)));
    }
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = form.elements.q.value.trim();
    replaceHashQuery({ q });
    show(q);
  });
  if (params.q) show(params.q);
}
