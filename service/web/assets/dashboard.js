// The quality dashboard: the latest monitoring run of each set (metrics per category as bars, worst first), history
// as lines, gate verdicts and the cases that got worse, a drill-down into any case, experiment runs apart from
// monitoring runs, and two runs side by side.

import { api, get, post } from "./api.js";
import { add, badge, barChart, errorBox, field, fmt, h, lineChart, replace, select, table, when } from "./dom.js";
import { cutoffs, distractorPanel, setView } from "./hygiene.js";
import { CHOICES, searchOptions } from "./search.js";

const HISTORY_METRICS = ["hit@5", "recall@10", "mrr", "ndcg@10"];

const runLink = (id, text = id) => h("a", { href: `#/dashboard/run/${encodeURIComponent(id)}` }, text);
const setLink = (name, text) => h("a", { href: `#/dashboard/set/${encodeURIComponent(name)}`, class: "set-link" }, text);
const caseLink = (runId, caseId, text = caseId) =>
  h("a", { href: `#/dashboard/run/${encodeURIComponent(runId)}/case/${encodeURIComponent(caseId)}` }, text);

// One line on the policy a verdict was judged by (the baseline's, or the service's default for a baseline stored
// before policies were), as eval.present.describe_policy writes it for the CLI.
function policyText(policy, origin, tightened = []) {
  if (!policy) return "policy not recorded (a verdict filed before policies were)";
  const from = origin === "default" ? "the service's default policy" : origin === "baseline" ? "the baseline's policy" : "policy";
  const parts = [
    `${from}: ${policy.metrics.join(", ")}`,
    `tolerance ${policy.tolerance}`,
    policy.category_tolerance === null ? "no per-category checks" : `per category ${policy.category_tolerance} (≥ ${policy.min_category_cases} cases)`,
    policy.require_significance ? `drops must be significant (alpha ${policy.alpha})` : "significance not required",
    policy.fail_on_regressed_incidents ? "regressed incidents fail" : "regressed incidents only warn",
  ];
  if (tightened.length) parts.push(`made stricter by the request: ${tightened.join(", ")}`);
  return parts.join("; ");
}

// Where a queued run stands: its place among its caller group's queued runs (the groups take turns).
const queueText = (job) => `number ${job.position} in its group's queue; the groups take turns`;

export function gateView(gate) {
  if (!gate) return h("p", { class: "gate" }, "Not gated (no baseline).");
  return h(
    "div",
    { class: "gate" },
    h("p", {}, "Gate: ", badge(gate.verdict), gate.baseline?.name ? ` against baseline ${gate.baseline.name}` : ""),
    h("p", { class: "policy" }, "Judged by ", policyText(gate.policy, gate.policy_origin, gate.tightened)),
    gate.reasons.length ? h("ul", {}, gate.reasons.map((r) => h("li", {}, r))) : null,
  );
}

function worseCases(run) {
  const worse = run.gate?.worse_cases || [];
  if (!worse.length) return null;
  return h(
    "div",
    { class: "worse" },
    h("h4", {}, `Cases that got worse (${worse.length})`),
    table(
      ["Case", "Metric", "Baseline", "Now"],
      worse.map((w) => [caseLink(run.run_id, w.case_id), w.metric, fmt(w.baseline), fmt(w.current)]),
    ),
  );
}

function categoryBars(run, metric) {
  const rows = run.by_category
    .map((g) => ({ label: `${g.name} (${g.cases})`, value: g.metrics[metric] }))
    .sort((a, b) => (a.value ?? -1) - (b.value ?? -1));
  return barChart(`${metric} per category, worst first`, rows);
}

function originView(run, metric) {
  // a synthetic set can mislead: its cases are always counted and scored apart from people's
  const synthetic = (run.by_origin || []).find((g) => g.name === "synthetic");
  if (!synthetic) return null;
  return h(
    "div",
    { class: "warning", role: "note", id: "origin" },
    h("p", {}, `${synthetic.cases} of ${run.cases_total} cases are synthetic (written by an LLM), the rest human: read them apart.`),
    table(
      ["Cases", "Count", metric],
      run.by_origin.map((g) => [g.name, String(g.cases), fmt(g.metrics[metric])]),
      { caption: "Synthetic and human cases apart" },
    ),
  );
}

