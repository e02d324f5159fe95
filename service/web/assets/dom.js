// Small DOM helpers: elements built from data (text is never parsed as HTML), formatting, marking matched text,
// and the two charts the dashboard draws (SVG bars and lines, each with its numbers in a table beside it).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export const $ = (selector, root = document) => root.querySelector(selector);

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  const hintEl = hint ? h("small", { id: `${id}-hint`, class: "hint" }, hint) : null;
  if (hintEl) input.setAttribute("aria-describedby", hintEl.id);
  return h("div", { class: "field" }, h("label", { for: id }, label), input, hintEl);
}

export function select(name, options, value) {
  return h(
    "select",
    { name },
    options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)),
  );
}

export function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error instanceof Error ? error.message : String(error));
}

export const fmt = (value, digits = 3) =>
  value === null || value === undefined || Number.isNaN(value) ? "–" : Number(value).toFixed(digits);

export function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toISOString().replace("T", " ").slice(0, 16) + " UTC";
}

export function badge(text, kind = text) {
  return h("span", { class: `badge badge-${String(kind).replace(/[^a-z_-]/gi, "")}` }, text);
}

export function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// --- highlighting: the spans the service found (`highlights` of a /search hit), marked in the hit's text ------------

export function highlighted(text, spans) {
  // the service counts characters (code points); a JS string's indices count UTF-16 units
  const chars = Array.from(text);
  const out = [];
  let at = 0;
  for (const [start, end] of spans || []) {
    out.push(chars.slice(at, start).join(""), h("mark", {}, chars.slice(start, end).join("")));
    at = end;
  }
  out.push(chars.slice(at).join(""));
  return out;
}

// --- charts --------------------------------------------------------------------------------------------------------

export function barChart(title, rows, { max = 1, digits = 3 } = {}) {
  // rows: [{label, value, note}], drawn in the order given (the caller sorts worst first)
  const rowHeight = 26;
  const labelWidth = 170;
  const width = 560;
  const chart = svg(
    "svg",
    {
      viewBox: `0 0 ${width} ${rows.length * rowHeight + 4}`,
      role: "img",
      "aria-label": `${title}: ${rows.map((r) => `${r.label} ${fmt(r.value, digits)}`).join(", ")}`,
      class: "chart",
    },
    rows.map((r, i) => {
      const y = i * rowHeight + 2;
      const barWidth = Math.max(1, ((width - labelWidth - 60) * Math.min(r.value ?? 0, max)) / max);
      return svg(
        "g",
        {},
        svg("text", { x: labelWidth - 8, y: y + 17, "text-anchor": "end", class: "label" }, truncate(r.label, 24)),
        svg("rect", { x: labelWidth, y: y + 3, width: barWidth, height: rowHeight - 8, class: `bar ${tone(r.value)}` }),
        svg("text", { x: labelWidth + barWidth + 6, y: y + 17, class: "value" }, fmt(r.value, digits)),
      );
    }),
  );
  return h("figure", { class: "figure" }, h("figcaption", {}, title), chart);
}

export function lineChart(title, series, { max = 1 } = {}) {
  // series: [{name, points: [{x: Date, y: number}]}], oldest first
  const width = 640;
  const height = 220;
  const pad = { left: 40, right: 12, top: 10, bottom: 28 };
  const xs = series.flatMap((s) => s.points.map((p) => p.x.getTime()));
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs);
  const sx = (t) => pad.left + (x1 === x0 ? (width - pad.left - pad.right) / 2 : ((t - x0) / (x1 - x0)) * (width - pad.left - pad.right));
  const sy = (v) => pad.top + (1 - Math.min(v, max) / max) * (height - pad.top - pad.bottom);
  const grid = [0, 0.25, 0.5, 0.75, 1].map((f) =>
    svg(
      "g",
      {},
      svg("line", { x1: pad.left, x2: width - pad.right, y1: sy(f * max), y2: sy(f * max), class: "grid" }),
      svg("text", { x: pad.left - 6, y: sy(f * max) + 4, "text-anchor": "end", class: "axis" }, fmt(f * max, 2)),
    ),
  );
  const lines = series.map((s, i) =>
    svg(
      "g",
      { class: `series s${i % 6}` },
      svg("polyline", { points: s.points.map((p) => `${sx(p.x.getTime())},${sy(p.y)}`).join(" "), fill: "none" }),
      s.points.map((p) => svg("circle", { cx: sx(p.x.getTime()), cy: sy(p.y), r: 3 }, svg("title", {}, `${s.name} ${fmt(p.y)} at ${when(p.x.toISOString())}`))),
    ),
  );
  const axis = [
    svg("text", { x: pad.left, y: height - 8, class: "axis" }, when(new Date(x0).toISOString())),
    svg("text", { x: width - pad.right, y: height - 8, "text-anchor": "end", class: "axis" }, when(new Date(x1).toISOString())),
  ];
  const legend = h(
    "ul",
    { class: "legend" },
    series.map((s, i) => h("li", { class: `s${i % 6}` }, h("span", { class: "swatch", "aria-hidden": "true" }), s.name)),
  );
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${title}, ${series.length} series over ${series[0]?.points.length ?? 0} runs`, class: "chart" }, grid, lines, axis);
  return h("figure", { class: "figure" }, h("figcaption", {}, title), chart, legend);
}

function tone(value) {
  if (value === null || value === undefined) return "none";
  return value < 0.5 ? "bad" : value < 0.8 ? "warn" : "good";
}

function truncate(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

export function table(headers, rows, { caption } = {}) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, r.map((cell) => h("td", {}, cell))))),
    ),
  );
}
