// Corpus hygiene on the quality dashboard: the distractor panel of a run (or of a set's recent monitoring runs) —
// the documents that took top-k slots in cases they do not answer, their freshness and near-duplicates — with a
// what-if run that leaves the selected ones out (the paired test per metric and category), then archiving each,
// with an undo; and a set's page: a metric of its monitoring runs against the corpus size each ran over, beside the
// run history (corpus size and what started each run).

import { get, post } from "./api.js";
import { badge, errorBox, fmt, h, replace, scatterPlot, select, table, when } from "./dom.js";

const runLink = (id, text = id) => h("a", { href: `#/dashboard/run/${encodeURIComponent(id)}` }, text);
const docLink = (id, text = id) => h("a", { href: `#/documents/${encodeURIComponent(id)}` }, text);
const pct = (x) => `${fmt(100 * x, 0)}%`;
const signed = (d, lowerBetter = false) =>
  h("span", { class: Math.abs(d) < 0.0005 ? "same" : d > 0 !== lowerBetter ? "up" : "down" }, `${d > 0 ? "+" : ""}${fmt(d)}`);
// a DOM id from any text (document ids carry slashes)
const slug = (text) => String(text).replace(/[^A-Za-z0-9_-]/g, "_");

// --- the distractor panel -----------------------------------------------------------------------------------------

function freshnessCells(f) {
  if (!f) return ["–", "–", "–", "–"];
  return [
    badge(f.status || "unknown", f.status),
    f.age_days === null || f.age_days === undefined ? h("span", { title: "no updated_at" }, "–") : h("span", { class: "nowrap", title: `updated ${when(f.updated_at)}` }, `${f.age_days} d`),
    f.owner || "–",
    f.superseded_by ? docLink(f.superseded_by) : "–",
  ];
}

function duplicatesOf(report) {
  // doc id → its group number (1-based) and the others in it
  const of = new Map();
  (report.duplicate_groups || []).forEach((group, i) => group.forEach((d) => of.set(d, { n: i + 1, others: group.filter((x) => x !== d) })));
  return of;
}

function summaryLine(report) {
  if (!report.cases) return h("p", {}, "No case of this run can be read for distractors (relevance not stored).");
  return h(
    "p",
    { id: "distractor-summary" },
    `${report.slots} of ${report.top_k_slots} top-${report.k} slots (${pct(report.share)}) went to results that answer nothing, over ${report.cases} cases`,
    report.runs.length > 1 ? ` of ${report.runs.length} runs` : "",
    `; ${report.pushed} answering results pushed below ${report.k}; ${report.stale_slots} stale slots; ${report.documents} distinct documents`,
    report.documents > report.distractors.length ? ` (the first ${report.distractors.length} shown)` : "",
    report.skipped ? `; ${report.skipped} cases skipped (stored before relevance was kept)` : "",
    ".",
  );
}

function distractorTable(report, selected, onToggle) {
  const dup = duplicatesOf(report);
  const rows = report.distractors.map((d) => {
    const f = report.freshness?.[d.doc_id];
    const box = h("input", { type: "checkbox", name: "distractor", value: d.doc_id, checked: selected.has(d.doc_id), "aria-label": `Select ${d.doc_id}` });
    box.addEventListener("change", () => onToggle(d.doc_id, box.checked));
    const group = dup.get(d.doc_id);
    return [
      box,
      h("span", {}, docLink(d.doc_id), f?.title ? h("small", { class: "doc-title" }, ` ${f.title}`) : null),
      String(d.cases),
      String(d.slots),
      String(d.pushed),
      Object.entries(d.categories)
        .sort((a, b) => b[1] - a[1])
        .map(([c, n]) => `${c} ${n}`)
        .join(", "),
      ...freshnessCells(f),
      group ? h("span", { title: `near-duplicates: ${group.others.join(", ")}` }, badge(`group ${group.n}`, "draft"), ` with ${group.others.join(", ")}`) : "–",
    ];
  });
  return table(
    ["Select", "Document", "Cases crowded", "Slots", "Pushed below k", "Categories", "Status", "Age", "Owner", "Superseded by", "Near-duplicates"],
    rows,
    { caption: `Documents that took a top-${report.k} slot in cases they do not answer, most cases first` },
  );
}