function diagnosis(run) {
  const problems = run.diagnosis.filter((d) => d.problem !== "none");
  if (!problems.length) return h("p", { class: "diagnosis" }, "Diagnosis: nothing stands out.");
  return h("ul", { class: "diagnosis" }, problems.map((d) => h("li", {}, h("strong", {}, `${d.scope}: ${d.problem}. `), d.advice)));
}

function metricRow(metrics) {
  // {"hit@5": .., "mrr": ..} as a table: one row per measure, one column per cut-off
  const cuts = [...new Set(Object.keys(metrics).filter((k) => k.includes("@")).map((k) => Number(k.split("@")[1])))].sort((a, b) => a - b);
  const names = [...new Set(Object.keys(metrics).filter((k) => k.includes("@")).map((k) => k.split("@")[0]))];
  const rows = [
    ...names.map((name) => [h("th", { scope: "row" }, name), ...cuts.map((k) => fmt(metrics[`${name}@${k}`]))]),
    // a metric over the whole ranking (mrr): one value, under the deepest cut-off's column
    ...Object.keys(metrics)
      .filter((k) => !k.includes("@"))
      .map((k) => [h("th", { scope: "row" }, `${k} (whole ranking)`), ...cuts.map((c, i) => (i === cuts.length - 1 ? fmt(metrics[k]) : ""))]),
  ];
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "metric-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Metric"), cuts.map((k) => h("th", { scope: "col" }, `@${k}`)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, r.map((cell, i) => (i === 0 ? cell : h("td", {}, cell)))))),
    ),
  );
}

function metricPicker(run, onPick) {
  const names = Object.keys(run.metrics);
  const picker = select("metric", names.map((m) => [m, m]), run.primary_metric);
  picker.id = `metric-${run.run_id}`;
  picker.addEventListener("change", () => onPick(picker.value));
  return h("div", { class: "field inline-field" }, h("label", { for: picker.id }, "Metric"), picker);
}

function barsWithPicker(run, onPick = () => {}) {
  const holder = h("div", {}, categoryBars(run, run.primary_metric));
  const pick = (m) => {
    replace(holder, categoryBars(run, m));
    onPick(m);
  };
  return [metricPicker(run, pick), holder];
}

const CATEGORY_HISTORY_RUNS = 20;

function categoryHistory(set, reports, metric) {
  // one line per category: a collapsing category shows here even when the overall line stays flat
  const names = [...new Set(reports.flatMap((r) => r.by_category.map((g) => g.name)))].sort();
  const series = names.map((name) => ({
    name,
    points: reports
      .map((r) => ({ x: new Date(r.created_at), y: r.by_category.find((g) => g.name === name)?.metrics[metric] }))
      .filter((p) => p.y !== undefined),
  }));
  return lineChart(`${metric} per category, the last ${reports.length} runs of set ${set}`, series.filter((s) => s.points.length));
}

