// The search playground: every /search parameter, results with the query's matching words marked (by the service's
// own keyword analysis), the explain view (each
// hit's rank in each stage and where rerank moved it), per-stage timings, whether anything here probably answers (the
// service's "nothing matches" signal), and "report this as a failure".

import { post } from "./api.js";
import { badge, errorBox, field, fmt, h, highlighted, replace, select } from "./dom.js";

const STAGES = [
  ["dense", "Dense"],
  ["keyword", "Keyword (BM25)"],
  ["fusion", "Fused"],
  ["rerank", "Rerank"],
];
const STATUSES = ["current", "superseded", "archived", "draft"];
// the choices of the search options a playground search and an experiment run share ("": the service's default)
export const CHOICES = {
  mode: [["", "default"], ["hybrid", "hybrid"], ["dense", "dense"], ["keyword", "keyword"]],
  fusion: [["", "default"], ["rrf", "RRF"], ["weighted", "weighted"]],
  rerank: [["", "default"], ["on", "on"], ["off", "off"]],
};

export function searchOptions(v) {
  // mode, fusion, alpha and rerank as a /search body (or an eval run's overrides) has them; unset ones left out
  const out = {};
  if (v.mode) out.mode = v.mode;
  if (v.fusion) out.fusion = v.fusion;
  if (v.alpha !== "" && v.alpha !== null && v.alpha !== undefined) out.alpha = Number(v.alpha);
  if (v.rerank) out.rerank = v.rerank === "on";
  return out;
}

export function formValues(form) {
  const data = new FormData(form);
  return {
    q: data.get("q").trim(),
    mode: data.get("mode"),
    fusion: data.get("fusion"),
    alpha: data.get("alpha"),
    k: data.get("k"),
    rerank: data.get("rerank"),
    fresh_only: data.get("fresh_only") ? "1" : "0",
    tenant: data.get("tenant").trim(),
    tags: data.get("tags").trim(),
    status: data.getAll("status").join(","),
    updated_after: data.get("updated_after"),
    updated_before: data.get("updated_before"),
    metadata: data.get("metadata").trim(),
  };
}

export function requestBody(v) {
  const filters = {};
  if (v.tenant) filters.tenant = v.tenant;
  if (v.tags) filters.tags = v.tags.split(",").map((t) => t.trim()).filter(Boolean);
  if (v.status) filters.status = v.status.split(",");
  if (v.updated_after) filters.updated_after = v.updated_after;
  if (v.updated_before) filters.updated_before = v.updated_before;
  if (v.metadata) {
    try {
      filters.metadata = JSON.parse(v.metadata);
    } catch {
      throw new Error('Metadata filter: not JSON. Write e.g. {"owner": "Ana"} or {"priority": {"gte": 2}}.');
    }
  }
  const body = { query: v.q, explain: true, highlight: true, fresh_only: v.fresh_only !== "0", filters, ...searchOptions(v) };
  if (v.k) body.k = Number(v.k);
  return body;
}

