// Small DOM helpers: elements built from data (text is never parsed as HTML), formatting, marking matched text,
// the charts (SVG bars, lines, a scatter plot and a histogram) and tables (plain, or sortable by any column).
//
// Children go through `append` (h, replace, add), which leaves out null, undefined and false: the DOM's own
// Element.append writes them as the text "null" / "undefined", so a view adds a child that may be absent with
// `add(el, ...)`, never with `el.append(...)`.

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

// el.append(...children) without the absent ones (null, undefined, false) and with arrays flattened
export function add(el, ...children) {
  append(el, children);
  return el;
}

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

// A table whose rows sort by any column: each header is a button (keyboard and screen reader: aria-sort on the th).
// columns: [{label, value: row => sortable value, cell: row => content (default: the value), first: "asc"|"desc"}]
export function sortableTable(columns, rows, { caption, sortBy = 0, direction, id, rowClass } = {}) {
  let key = sortBy;
  let dir = direction || columns[sortBy].first || "asc";
  const body = h("tbody");
  const heads = columns.map((c, i) =>
    h("th", { scope: "col", class: c.numeric ? "num" : null }, h("button", { type: "button", class: "sort", onclick: () => sortOn(i) }, c.label, h("span", { class: "arrow", "aria-hidden": "true" }))),
  );
  const compare = (a, b) => {
    const x = columns[key].value(a);
    const y = columns[key].value(b);
    const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true });
    return dir === "asc" ? order : -order;
  };
  const draw = () => {
    heads.forEach((th, i) => {
      if (i === key) th.setAttribute("aria-sort", dir === "asc" ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
      th.querySelector(".arrow").textContent = i === key ? (dir === "asc" ? " ▲" : " ▼") : "";
    });
    replace(
      body,
      rows
        .slice()
        .sort(compare)
        .map((r) => h("tr", { class: rowClass ? rowClass(r) : null }, columns.map((c) => h("td", { class: c.numeric ? "num" : null }, c.cell ? c.cell(r) : c.value(r))))),
    );
  };
  function sortOn(i) {
    dir = i === key ? (dir === "asc" ? "desc" : "asc") : columns[i].first || "asc";
    key = i;
    draw();
  }
  draw();
  return h("div", { class: "table-wrap" }, h("table", { id, class: "sortable" }, caption ? h("caption", {}, caption) : null, h("thead", {}, h("tr", {}, heads)), body));
}