function setCard(run, history) {
  const monitored = run.kind === "monitoring";
  const points = history.slice().reverse();
  const perCategory = h("div", { class: "category-history" });
  let reports = [];
  let metric = run.primary_metric;
  const drawCategories = () => replace(perCategory, reports.length > 1 ? categoryHistory(run.set, reports, metric) : null);
  if (points.length > 1) {
    // each run's categories are in its report: the newest few, fetched after the card is drawn
    Promise.all(points.slice(-CATEGORY_HISTORY_RUNS).map((p) => get(`/eval/runs/${encodeURIComponent(p.run_id)}`, { include_cases: false })))
      .then((got) => {
        reports = got.filter((r) => r.status === "done");
        drawCategories();
      })
      .catch((err) => replace(perCategory, errorBox(err)));
  }
  return h(
    "article",
    { class: "panel set-card", "aria-labelledby": `set-${run.set}` },
    h("h3", { id: `set-${run.set}` }, `Set ${run.set} `, badge(run.kind)),
    h("p", {}, monitored ? "Latest monitoring run: " : "No monitoring run yet; latest run: ", runLink(run.run_id), ` · ${when(run.created_at)} · ${run.cases_total} cases`),
    monitored ? h("p", {}, setLink(run.set, `Set ${run.set}: quality against corpus size, distractors`)) : null,
    gateView(run.gate),
    h(
      "div",
      { class: "split" },
      h("div", {}, metricRow(run.metrics), diagnosis(run), worseCases(run)),
      h(
        "div",
        {},
        barsWithPicker(run, (m) => {
          metric = m;
          drawCategories();
        }),
        points.length > 1
          ? lineChart(
              `History of set ${run.set} (${monitored ? "monitoring" : run.kind} runs)`,
              HISTORY_METRICS.filter((m) => points.some((p) => m in p.metrics)).map((m) => ({
                name: m,
                points: points.filter((p) => m in p.metrics).map((p) => ({ x: new Date(p.created_at), y: p.metrics[m] })),
              })),
            )
          : h("p", { class: "hint" }, "History appears after a second run."),
        perCategory,
      ),
    ),
  );
}

function runForm(ctx, sets, onDone) {
  const kinds = [["manual", "manual (the served configuration)"], ["experiment", "experiment (with overrides)"]];
  // a monitoring run feeds the gauges and alerts: eval:admin only
  if (ctx.can("eval:admin")) kinds.unshift(["monitoring", "monitoring (the served configuration)"]);
  const kind = select("kind", kinds, "manual");
  const overrides = h(
    "div",
    { class: "grid overrides", hidden: true },
    field("Mode", select("mode", CHOICES.mode, "")),
    field("Fusion", select("fusion", CHOICES.fusion, "")),
    field("Alpha", h("input", { name: "alpha", type: "number", min: 0, max: 1, step: 0.05 })),
    field("Rerank", select("rerank", CHOICES.rerank, "")),
  );
  kind.addEventListener("change", () => (overrides.hidden = kind.value !== "experiment"));
  const status = h("p", { role: "status", id: "run-status" });
  const f = h(
    "form",
    { id: "run-form", class: "grid" },
    field("Set", select("set", sets.map((s) => [s.name, `${s.name} (${s.cases} cases)`]), sets[0]?.name)),
    field("Kind", kind),
    overrides,
    h("div", { class: "field" }, h("button", { type: "submit", class: "primary" }, "Run evaluation")),
  );
  f.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(f));
    const body = { set: data.set, async: true, include_cases: false };
    if (data.kind === "monitoring") body.monitoring = true;
    if (data.kind === "experiment") {
      const o = searchOptions(data);
      if (!Object.keys(o).length) {
        replace(status, "An experiment needs at least one override.");
        return;
      }
      body.overrides = o;
    }
    try {
      const job = await post("/eval/run", body);
      for (;;) {
        const now = await get(`/eval/runs/${job.run_id}`, { include_cases: false });
        if (now.status === "done") break;
        if (now.status === "queued") replace(status, `Queued ${job.run_id}: waiting for an evaluation slot (${queueText(now)})…`);
        else if (now.status !== "running") throw new Error(`the run ${now.status}: ${now.error || "no report"}`);
        else replace(status, `Running ${job.run_id}: ${now.progress.done} of ${now.progress.total} cases…`);
        await new Promise((r) => setTimeout(r, 500));
      }
      replace(status, "Done: ", runLink(job.run_id));
      onDone(job.run_id);
    } catch (err) {
      replace(status, errorBox(err));
    }
  });
  return h("details", { class: "panel run-panel" }, h("summary", {}, "Run an evaluation"), f, status);
}