function categoryShares(report) {
  if (!report.by_category?.length) return null;
  return table(
    ["Category", "Cases", "Distractor slots", `Of top-${report.k} slots`],
    report.by_category.map((c) => [c.name, String(c.cases), String(c.slots), `${c.slots} of ${c.top_k_slots} (${pct(c.share)})`]),
    { caption: "Share of top-k slots lost to distractors, per category" },
  );
}

function whatIfView(result) {
  const w = result.what_if;
  const key = new Set([`precision@${w.k}`, `recall@${w.k}`, `ndcg@${w.k}`, `mrr@${w.k}`, `stale@${w.k}`]);
  const perCategory = [...key].filter((m) => w.by_category.some((c) => m in c.base));
  return h(
    "div",
    { id: "what-if-result" },
    h("h5", {}, "Verdicts"),
    h("ul", { class: "verdicts" }, w.verdicts.map((v) => h("li", {}, v))),
    table(
      ["Metric", "As now", "Excluding them", "Δ", "p", "Significant"],
      w.metrics.map((m) => [
        key.has(m.metric) ? h("strong", {}, m.metric) : m.metric,
        fmt(m.base),
        fmt(m.pruned),
        signed(m.delta, m.lower_is_better),
        m.p_value === null || m.p_value === undefined ? "–" : fmt(m.p_value, 4),
        m.significant ? badge("significant", "pass") : badge("not significant", "draft"),
      ]),
      { caption: `Every metric, the same ${w.metrics[0]?.cases ?? 0} cases with and without the exclusion (paired test)` },
    ),
    table(
      ["Category", "Cases", ...perCategory],
      w.by_category.map((c) => [
        c.name,
        String(c.cases),
        ...perCategory.map((m) => h("span", {}, `${fmt(c.base[m])} → ${fmt(c.pruned[m])} `, signed(c.delta[m], m.startsWith("stale@")))),
      ]),
      { caption: "Per category: as now → excluding them (Δ)" },
    ),
    h("p", { class: "hint" }, "Runs (experiments, not gated): as now ", runLink(w.base_run_id || w.base_run), ", excluding them ", runLink(w.pruned_run), "."),
  );
}

// One document's archive control: Archive → a confirmation → archived, with Undo (restore).
function archiveControl(docId) {
  const row = h("li", { class: "archive-row", dataset: { doc: docId } });
  const out = h("span", { class: "archive-status", role: "status" });
  const focusButton = (name) => row.querySelector(`button.${name}`)?.focus();
  let drawn = false; // the first drawing leaves the focus where it is
  const act = async (path, button, doneText, next) => {
    button.disabled = true;
    try {
      const done = await post(`/documents/${encodeURIComponent(docId)}/${path}`, {});
      draw(next, done.status, doneText);
    } catch (err) {
      button.disabled = false;
      replace(out, errorBox(err));
    }
  };
  const draw = (state, status, message) => {
    const id = slug(docId);
    const parts = {
      idle: [h("button", { type: "button", class: "archive", id: `archive-${id}`, onclick: () => draw("confirm") }, `Archive ${docId}…`)],
      confirm: [
        h("span", {}, `Archive ${docId}? Search will leave it out until it is restored. `),
        h("button", { type: "button", class: "confirm-archive danger", onclick: (e) => act("archive", e.currentTarget, "archived", "archived") }, "Yes, archive it"),
        h("button", { type: "button", class: "cancel", onclick: () => draw("idle") }, "Cancel"),
      ],
      archived: [
        docLink(docId),
        " ",
        badge(status || "archived", status || "archived"),
        " ",
        h("button", { type: "button", class: "undo", onclick: (e) => act("restore", e.currentTarget, "restored", "restored") }, `Undo: restore ${docId}`),
      ],
      restored: [docLink(docId), " ", badge(status || "current", status || "current"), " restored. ", h("button", { type: "button", class: "archive", onclick: () => draw("confirm") }, `Archive ${docId}…`)],
    }[state];
    replace(row, ...parts, " ", out);
    replace(out, message && state !== "idle" ? `${docId} ${message}${status ? ` (status ${status})` : ""}.` : "");
    if (drawn) focusButton({ idle: "archive", confirm: "confirm-archive", archived: "undo", restored: "archive" }[state]);
    drawn = true;
  };
  draw("idle");
  return row;
}

