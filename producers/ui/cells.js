// Cells of the list tables (Runs, Dead letters), which keep every row a few lines tall at any width (issue 28):
// `listTable` fixes each column's width with a <colgroup> (the Error column takes what is left), `clipCell`
// shows an id, time or name on one line cut with an ellipsis, its full value in the title, and `errorCell`
// clamps an error to three lines, shown in full in place on click, Enter or Space (its title and accessible name
// are its first CLAMP_NAME_CHARS characters);
// `fewLines` holds a short free text (an outcome, a reason; smaller type) to three lines, all of it in the title.
// `table` is the plain table of the other pages (attempts, scopes, overview), without fixed column widths;
// `badge` and `runLink` are what many cells hold (a status, a link to a run).
"use strict";

// A box that scrolls sideways when its content is wider (a table, the chart, a payload): a keyboard reaches it
// (Tab) and scrolls it with the arrow keys, and a screen reader names it `name`.
function scrollBox(kind, name, ...children) {
  return el("div", { class: kind, tabindex: "0", role: "region", "aria-label": name }, children);
}

// Column kinds: app.css gives each `col.<kind>` its width; "err" has none, so it gets the free width.
function listTable(columns, rows, attrs, name) {
  return scrollBox(
    "table-wrap",
    name,
    el(
      "table",
      attrs,
      el("colgroup", {}, columns.map(([, kind]) => el("col", { class: kind }))),
      el("thead", {}, el("tr", {}, columns.map(([label]) => el("th", { scope: "col", title: label }, label)))),
      el("tbody", {}, rows),
    ),
  );
}

function clipCell(value, attrs = {}, content = undefined) {
  const text = value === undefined || value === null ? "" : String(value);
  const kind = attrs.class ? `clip ${attrs.class}` : "clip";
  return el("td", { ...attrs, class: kind, title: text || null }, content === undefined ? text : content);
}

// A long error is named by its start (a screen reader does not read 10,000 characters at each Tab): while it is
// clamped, what assistive technology reads is a visually hidden brief (the whole text is aria-hidden); expanded,
// the whole text. An aria-label would not contain the text shown (axe label-content-name-mismatch).
const CLAMP_NAME_CHARS = 200;

function clampBox(value, attrs = {}) {
  const brief = value.length > CLAMP_NAME_CHARS ? `${value.slice(0, CLAMP_NAME_CHARS)}…` : "";
  const said = brief ? el("span", { class: "visually-hidden" }, brief) : null;
  const whole = el("span", { "aria-hidden": brief ? "true" : null }, value);
  const box = el("div", { ...attrs, class: "clamp", title: brief || value, tabindex: "0", role: "button", "aria-expanded": "false" }, said, whole);
  const toggle = () => {
    const open = box.getAttribute("aria-expanded") !== "true";
    box.setAttribute("aria-expanded", String(open));
    if (said) { said.hidden = open; whole.setAttribute("aria-hidden", String(!open)); }
  };
  box.addEventListener("click", () => { if (!String(window.getSelection() || "")) toggle(); }); // selecting text is not a click
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") { event.preventDefault(); toggle(); }
  });
  return box;
}

function errorCell(value, attrs = {}) {
  const kind = attrs.class ? `err ${attrs.class}` : "err";
  return el("td", { ...attrs, class: kind }, value ? clampBox(String(value)) : null);
}

function fewLines(value) {
  return el("div", { class: "few-lines", title: value }, value);
}

// A plain table (the run page's attempts, the scopes, the overview): a header row of `headings` (text, or a node
// such as a visually hidden label) over `rows`, in a scrolling box named `name`.
function table(headings, rows, attrs, name) {
  return scrollBox(
    "table-wrap",
    name,
    el("table", attrs, el("thead", {}, el("tr", {}, headings.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows)),
  );
}

// What many cells hold: a status as a coloured badge, and an event id as the link to its run's page.
function badge(status, attrs = {}) {
  return el("span", { class: `badge ${status || "unknown"}`, ...attrs }, status || "unknown");
}

function runLink(eventId, text) {
  return el("a", { href: `#/runs/${encodeURIComponent(eventId)}` }, text || eventId);
}
