// Sweeps (#/labs/sweeps): a grid (or a random sample of one) of chunking and search parameters replayed over a set.
// A finished sweep shows every configuration in a table that sorts by any column, quality against p95 latency as a
// scatter plot (the Pareto front filled and joined, the winner and the served configuration labelled), the winner
// against the served configuration on the held-out split, and the recommendation; "Promote" asks the service to
// serve the winner, behind the gate.

import { get, post } from "./api.js";
import { gateView } from "./dashboard.js";
import { add, badge, errorBox, field, fmt, h, replace, scatterPlot, select, sortableTable, table, when } from "./dom.js";
import { backLink, follow, RUNNING, showProgress, startError, statusLine, workList } from "./work.js";

const EXAMPLE_SPACE = '{\n  "mode": ["keyword", "hybrid"],\n  "alpha": [0.3, 0.5, 0.7]\n}';
const METRICS = ["ndcg@10", "recall@10", "mrr@10", "hit@5", "recall@5", "mrr"];
const HELD_OUT_METRICS = ["hit@5", "recall@10", "mrr@10", "ndcg@10"];

const sweepLink = (id, text = id) => h("a", { href: `#/labs/sweeps/${encodeURIComponent(id)}` }, text);
const ms = (v) => `${fmt(v, 1)} ms`;

// The row whose swept parameters all equal the served configuration's, if the sweep measured it.
function currentRow(result) {
  const current = result.current || {};
  return result.rows.find((r) => Object.entries(r.config).every(([k, v]) => String(current[k]) === String(v)));
}

function plot(result) {
  const q = result.quality;
  const current = currentRow(result);
  const points = result.rows.map((r) => ({
    x: r.p95_ms,
    y: r.metrics[q],
    marked: r.pareto,
    labels: [r.label === result.winner ? "winner" : null, r === current ? "current" : null].filter(Boolean),
    tip: `${r.label}\n${q} ${fmt(r.metrics[q])} · p95 ${ms(r.p95_ms)} · p50 ${ms(r.p50_ms)} · ${Math.round(r.context_tokens)} context tokens${r.pareto ? " · on the Pareto front" : ""}`,
  }));
  return scatterPlot(`${q} against p95 latency, one point per configuration (tune split, ${result.split.tune} cases)`, points, {
    xLabel: "p95 search latency (ms)",
    yLabel: q,
    markedName: "on the Pareto front",
  });
}

function rowsTable(result) {
  const q = result.quality;
  const star = (on) => (on ? h("span", { class: "star", title: "on the Pareto front" }, "★") : "");
  return sortableTable(
    [
      { label: "Configuration", value: (r) => r.label, cell: (r) => [h("code", {}, r.label), r.label === result.winner ? [" ", badge("winner", "pass")] : null] },
      { label: q, value: (r) => r.metrics[q], cell: (r) => fmt(r.metrics[q]), numeric: true, first: "desc" },
      { label: "p50", value: (r) => r.p50_ms, cell: (r) => ms(r.p50_ms), numeric: true },
      { label: "p95", value: (r) => r.p95_ms, cell: (r) => ms(r.p95_ms), numeric: true },
      { label: "Context tokens", value: (r) => r.context_tokens, cell: (r) => String(Math.round(r.context_tokens)), numeric: true },
      { label: "Pareto", value: (r) => (r.pareto ? 1 : 0), cell: (r) => star(r.pareto), first: "desc" },
    ],
    result.rows,
    { caption: `Every configuration on the tune split (click a column to sort)`, sortBy: 1, id: "sweep-rows", rowClass: (r) => (r.label === result.winner ? "winner" : null) },
  );
}

function heldOut(result) {
  const c = result.held_out;
  if (!c) return h("p", {}, "No held-out comparison (the held-out split was empty).");
  const signed = (d) => h("span", { class: d > 0.0005 ? "up" : d < -0.0005 ? "down" : "same" }, `${d > 0 ? "+" : ""}${fmt(d)}`);
  const lowerBetter = c.lower_is_better ? " (lower is better)" : "";
  return h(
    "div",
    { class: "held-out", id: "held-out" },
    table(
      ["", "Winner", "Current", "Winner − current"],
      [
        [`${result.quality}${lowerBetter}`, fmt(c.winner_mean), fmt(c.current_mean), signed(c.delta)],
        ...HELD_OUT_METRICS.filter((m) => m in (c.winner_metrics || {}) && m !== result.quality).map((m) => [
          m,
          fmt(c.winner_metrics[m]),
          fmt(c.current_metrics[m]),
          signed(c.winner_metrics[m] - c.current_metrics[m]),
        ]),
      ],
      { caption: `The winner against the served configuration on the held-out split (${c.cases} cases)` },
    ),
    h("p", {}, `Paired test: p = ${fmt(c.p_value, 4)} · `, c.significant ? badge("significant", "pass") : badge("not significant", "draft")),
  );
}