// The panel. source: {path, params} of the report (a run's or a set's), run: {set, k: [ks], unit, overrides} for the
// what-if, canArchive: the key has `ingest`.
export function distractorPanel({ source, run, canArchive, title = "Distractors" }) {
  const ks = [...new Set(run.k)].sort((a, b) => a - b);
  let k = Math.max(...ks);
  const selected = new Set();
  const body = h("div", { "aria-live": "polite" });
  const whatIfOut = h("div", { id: "what-if" });
  const archiveOut = h("div", { id: "archive" });
  const status = h("p", { role: "status", id: "what-if-status" });
  const count = h("span", { id: "distractor-selected", class: "hint" });
  const button = h("button", { type: "submit", class: "primary", id: "what-if-run" }, "What if they were excluded?");
  const picker = select("k", ks.map((x) => [String(x), `top ${x}`]), String(k));
  picker.id = "distractor-k";
  picker.addEventListener("change", () => {
    k = Number(picker.value);
    load();
  });
  const showCount = () => {
    replace(count, `${selected.size} selected`);
    button.disabled = !selected.size;
  };
  const toggle = (docId, on) => {
    if (on) selected.add(docId);
    else selected.delete(docId);
    showCount();
  };
  async function load() {
    replace(body, h("p", { class: "hint" }, "Reading the distractors…"));
    try {
      const report = await get(source.path, { ...source.params, k });
      for (const d of [...selected]) if (!report.distractors.some((r) => r.doc_id === d)) selected.delete(d);
      replace(
        body,
        summaryLine(report),
        report.notes?.length ? h("ul", { class: "notes" }, report.notes.map((n) => h("li", {}, n))) : null,
        report.distractors.length ? distractorTable(report, selected, toggle) : h("p", {}, `No document took a top-${report.k} slot in a case it does not answer.`),
        categoryShares(report),
      );
    } catch (err) {
      replace(body, errorBox(err));
    }
    showCount();
  }
  const form = h(
    "form",
    { id: "distractor-form", class: "stack" },
    h("div", { class: "field inline-field" }, h("label", { for: picker.id, class: "nowrap" }, "Cut-off"), picker),
    body,
    h("div", { class: "review" }, h("button", { type: "button", id: "distractor-all", onclick: () => selectAll() }, "Select all shown"), button, count),
  );
  function selectAll() {
    for (const box of form.querySelectorAll("input[name=distractor]")) {
      box.checked = true;
      selected.add(box.value);
    }
    showCount();
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const docs = [...selected].sort();
    if (!docs.length) return;
    button.disabled = true;
    replace(whatIfOut);
    replace(archiveOut);
    replace(status, `Running set ${run.set} twice, as now and without ${docs.length} document${docs.length > 1 ? "s" : ""}…`);
    try {
      const body = { set: run.set, k: ks, unit: run.unit, include_cases: false, exclude: { doc_ids: docs } };
      if (run.overrides && Object.keys(run.overrides).length) body.overrides = run.overrides;
      const result = await post("/eval/run", body);
      replace(status, `Done: ${docs.length} document${docs.length > 1 ? "s" : ""} left out of ${result.cases_total} cases.`);
      replace(whatIfOut, whatIfView(result));
      if (canArchive) {
        replace(
          archiveOut,
          h("h5", {}, "Archive them"),
          h("p", { class: "hint" }, "Archiving sets a document's status to archived (search leaves it out); Undo restores its former status."),
          h("ul", { class: "archive-list" }, docs.map(archiveControl)),
        );
      }
    } catch (err) {
      replace(status);
      replace(whatIfOut, errorBox(err));
    } finally {
      button.disabled = !selected.size;
    }
  });
  load();
  return h(
    "section",
    { class: "panel distractors", id: "distractors", "aria-labelledby": "distractors-title" },
    h("h4", { id: "distractors-title" }, title),
    h("p", { class: "hint" }, "Results in a case's top k that answer nothing it asks crowd out the answers: select some and see what leaving them out would do, before archiving any."),
    form,
    status,
    whatIfOut,
    archiveOut,
  );
}

// --- a set's page: a metric against the corpus size, and the run history -------------------------------------------

// the cut-offs of a run's metrics ({"precision@5": …} → [5])
export const cutoffs = (metrics) => [...new Set(Object.keys(metrics).filter((m) => m.includes("@")).map((m) => Number(m.split("@")[1])))];

