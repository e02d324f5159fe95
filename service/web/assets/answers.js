// Answer grades (#/labs/answers): answers judged by the configured LLM on faithfulness (to the contexts),
// correctness (against the reference) and completeness, several samples per item (the median and the spread kept).
// A grading is shown beside the set's latest retrieval metrics, and says "fix retrieval first" when the set's
// recall@10 is low: answer grades measure the generator only once the right passages reach it. Never a gate.

import { get, post } from "./api.js";
import { add, badge, barChart, errorBox, field, fmt, h, replace, table, when } from "./dom.js";
import { backLink, follow, RUNNING, showProgress, startError, statusLine, workList } from "./work.js";

const CRITERIA = ["faithfulness", "correctness", "completeness"];
const EXAMPLE = [
  { id: "hb-001", question: "How long do refunds take?", answer: "Refunds reach the card within 10 days.", contexts: ["Refunds are issued within 5–10 business days."] },
  { id: "hb-002", question: "What does VPN error 809 mean?", answer: "UDP port 500 is blocked; use the TCP profile." },
]
  .map((item) => JSON.stringify(item))
  .join("\n");

const gradingLink = (id, text = id) => h("a", { href: `#/labs/answers/${encodeURIComponent(id)}` }, text);
const runLink = (id) => h("a", { href: `#/dashboard/run/${encodeURIComponent(id)}` }, id);
const title = (c) => c[0].toUpperCase() + c.slice(1);

function retrievalNote(retrieval) {
  if (!retrieval?.note) return null;
  // the service's note begins "fix retrieval first: ": said once, as the heading of the box
  return h("div", { class: "alert-box", role: "alert", id: "retrieval-note" }, h("strong", {}, "Fix retrieval first: "), retrieval.note.replace(/^fix retrieval first:\s*/i, ""));
}

// The set's latest retrieval run beside the grades (an experiment's overrides are not what is served: skipped).
async function retrievalPanel(set, retrieval) {
  const panel = h("section", { class: "retrieval", id: "retrieval", "aria-labelledby": "retrieval-title" }, h("h4", { id: "retrieval-title" }, `Retrieval on set ${set}`));
  try {
    const runs = await get("/eval/runs", { set, limit: 10 });
    const latest = runs.find((r) => r.kind !== "experiment") || runs[0];
    if (!latest) {
      panel.append(h("p", {}, "No retrieval run of this set yet: ", h("a", { href: "#/dashboard" }, "run an evaluation"), " to see whether the right passages reach the generator."));
    } else {
      panel.append(
        h("p", {}, "Latest run ", runLink(latest.run_id), ` (${latest.kind}, ${when(latest.created_at)}):`),
        h(
          "dl",
          { class: "metrics" },
          h("dt", {}, "recall@10"),
          h("dd", { class: "recall" }, fmt(latest.metrics["recall@10"])),
          h("dt", {}, "mrr@10"),
          h("dd", {}, fmt(latest.metrics["mrr@10"])),
          h("dt", {}, "hit@5"),
          h("dd", {}, fmt(latest.metrics["hit@5"])),
        ),
      );
    }
  } catch (err) {
    panel.append(errorBox(err));
  }
  if (retrieval) {
    panel.append(
      h(
        "p",
        { class: "hint" },
        retrieval.run_id
          ? ["When graded: recall@10 ", fmt(retrieval["recall@10"]), " (run ", runLink(retrieval.run_id), `), the threshold ${retrieval.threshold}.`]
          : `When graded, the set had no run of the served configuration (the threshold is recall@10 ${retrieval.threshold}).`,
      ),
    );
  }
  return panel;
}

function gradeCell(g) {
  if (!g) return "–";
  return h("div", { class: "grade" }, h("strong", {}, fmt(g.median, 2)), g.spread ? h("span", { class: "hint" }, ` ± ${fmt(g.spread, 2)}`) : null, h("div", { class: "reason" }, g.reason));
}

async function report(view) {
  const r = view.result;
  const criteria = CRITERIA.filter((c) => c in (r.overall || {}));
  return h(
    "div",
    { class: "answer-report" },
    retrievalNote(r.retrieval),
    h(
      "div",
      { class: "split" },
      h(
        "div",
        {},
        barChart("Overall, per criterion (mean of the item medians)", criteria.map((c) => ({ label: c, value: r.overall[c] }))),
        table(
          ["Criterion", "Overall", "Spread"],
          criteria.map((c) => [title(c), fmt(r.overall[c]), fmt(r.spread?.[c])]),
          { caption: `Grades of ${r.graded} items (${r.ungraded} ungraded); spread: how much the judge's samples disagree` },
        ),
      ),
      await retrievalPanel(view.set, r.retrieval),
    ),
    table(
      ["Category", "Graded", "Ungraded", ...criteria.map(title)],
      (r.by_category || []).map((g) => [g.name, String(g.graded), String(g.ungraded), ...criteria.map((c) => fmt(g.means[c]))]),
      { caption: "Per category, worst first" },
    ),
    h(
      "div",
      { id: "answer-items" },
      table(
        ["Item", "Category", ...criteria.map(title), "Samples"],
        (r.items || []).map((i) => [
          h("code", {}, i.id),
          i.category,
          ...criteria.map((c) => (i.ungraded ? badge("ungraded", "fail") : gradeCell(i.criteria[c]))),
          `${i.used} used${i.unreadable ? `, ${i.unreadable} unreadable` : ""}`,
        ]),
        { caption: "Every item: the median grade ± its spread, and the judge's reason" },
      ),
    ),
    h(
      "p",
      { class: "hint" },
      `Judged by ${r.judge_model} (prompt ${r.prompt_version}), ${r.samples_per_item} samples per item; ${r.usage?.prompt_tokens ?? 0} prompt and ${r.usage?.completion_tokens ?? 0} completion tokens in ${r.usage?.requests ?? 0} requests.`,
      r.contexts_from ? [" Contexts from run ", runLink(r.contexts_from), "."] : null,
    ),
  );
}