function experimentList(runs) {
  if (!runs.length) return h("section", { class: "panel" }, h("h3", {}, "Experiments and manual runs"), h("p", {}, "None yet."));
  const pick = (r) => h("input", { type: "checkbox", name: "compare", value: r.run_id, "aria-label": `Compare run ${r.run_id}` });
  const rows = runs.map((r) => [
    pick(r),
    runLink(r.run_id),
    r.kind,
    r.set,
    when(r.created_at),
    Object.keys(r.overrides).length ? JSON.stringify(r.overrides) : "–",
    fmt(r.metrics["hit@5"]),
    fmt(r.metrics.mrr),
    r.gate ? h("span", { title: `Judged by ${policyText(r.gate_policy)}` }, badge(r.gate)) : "–",
  ]);
  const message = h("span", { class: "error", role: "alert" });
  const f = h(
    "form",
    { id: "compare-form" },
    table(["", "Run", "Kind", "Set", "When", "Overrides", "hit@5", "MRR", "Gate"], rows, { caption: "Experiment and manual runs, newest first" }),
    h("button", { type: "submit" }, "Compare the two selected runs"),
    message,
  );
  f.addEventListener("submit", (event) => {
    event.preventDefault();
    const chosen = [...f.querySelectorAll("input[name=compare]:checked")].map((i) => i.value);
    if (chosen.length !== 2) {
      replace(message, `Select exactly two runs (${chosen.length} selected).`);
      return;
    }
    location.hash = `#/dashboard/compare/${encodeURIComponent(chosen[1])}/${encodeURIComponent(chosen[0])}`;
  });
  return h("section", { class: "panel", "aria-labelledby": "exp-title" }, h("h3", { id: "exp-title" }, "Experiments and manual runs"), f);
}

async function overview(root, ctx, finished) {
  const [sets, monitoring, manual, experiments] = await Promise.all([
    get("/eval/sets"),
    get("/eval/runs", { kind: "monitoring", limit: 500 }),
    get("/eval/runs", { kind: "manual", limit: 200 }),
    get("/eval/runs", { kind: "experiment", limit: 200 }),
  ]);
  const others = [...manual, ...experiments].sort((a, b) => b.created_at.localeCompare(a.created_at));
  const cards = h("div", { class: "cards" });
  const done = finished ? h("p", { role: "status", tabindex: "-1", id: "run-done" }, "Run ", runLink(finished), " finished.") : null;
  add(root, runForm(ctx, sets, (runId) => overview(replace(root), ctx, runId)), done, cards); // done: null unless a run just finished
  const latest = new Map();
  for (const r of [...monitoring, ...others]) if (!latest.has(r.set)) latest.set(r.set, r);
  if (!latest.size) cards.append(h("p", {}, "No evaluation runs yet: run one above, or schedule monitoring (PLUMBLINE_EVAL_SCHEDULE)."));
  for (const [set, summary] of latest) {
    const run = await get(`/eval/runs/${summary.run_id}`, { include_cases: false });
    const history = (summary.kind === "monitoring" ? monitoring : others).filter((r) => r.set === set);
    cards.append(setCard(run, history));
  }
  root.append(experimentList(others));
  if (done) done.focus(); // the form that started the run was redrawn
}

// --- one run, one case --------------------------------------------------------------------------------------------

async function expected(setName) {
  try {
    const text = await api("GET", `/eval/sets/${encodeURIComponent(setName)}`, { params: { incidents: true }, text: true });
    return new Map(text.split("\n").filter(Boolean).map((line) => JSON.parse(line)).map((c) => [c.id, c]));
  } catch {
    return new Map();
  }
}

function casesTable(run, metric) {
  const cases = run.cases.slice().sort((a, b) => (a.metrics[metric] ?? 0) - (b.metrics[metric] ?? 0) || a.id.localeCompare(b.id));
  return table(
    ["Case", "Question", "Category", metric, "First relevant rank"],
    cases.map((c) => [caseLink(run.run_id, c.id), c.question, c.category, fmt(c.metrics[metric]), c.first_relevant_rank ? `#${c.first_relevant_rank}` : "missed"]),
    { caption: `Every case, worst ${metric} first` },
  );
}