function defaultMetric(runs) {
  const ks = runs.flatMap((r) => Object.keys(r.metrics).filter((m) => m.startsWith("precision@")).map((m) => Number(m.split("@")[1])));
  return ks.length ? `precision@${Math.max(...ks)}` : Object.keys(runs[0]?.metrics || {})[0];
}

const triggerText = (t) => t || "on request";

function corpusPlot(set, runs, metric) {
  const measured = runs.filter((r) => r.corpus && metric in r.metrics);
  const left = runs.length - measured.length;
  const note = left
    ? h("p", { class: "hint", id: "corpus-note" }, `${left} run${left > 1 ? "s" : ""} left out: stored before the corpus size was recorded${runs.some((r) => r.corpus && !(metric in r.metrics)) ? `, or without ${metric}` : ""}.`)
    : null;
  if (!measured.length) return [h("p", {}, `No monitoring run of set ${set} has both a corpus size and ${metric}.`), note];
  const points = measured.map((r) => ({
    x: r.corpus.documents,
    y: r.metrics[metric],
    marked: r.trigger === "corpus change",
    tip: `${when(r.created_at)} · ${metric} ${fmt(r.metrics[metric])} · ${r.corpus.documents} documents, ${r.corpus.chunks} chunks · ${triggerText(r.trigger)} · run ${r.run_id}`,
  }));
  return [
    scatterPlot(`${metric} against corpus size, one point per monitoring run of set ${set} (${measured.length})`, points, {
      xLabel: "documents in the corpus at run time",
      yLabel: metric,
      markedName: "started by a corpus change",
      unmarkedName: "scheduled or on request",
      xZero: false,
      yDomain: [0, 1],
    }),
    note,
  ];
}

function historyTable(runs, metric) {
  return table(
    ["Run", "When", "Started by", "Documents", "Chunks", metric, "Gate"],
    runs.map((r) => [
      runLink(r.run_id),
      when(r.created_at),
      r.trigger === "corpus change" ? badge("corpus change", "new") : triggerText(r.trigger),
      r.corpus ? String(r.corpus.documents) : "–",
      r.corpus ? String(r.corpus.chunks) : "–",
      fmt(r.metrics[metric]),
      r.gate ? badge(r.gate) : "–",
    ]),
    { caption: `Monitoring runs of the set, newest first, with the corpus each ran over` },
  );
}

export async function setView(root, ctx, setName) {
  const runs = await get("/eval/runs", { set: setName, kind: "monitoring", limit: 500 });
  root.append(h("p", {}, h("a", { href: "#/dashboard" }, "← Dashboard")));
  const title = h("h3", { id: "set-view-title" }, `Set ${setName}: quality against corpus growth`);
  const panel = h("article", { class: "panel set-view", "aria-labelledby": "set-view-title" });
  root.append(panel);
  if (!runs.length) {
    panel.append(title, h("p", {}, `No monitoring run of set ${setName} yet.`));
    return;
  }
  const metrics = [...new Set(runs.flatMap((r) => Object.keys(r.metrics)))].sort();
  let metric = defaultMetric(runs);
  const picker = select("metric", metrics.map((m) => [m, m]), metric);
  picker.id = "corpus-metric";
  const plotHolder = h("div", { id: "corpus-plot" });
  const historyHolder = h("div", { id: "corpus-history" });
  const draw = () => {
    replace(plotHolder, corpusPlot(setName, runs, metric));
    replace(historyHolder, historyTable(runs, metric));
  };
  picker.addEventListener("change", () => {
    metric = picker.value;
    draw();
  });
  panel.append(
    h(
      "div",
      { id: "corpus-growth" },
      title,
      h("p", {}, `${runs.length} monitoring run${runs.length > 1 ? "s" : ""}; the latest `, runLink(runs[0].run_id), ` at ${when(runs[0].created_at)}.`),
      h("div", { class: "field inline-field" }, h("label", { for: picker.id }, "Metric"), picker),
      plotHolder,
      historyHolder,
    ),
  );
  draw();
  const latest = runs[0];
  panel.append(
    distractorPanel({
      source: { path: `/eval/sets/${encodeURIComponent(setName)}/distractors`, params: { runs: 5, limit: 10 } },
      run: { set: setName, k: cutoffs(latest.metrics), unit: latest.unit, overrides: latest.overrides },
      canArchive: ctx.can("ingest"),
      title: "Distractors over the last 5 monitoring runs",
    }),
  );
}