async function detail(root, id) {
  const holder = h("article", { class: "panel", "aria-labelledby": "grading-title" });
  root.append(backLink("answers", "Answer grades"), holder);
  const path = `/eval/answers/${encodeURIComponent(id)}`;
  const line = statusLine("grading-status");
  const actions = h("div", { class: "review" });
  const body = h("div", {});
  const first = await get(path);
  replace(
    holder,
    h("h3", { id: "grading-title", tabindex: "-1" }, `Answer grading ${first.id}`),
    h("p", {}, `Set ${first.set} · ${first.params.items} items · started ${when(first.created_at)}`),
    line,
    actions,
    body,
  );
  const draw = (view) => {
    showProgress(line, view, "items");
    replace(actions, RUNNING.has(view.status) ? h("button", { type: "button", onclick: () => post(`${path}/cancel`, {}).catch((err) => replace(actions, errorBox(err))) }, "Cancel") : null);
  };
  draw(first);
  const final = RUNNING.has(first.status) ? await follow(path, holder, draw) : first;
  if (final.status === "done" && final.result) replace(body, await report(final));
}

// JSON Lines → items; an Error naming the line that is wrong.
function parseItems(text) {
  const items = [];
  text.split("\n").forEach((line, n) => {
    if (!line.trim()) return;
    let item;
    try {
      item = JSON.parse(line);
    } catch (err) {
      throw new Error(`line ${n + 1} is not JSON (${err.message})`);
    }
    if (!item || typeof item !== "object" || Array.isArray(item)) throw new Error(`line ${n + 1} is not a JSON object`);
    for (const key of ["id", "question", "answer"]) if (!(key in item)) throw new Error(`line ${n + 1} has no "${key}"`);
    items.push({ ...item, id: String(item.id) });
  });
  if (!items.length) throw new Error("no items: one JSON object a line");
  return items;
}

function startForm(sets) {
  const status = statusLine("grading-start-status");
  const out = h("div", { id: "grading-start-result" });
  const f = h(
    "form",
    { id: "answers-form", class: "stack" },
    h(
      "div",
      { class: "grid" },
      field("Set", h("input", { name: "set", required: true, list: "answer-sets", value: sets[0]?.name || "", autocomplete: "off" }), "its cases give the references"),
      h("datalist", { id: "answer-sets" }, sets.map((s) => h("option", { value: s.name }))),
      field("Run id", h("input", { name: "run_id", autocomplete: "off", spellcheck: "false" }), "optional: the contexts of items that bring none"),
      field("Contexts per item", h("input", { name: "k", type: "number", min: 1, max: 50, value: 5 }), "taken from the run"),
      field("Samples per item", h("input", { name: "samples", type: "number", min: 1, max: 9, value: 3 }), "the judge's median and spread"),
    ),
    field(
      "Items (JSON Lines: id, question, answer, and contexts, reference, category as needed)",
      h("textarea", { name: "items", rows: 6, spellcheck: "false", class: "code", id: "answer-items-input", placeholder: EXAMPLE, required: true }),
      "one object a line; an item's id names the set's case for its reference and the run's case for its contexts",
    ),
    h("button", { type: "submit", class: "primary" }, "Grade the answers"),
  );
  f.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(f);
    let items;
    try {
      items = parseItems(data.get("items"));
    } catch (err) {
      replace(out, errorBox(`The items are not valid: ${err.message}.`));
      f.elements.items.focus();
      return;
    }
    const body = { set: data.get("set").trim(), items, k: Number(data.get("k")), samples: Number(data.get("samples")) };
    if (data.get("run_id").trim()) body.run_id = data.get("run_id").trim();
    replace(out);
    replace(status, "Starting…");
    try {
      const started = await post("/eval/answers", body);
      const final = await follow(`/eval/answers/${encodeURIComponent(started.id)}`, status, (view) => showProgress(status, view, "items"));
      if (final.status === "done") location.hash = `#/labs/answers/${encodeURIComponent(final.id)}`;
      else if (final.error) replace(out, errorBox(final.error));
    } catch (err) {
      replace(status);
      replace(out, startError(err));
    }
  });
  return h("details", { class: "panel start-panel", id: "answers-start" }, h("summary", {}, "Grade answers"), f, status, out);
}

export async function render(root, ctx, { rest }) {
  if (rest[0]) {
    await detail(root, rest[0]);
    return;
  }
  const [sets, gradings] = await Promise.all([get("/eval/sets"), get("/eval/answers", { limit: 50 })]);
  const overall = (c) => (v) => fmt(v.summary.overall?.[c], 2);
  add(
    root,
    startForm(sets),
    h(
      "section",
      { class: "panel", "aria-labelledby": "gradings-title" },
      h("h3", { id: "gradings-title" }, "Answer gradings"),
      workList(
        "answers-list",
        "answers",
        gradings,
        [
          ...CRITERIA.map((c) => [title(c), overall(c)]),
          ["Graded", (v) => `${v.summary.graded}${v.summary.ungraded ? ` (+${v.summary.ungraded} ungraded)` : ""}`],
          ["Retrieval", (v) => (v.summary.retrieval?.note ? badge("fix retrieval first", "fail") : v.summary.retrieval?.["recall@10"] != null ? `recall@10 ${fmt(v.summary.retrieval["recall@10"])}` : "no run")],
        ],
        { caption: "Answer gradings, newest first", empty: "No grading yet: grade answers above." },
      ),
    ),
  );
}