async function runView(root, ctx, runId) {
  const run = await get(`/eval/runs/${encodeURIComponent(runId)}`);
  if (run.status === "queued") {
    root.append(h("p", {}, `Run ${runId} is queued, waiting for an evaluation slot (${queueText(run)}).`));
    return;
  }
  if (run.status !== "done") {
    root.append(h("p", {}, `Run ${runId} is ${run.status}: ${run.progress.done} of ${run.progress.total} cases.`));
    return;
  }
  const metric = run.primary_metric;
  root.append(
    h("p", {}, h("a", { href: "#/dashboard" }, "← Dashboard")),
    h(
      "article",
      { class: "panel" },
      h("h3", {}, `Run ${run.run_id} `, badge(run.kind)),
      h("p", {}, "Set ", run.kind === "monitoring" ? setLink(run.set, run.set) : run.set, ` · ${when(run.created_at)} · unit ${run.unit} · ${run.cases_total} cases`),
      originView(run, metric),
      gateView(run.gate),
      run.gate?.checks?.length
        ? table(
            ["Metric", "Scope", "Baseline", "Now", "Δ", "Failed"],
            run.gate.checks.map((c) => [c.metric, c.scope, fmt(c.baseline), fmt(c.current), fmt(c.delta), c.failed ? "yes" : "no"]),
            { caption: "Gate checks" },
          )
        : null,
      metricRow(run.metrics),
      barsWithPicker(run),
      diagnosis(run),
      worseCases(run),
      distractorPanel({
        source: { path: `/eval/runs/${encodeURIComponent(run.run_id)}/distractors`, params: {} },
        run: { set: run.set, k: run.k?.length ? run.k : cutoffs(run.metrics), unit: run.unit, overrides: run.params.overrides },
        canArchive: ctx.can("ingest"),
      }),
      h("details", {}, h("summary", {}, "Parameters"), h("pre", {}, JSON.stringify(run.params, null, 2))),
      casesTable(run, metric),
    ),
  );
}

function labelText(label) {
  const what = label.chunk_id ? `chunk ${label.chunk_id}` : label.doc_id;
  return `${what}${label.evidence ? ` — evidence “${label.evidence}”` : ""}${label.grade && label.grade !== 1 ? ` (grade ${label.grade})` : ""}`;
}

async function caseView(root, runId, caseId) {
  const run = await get(`/eval/runs/${encodeURIComponent(runId)}`);
  const c = (run.cases || []).find((x) => x.id === caseId);
  if (!c) throw new Error(`run ${runId} has no case ${caseId}`);
  const spec = (await expected(run.set)).get(caseId);
  const relevantDocs = new Set([...(spec?.relevant || []), ...c.missed].map((l) => l.doc_id).filter(Boolean));
  const missed = new Set(c.missed.map(labelText));
  const searchLink = new URLSearchParams({ q: c.question, ...(spec?.filters?.tenant ? { tenant: spec.filters.tenant } : {}) });
  root.append(
    h("p", {}, h("a", { href: `#/dashboard/run/${encodeURIComponent(runId)}` }, `← Run ${runId}`)),
    h(
      "article",
      { class: "panel case", "aria-labelledby": "case-title" },
      h("h3", { id: "case-title" }, `Case ${c.id}`),
      h("p", { class: "question" }, c.question),
      h("p", {}, `Category ${c.category} · source ${c.source} · `, c.first_relevant_rank ? `first relevant result at rank #${c.first_relevant_rank}` : "no relevant result within the cut"),
      metricRow(c.metrics),
      h("h4", {}, "Expected"),
      spec
        ? h("ul", { class: "expected" }, spec.relevant.map((l) => h("li", {}, labelText(l), " ", missed.has(labelText(l)) ? badge("missed", "fail") : badge("found", "pass"))))
        : h("ul", { class: "expected" }, c.missed.map((l) => h("li", {}, labelText(l), " ", badge("missed", "fail")))),
      spec?.filters && Object.keys(spec.filters).length ? h("p", { class: "hint" }, `Case filters: ${JSON.stringify(spec.filters)}`) : null,
      h("h4", {}, "What came instead (the first results)"),
      table(
        ["Rank", "Document", "Chunk", "Score", ""],
        c.top.map((t, i) => [`#${i + 1}`, t.doc_id, t.chunk_id, fmt(t.score, 4), relevantDocs.has(t.doc_id) ? badge("expected document", "pass") : ""]),
      ),
      h("p", {}, h("a", { href: `#/search?${searchLink}` }, "Replay this question in the search playground")),
    ),
  );
}