function form(values) {
  const v = (name, fallback = "") => values.get(name) ?? fallback;
  const statuses = v("status").split(",").filter(Boolean);
  return h(
    "form",
    { id: "search-form", class: "search-form", role: "search" },
    h(
      "div",
      { class: "query-row" },
      field("Question", h("input", { name: "q", type: "search", value: v("q"), required: true, autocomplete: "off", id: "q" })),
      h("button", { type: "submit", class: "primary" }, "Search"),
    ),
    h(
      "div",
      { class: "grid params" },
      field("Mode", select("mode", CHOICES.mode, v("mode"))),
      field("Fusion", select("fusion", CHOICES.fusion, v("fusion"))),
      field("Alpha", h("input", { name: "alpha", type: "number", min: 0, max: 1, step: 0.05, value: v("alpha") }), "dense weight (weighted fusion)"),
      field("k", h("input", { name: "k", type: "number", min: 1, max: 100, value: v("k") })),
      field("Rerank", select("rerank", CHOICES.rerank, v("rerank"))),
      h(
        "div",
        { class: "field check" },
        h("input", { type: "checkbox", name: "fresh_only", id: "fresh_only", checked: v("fresh_only", "1") !== "0" }),
        h("label", { for: "fresh_only" }, "Fresh only (current, not expired)"),
      ),
    ),
    h(
      "details",
      { class: "filters", open: ["tenant", "tags", "status", "updated_after", "updated_before", "metadata"].some((n) => v(n)) },
      h("summary", {}, "Filters"),
      h(
        "div",
        { class: "grid" },
        field("Tenant", h("input", { name: "tenant", value: v("tenant") })),
        field("Tags", h("input", { name: "tags", value: v("tags") }), "any of, comma-separated"),
        h(
          "fieldset",
          { class: "field" },
          h("legend", {}, "Status"),
          STATUSES.map((s) =>
            h("label", { class: "inline" }, h("input", { type: "checkbox", name: "status", value: s, checked: statuses.includes(s) }), ` ${s}`),
          ),
        ),
        field("Updated after", h("input", { name: "updated_after", type: "date", value: v("updated_after") })),
        field("Updated before", h("input", { name: "updated_before", type: "date", value: v("updated_before") })),
        field("Metadata", h("input", { name: "metadata", value: v("metadata"), spellcheck: "false" }), '{"key": value}'),
      ),
    ),
  );
}