function promoteControls(ctx, view) {
  if (!ctx.can("eval:admin") || view.status !== "done") return null;
  const baseline = h("input", { name: "baseline", id: "promote-baseline", placeholder: view.set, autocomplete: "off" });
  const out = h("div", { id: "promote-result", "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "primary", id: "promote" }, "Promote the winner");
  const f = h(
    "form",
    { class: "review", id: "promote-form" },
    h("label", { for: baseline.id }, "Gate against baseline"),
    baseline,
    button,
  );
  f.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    replace(out, h("p", { role: "status" }, "Replaying the winner's configuration through the gate…"));
    try {
      const body = baseline.value.trim() ? { baseline: baseline.value.trim() } : {};
      const done = await post(`/eval/sweeps/${encodeURIComponent(view.id)}/promote`, body);
      replace(
        out,
        h("p", { role: "status" }, done.promoted ? badge("promoted", "pass") : badge("not promoted", "fail"), done.promoted ? " The winner's configuration is served now." : " The gate kept the served configuration."),
        gateView(done.run?.gate),
        done.run?.run_id ? h("p", {}, "Gated run: ", h("a", { href: `#/dashboard/run/${encodeURIComponent(done.run.run_id)}` }, done.run.run_id)) : null,
        h("details", {}, h("summary", {}, "Served search defaults"), h("pre", {}, JSON.stringify(done.served, null, 2))),
      );
    } catch (err) {
      const absent = (err.status === 404 && /^not found$/i.test(err.message)) || err.status === 405;
      replace(out, absent ? h("p", { class: "warning", role: "alert" }, "This service cannot promote a sweep's winner yet (no POST /eval/sweeps/{id}/promote): apply its configuration by hand.") : errorBox(err));
    } finally {
      button.disabled = false;
    }
  });
  return h("div", { class: "promote" }, f, out);
}

function sweepResult(ctx, view) {
  const result = view.result;
  const current = currentRow(result);
  return h(
    "div",
    { class: "sweep-result" },
    h("p", { class: "recommendation", id: "recommendation" }, h("strong", {}, "Recommendation: "), result.recommendation),
    promoteControls(ctx, view),
    h(
      "p",
      {},
      `${result.rows.length} configurations (${result.mode} search, seed ${result.seed}), chosen by ${result.quality} on the tune split (${result.split.tune} cases), `,
      `reported on the held-out split (${result.split.test} cases, split by ${result.split.origin}).`,
    ),
    h("p", {}, "Winner: ", h("code", {}, result.winner), " · served: ", h("code", {}, result.current_label || "–"), current ? "" : " (not among the swept points)"),
    h("div", { class: "split" }, h("div", {}, plot(result)), h("div", {}, heldOut(result))),
    rowsTable(result),
    result.notes?.length ? h("ul", { class: "notes" }, result.notes.map((n) => h("li", {}, n))) : null,
    h("details", {}, h("summary", {}, "The space swept"), h("pre", {}, JSON.stringify(result.space, null, 2))),
  );
}

async function detail(root, ctx, id) {
  const holder = h("article", { class: "panel", "aria-labelledby": "sweep-title" });
  root.append(backLink("sweeps", "Sweeps"), holder);
  const path = `/eval/sweeps/${encodeURIComponent(id)}`;
  const line = statusLine("sweep-status");
  const actions = h("div", { class: "review" });
  const body = h("div", {});
  const first = await get(path);
  replace(
    holder,
    h("h3", { id: "sweep-title", tabindex: "-1" }, `Sweep ${first.id}`),
    h("p", {}, `Set ${first.set} · started ${when(first.created_at)}`),
    line,
    actions,
    body,
  );
  const draw = (view) => {
    showProgress(line, view, "steps");
    replace(
      actions,
      RUNNING.has(view.status)
        ? h("button", { type: "button", onclick: () => post(`${path}/cancel`, {}).catch((err) => replace(actions, errorBox(err))) }, "Cancel")
        : null,
    );
  };
  draw(first);
  const final = RUNNING.has(first.status) ? await follow(path, holder, draw) : first;
  if (final.status === "done" && final.result) replace(body, sweepResult(ctx, final));
}