// --- two runs side by side ----------------------------------------------------------------------------------------

function delta(a, b) {
  if (a === undefined || b === undefined) return "–";
  const d = b - a;
  return h("span", { class: d > 0.0005 ? "up" : d < -0.0005 ? "down" : "same" }, `${d > 0 ? "+" : ""}${fmt(d)}`);
}

async function compareView(root, idA, idB) {
  const [a, b] = await Promise.all([get(`/eval/runs/${encodeURIComponent(idA)}`), get(`/eval/runs/${encodeURIComponent(idB)}`)]);
  const metrics = Object.keys(a.metrics).filter((m) => m in b.metrics);
  const categories = [...new Set([...a.by_category, ...b.by_category].map((g) => g.name))].sort();
  const catOf = (run, name) => run.by_category.find((g) => g.name === name)?.metrics || {};
  const primary = a.primary_metric;
  const casesA = new Map((a.cases || []).map((c) => [c.id, c]));
  const changed = (b.cases || [])
    .filter((c) => casesA.has(c.id) && casesA.get(c.id).metrics[primary] !== c.metrics[primary])
    .map((c) => ({ id: c.id, question: c.question, a: casesA.get(c.id).metrics[primary], b: c.metrics[primary] }))
    .sort((x, y) => x.b - x.a - (y.b - y.a));
  root.append(
    h("p", {}, h("a", { href: "#/dashboard" }, "← Dashboard")),
    h(
      "article",
      { class: "panel compare" },
      h("h3", {}, "Two runs side by side"),
      a.set !== b.set ? h("p", { class: "warning" }, `These runs replayed different sets (${a.set}, ${b.set}): compare with care.`) : null,
      table(
        ["", "A", "B"],
        [
          ["Run", runLink(a.run_id), runLink(b.run_id)],
          ["Kind", a.kind, b.kind],
          ["When", when(a.created_at), when(b.created_at)],
          ["Overrides", JSON.stringify(a.params.overrides || {}), JSON.stringify(b.params.overrides || {})],
        ],
      ),
      table(["Metric", "A", "B", "B − A"], metrics.map((m) => [m, fmt(a.metrics[m]), fmt(b.metrics[m]), delta(a.metrics[m], b.metrics[m])]), { caption: "Overall" }),
      table(
        ["Category", `A ${primary}`, `B ${primary}`, "B − A"],
        categories.map((name) => [name, fmt(catOf(a, name)[primary]), fmt(catOf(b, name)[primary]), delta(catOf(a, name)[primary], catOf(b, name)[primary])]),
        { caption: `${primary} per category` },
      ),
      changed.length
        ? table(
            ["Case", "Question", `A ${primary}`, `B ${primary}`, "B − A"],
            changed.map((c) => [caseLink(b.run_id, c.id), c.question, fmt(c.a), fmt(c.b), delta(c.a, c.b)]),
            { caption: `Cases whose ${primary} changed, worst change first` },
          )
        : h("p", {}, `No case's ${primary} changed.`),
    ),
  );
}

export async function render(root, ctx, { rest }) {
  try {
    if (rest[0] === "run" && rest[2] === "case") await caseView(root, rest[1], rest[3]);
    else if (rest[0] === "run") await runView(root, ctx, rest[1]);
    else if (rest[0] === "set") await setView(root, ctx, rest[1]);
    else if (rest[0] === "compare") await compareView(root, rest[1], rest[2]);
    else await overview(root, ctx);
  } catch (err) {
    root.append(errorBox(err));
  }
}