// Round tick values covering [lo, hi], about `count` of them.
export function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) {
    const pad = Math.abs(lo) * 0.1 || 1;
    return niceTicks(lo - pad, hi + pad, count);
  }
  const raw = (hi - lo) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
  const ticks = [];
  for (let t = Math.floor(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  if (ticks[ticks.length - 1] < hi) ticks.push(Number((ticks[ticks.length - 1] + step).toPrecision(12)));
  return ticks;
}

const decimals = (ticks) => Math.min(4, Math.max(0, ...ticks.map((t) => (String(t).split(".")[1] || "").length)));

// A scatter plot with axes, ticks and a point per row: points [{x, y, tip, marked, labels: [text]}]; the marked ones
// (e.g. a Pareto front) filled, the others hollow, the labelled ones ringed and named; each point's tip is its <title>.
// (No line joins the marked points: a front over more measures than the two drawn would zig-zag.)
// The x axis starts at 0 unless `xZero` is false (then it spans the data, padded); the y axis spans the data, padded,
// or `yDomain` ([lo, hi], widened to take any point outside it).
export function scatterPlot(title, points, { xLabel, yLabel, markedName = "marked", unmarkedName = `not ${markedName}`, xZero = true, yDomain } = {}) {
  const width = 640;
  const height = 340;
  const pad = { left: 62, right: 24, top: 18, bottom: 52 };
  const xs = points.map((p) => p.x);
  const ys = points.map((p) => p.y);
  const spanX = Math.max(...xs) - Math.min(...xs);
  const xt = xZero
    ? niceTicks(0, Math.max(...xs, 0) * 1.05) // headroom: no point on the right edge
    : niceTicks(Math.min(...xs) - spanX * 0.08, Math.max(...xs) + spanX * 0.08);
  const spanY = Math.max(...ys) - Math.min(...ys);
  const yt = yDomain
    ? niceTicks(Math.min(yDomain[0], ...ys), Math.max(yDomain[1], ...ys))
    : niceTicks(Math.min(...ys) - spanY * 0.08, Math.max(...ys) + spanY * 0.08);
  const [x0, x1, y0, y1] = [xt[0], xt[xt.length - 1], yt[0], yt[yt.length - 1]];
  const sx = (v) => pad.left + ((v - x0) / (x1 - x0)) * (width - pad.left - pad.right);
  const sy = (v) => height - pad.bottom - ((v - y0) / (y1 - y0)) * (height - pad.top - pad.bottom);
  const xd = decimals(xt);
  const yd = decimals(yt);
  const axes = [
    yt.map((t) =>
      svg("g", { class: "tick" }, svg("line", { x1: pad.left, x2: width - pad.right, y1: sy(t), y2: sy(t), class: "grid" }), svg("text", { x: pad.left - 8, y: sy(t) + 4, "text-anchor": "end", class: "axis" }, t.toFixed(yd))),
    ),
    xt.map((t) =>
      svg("g", { class: "tick" }, svg("line", { x1: sx(t), x2: sx(t), y1: height - pad.bottom, y2: height - pad.bottom + 5, class: "axis-line" }), svg("text", { x: sx(t), y: height - pad.bottom + 18, "text-anchor": "middle", class: "axis" }, t.toFixed(xd))),
    ),
    svg("line", { x1: pad.left, x2: width - pad.right, y1: height - pad.bottom, y2: height - pad.bottom, class: "axis-line" }),
    svg("line", { x1: pad.left, x2: pad.left, y1: pad.top, y2: height - pad.bottom, class: "axis-line" }),
    svg("text", { x: (pad.left + width - pad.right) / 2, y: height - 10, "text-anchor": "middle", class: "axis-title" }, xLabel),
    svg("text", { x: 14, y: (pad.top + height - pad.bottom) / 2, "text-anchor": "middle", class: "axis-title", transform: `rotate(-90 14 ${(pad.top + height - pad.bottom) / 2})` }, yLabel),
  ];
  const marked = points.filter((p) => p.marked).length;
  const dots = points.map((p) =>
    svg(
      "g",
      { class: `point${p.marked ? " marked" : ""}${p.labels?.length ? " labelled" : ""}` },
      svg("circle", { cx: sx(p.x), cy: sy(p.y), r: p.labels?.length ? 7 : 5 }, svg("title", {}, p.tip)),
      (p.labels || []).length
        ? svg("text", { x: sx(p.x) + (sx(p.x) > width * 0.7 ? -10 : 10), y: sy(p.y) - 10, "text-anchor": sx(p.x) > width * 0.7 ? "end" : "start", class: "point-label" }, p.labels.join(" · "))
        : null,
    ),
  );
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${width} ${height}`, role: "img", class: "chart scatter", "aria-label": `${title}: ${points.length} points, ${marked} ${markedName}` },
    axes,
    dots,
  );
  const legend = h(
    "ul",
    { class: "legend scatter-legend" },
    h("li", {}, h("span", { class: "dot marked", "aria-hidden": "true" }), markedName),
    h("li", {}, h("span", { class: "dot", "aria-hidden": "true" }), unmarkedName),
  );
  return h("figure", { class: "figure" }, h("figcaption", {}, title), chart, legend);
}

// A small histogram: bins [{label, count}] as columns, the count over each.
export function histogram(title, bins) {
  const width = 380;
  const height = 150;
  const pad = { top: 18, bottom: 30, side: 8 };
  const max = Math.max(1, ...bins.map((b) => b.count));
  const slot = (width - 2 * pad.side) / Math.max(1, bins.length);
  const total = bins.reduce((n, b) => n + b.count, 0);
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${width} ${height}`, role: "img", class: "chart histogram", "aria-label": `${title}: ${bins.map((b) => `${b.label} ${b.count}`).join(", ")}` },
    bins.map((b, i) => {
      const barHeight = ((height - pad.top - pad.bottom) * b.count) / max;
      const x = pad.side + i * slot;
      return svg(
        "g",
        {},
        svg("rect", { x: x + 4, y: height - pad.bottom - barHeight, width: slot - 8, height: Math.max(barHeight, 0.5), class: "bar column" }, svg("title", {}, `${b.label}: ${b.count} of ${total}`)),
        svg("text", { x: x + slot / 2, y: height - pad.bottom - barHeight - 4, "text-anchor": "middle", class: "value" }, String(b.count)),
        svg("text", { x: x + slot / 2, y: height - pad.bottom + 16, "text-anchor": "middle", class: "label" }, b.label),
      );
    }),
  );
  return h("figure", { class: "figure small-figure" }, h("figcaption", {}, title), chart);
}