function startForm(sets) {
  const status = statusLine("sweep-start-status");
  const out = h("div", { id: "sweep-start-result" });
  const search = select("search", [["grid", "grid: every combination"], ["random", "random: a sample of the grid"]], "grid");
  const samples = h("input", { name: "samples", type: "number", min: 1, max: 5000, value: 20, disabled: true });
  search.addEventListener("change", () => (samples.disabled = search.value !== "random"));
  const f = h(
    "form",
    { id: "sweep-form", class: "stack" },
    h(
      "div",
      { class: "grid" },
      field("Set", select("set", sets.map((s) => [s.name, `${s.name} (${s.cases} cases)`]), sets[0]?.name)),
      field("Search", search),
      field("Samples", samples, "random search only"),
      field("Metric", h("input", { name: "metric", value: "ndcg@10", list: "sweep-metrics", required: true, autocomplete: "off" }), "the quality the winner is chosen by"),
      h("datalist", { id: "sweep-metrics" }, METRICS.map((m) => h("option", { value: m }))),
      field("Held-out share", h("input", { name: "test_share", type: "number", min: 0.05, max: 0.95, step: 0.05, value: 0.5 })),
      field("Seed", h("input", { name: "seed", type: "number", min: 0, value: 0 })),
    ),
    field(
      "Space (JSON: parameter → values)",
      h("textarea", { name: "space", rows: 5, spellcheck: "false", class: "code", id: "sweep-space" }, EXAMPLE_SPACE),
      "chunk_size, chunk_overlap, mode, fusion, alpha, rrf_k, candidates, rerank, rerank_depth, k; chunking values build temporary indexes",
    ),
    h("button", { type: "submit", class: "primary" }, "Start the sweep"),
  );
  f.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(f);
    let space;
    try {
      space = JSON.parse(data.get("space"));
      if (!space || typeof space !== "object" || Array.isArray(space) || !Object.values(space).every(Array.isArray)) throw new Error("an object of parameter → list of values");
    } catch (err) {
      replace(out, errorBox(`The space is not valid: ${err.message}. For example ${EXAMPLE_SPACE.replace(/\s+/g, " ")}`));
      f.elements.space.focus();
      return;
    }
    const body = { set: data.get("set"), space, search: data.get("search"), metric: data.get("metric").trim(), seed: Number(data.get("seed")), test_share: Number(data.get("test_share")) };
    if (body.search === "random") body.samples = Number(data.get("samples"));
    replace(out);
    replace(status, "Starting…");
    try {
      const started = await post("/eval/sweeps", body);
      const final = await follow(`/eval/sweeps/${encodeURIComponent(started.id)}`, status, (view) => showProgress(status, view, "steps"));
      if (final.status === "done") location.hash = `#/labs/sweeps/${encodeURIComponent(final.id)}`;
      else if (final.error) replace(out, errorBox(final.error));
    } catch (err) {
      replace(status);
      replace(out, startError(err));
    }
  });
  return h("details", { class: "panel start-panel", id: "sweep-start" }, h("summary", {}, "Start a sweep"), f, status, out);
}

export async function render(root, ctx, { rest }) {
  if (rest[0]) {
    await detail(root, ctx, rest[0]);
    return;
  }
  const [sets, sweeps] = await Promise.all([get("/eval/sets"), get("/eval/sweeps", { limit: 50 })]);
  add(
    root,
    startForm(sets),
    h(
      "section",
      { class: "panel", "aria-labelledby": "sweeps-title" },
      h("h3", { id: "sweeps-title" }, "Sweeps"),
      workList(
        "sweep-list",
        "sweeps",
        sweeps,
        [
          ["Metric", (v) => v.summary.quality],
          ["Configurations", (v) => String(v.summary.configurations)],
          ["Winner", (v) => h("code", {}, v.summary.winner)],
          ["Held-out Δ", (v) => (v.summary.held_out ? `${v.summary.held_out.delta > 0 ? "+" : ""}${fmt(v.summary.held_out.delta)}${v.summary.held_out.significant ? " (significant)" : ""}` : "–")],
        ],
        { caption: "Sweeps, newest first", empty: "No sweep yet: start one above." },
      ),
    ),
  );
}