function explain(hit, rank) {
  const stages = hit.stages || {};
  const rows = STAGES.filter(([key]) => stages[key]).map(([key, name]) =>
    h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, stages[key].rank ? `#${stages[key].rank}` : "not retrieved"), h("td", {}, fmt(stages[key].score, 4))),
  );
  const fused = stages.fusion?.rank;
  const reranked = stages.rerank?.rank;
  let story;
  if (reranked && fused) {
    const moved = fused - reranked;
    story = moved === 0 ? `Rerank kept it at #${reranked}.` : `Rerank moved it from #${fused} to #${reranked} (${moved > 0 ? "up" : "down"} ${Math.abs(moved)}).`;
  } else if (fused) {
    story = `Fused rank #${fused}; not reranked.`;
  } else {
    story = `Rank #${rank} from a single retriever.`;
  }
  const found = ["dense", "keyword"].filter((k) => stages[k]?.rank).map((k) => (k === "dense" ? "dense" : "keyword"));
  const origin = found.length === 2 ? "Both retrievers found it." : found.length === 1 ? `Only the ${found[0]} retriever found it.` : "";
  return h(
    "details",
    { class: "explain" },
    h("summary", {}, "Explain"),
    h("p", {}, `${origin} ${story}`.trim()),
    h("div", { class: "table-wrap" }, h("table", {}, h("caption", {}, "Rank and score per stage"), h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Stage"), h("th", { scope: "col" }, "Rank"), h("th", { scope: "col" }, "Score"))), h("tbody", {}, rows))),
  );
}

function hitView(hit, rank) {
  return h(
    "li",
    { class: "hit" },
    h(
      "article",
      { "aria-labelledby": `hit-${rank}` },
      h(
        "header",
        {},
        h("span", { class: "rank" }, `#${rank}`),
        h("h3", { id: `hit-${rank}` }, hit.title || hit.doc_id),
        hit.current ? null : badge(hit.status === "current" ? "expired" : hit.status),
        h("span", { class: "score", title: "final score" }, fmt(hit.score, 4)),
      ),
      h("p", { class: "path" }, hit.heading_path ? `${hit.title} › ${hit.heading_path}` : hit.title, " · ", h("a", { href: `#/documents/${encodeURIComponent(hit.doc_id)}` }, hit.doc_id)),
      h("p", { class: "text" }, highlighted(hit.text, hit.highlights)),
      hit.tags.length ? h("p", { class: "tags" }, hit.tags.map((t) => badge(t, "tag"))) : null,
      explain(hit, rank),
    ),
  );
}

function bar(ms, total) {
  const el = h("span", { class: "timing-bar" });
  el.style.width = `${Math.max(1, (100 * ms) / (total || 1)).toFixed(1)}%`;
  return el;
}

function timings(result) {
  const entries = Object.entries(result.timings_ms);
  const total = result.timings_ms.total ?? Math.max(...entries.map(([, ms]) => ms));
  return h(
    "details",
    { class: "timings", open: true },
    h("summary", {}, `Timings: ${fmt(total, 1)} ms`),
    h(
      "ul",
      { class: "timing-bars" },
      entries.map(([stage, ms]) =>
        h("li", {}, h("span", { class: "stage" }, stage), bar(ms, total), h("span", { class: "ms" }, `${fmt(ms, 1)} ms`)),
      ),
    ),
  );
}

// two numbers shown side by side, to as many digits (2 to 4) as tell them apart
function apart(a, b) {
  let digits = 2;
  while (digits < 4 && fmt(a, digits) === fmt(b, digits)) digits += 1;
  return [fmt(a, digits), fmt(b, digits)];
}

function noAnswer(verdict) {
  // the service's "nothing matches" signal (`no_answer`): the best hit's dense score against the threshold learned on
  // the labelled sets (POST /eval/no-answer/calibrate); absent from an older service's responses
  if (!verdict) return null;
  const { score, threshold, k, nothing_matches: nothing, why } = verdict;
  const top = k ? ` (top ${k})` : "";
  const hint = "the best hit's dense (cosine) score, against a threshold learned on the labelled sets";
  if (nothing === true) {
    const [best, line] = apart(score, threshold);
    const detail =
      score === null || score === undefined
        ? `no hit to judge (the learned threshold is ${fmt(threshold, 2)}${top}).`
        : `best match ${best}, below the learned threshold ${line}${top}.`;
    return h(
      "div",
      { class: "alert-box caution no-answer", role: "alert", id: "no-answer", dataset: { verdict: "nothing" }, title: hint },
      h("strong", {}, "Nothing here probably answers this: "),
      detail,
    );
  }
  if (nothing === false) {
    const [best, line] = apart(score, threshold);
    return h(
      "p",
      { class: "no-answer quiet", id: "no-answer", dataset: { verdict: "answer" }, title: hint },
      `Best match ${best}, above the learned threshold ${line}${top}: the hits probably hold an answer.`,
    );
  }
  const scored = score === null || score === undefined ? "" : ` (best match ${fmt(score, 2)})`;
  return h(
    "p",
    { class: "no-answer quiet unjudged", id: "no-answer", dataset: { verdict: "unknown" }, title: hint },
    `Not judged whether anything here answers${scored}: ${why || "the service cannot tell"}`,
  );
}

function results(result, values, body, ctx) {
  const report = ctx.can("incidents:report")
    ? h(
        "button",
        {
          type: "button",
          id: "report-failure",
          onclick: () => {
            ctx.handoff = { question: values.q, filters: body.filters, fresh_only: body.fresh_only, k: body.k };
            ctx.go("#/incidents?new=1");
          },
        },
        "Report this as a failure",
      )
    : null;
  return h(
    "div",
    { class: "results" },
    h("div", { class: "results-head" }, h("p", { role: "status" }, `${result.hits.length} hits${result.reranked ? ", reranked" : ""}`), report),
    noAnswer(result.no_answer),
    result.warnings.map((w) => h("p", { class: "warning" }, w)),
    timings(result),
    h("details", { class: "params-used" }, h("summary", {}, "Parameters used"), h("pre", {}, JSON.stringify(result.params, null, 2))),
    h("ol", { class: "hits" }, result.hits.map((hit, i) => hitView(hit, i + 1))),
  );
}

export async function render(root, ctx, { params }) {
  const out = h("div", { id: "search-results" });
  const f = form(params);
  f.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = formValues(f);
    const query = new URLSearchParams(Object.entries(values).filter(([, value]) => value !== "" && value !== null));
    ctx.go(`#/search?${query}`);
  });
  root.append(f, out);
  if (!params.get("q")) {
    f.querySelector("#q").focus();
    return;
  }
  const values = formValues(f);
  replace(out, h("p", { class: "loading", role: "status" }, "Searching…"));
  try {
    const body = requestBody(values);
    const result = await post("/search", body);
    replace(out, results(result, values, body, ctx));
  } catch (err) {
    replace(out, errorBox(err));
  }
}
