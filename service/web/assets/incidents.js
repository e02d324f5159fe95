// The incident desk: a form for support staff (the question, a search-as-you-type picker for the document that
// answers it, the evidence words, the category), the triage shown at once, and the review queue.

import { get, patch, post } from "./api.js";
import { badge, debounce, errorBox, field, h, replace, select, table, when } from "./dom.js";

const VERDICTS = {
  retrieved: "Retrieved: the source is in the results, so the failure is downstream of retrieval.",
  ranked_low: "Ranked low: retrieved, but below the cut the assistant used.",
  not_retrieved: "Not retrieved: no retriever brought the source back.",
  filtered_out: "Filtered out: the search's filters excluded the source.",
  stale_source: "Stale source: the document is superseded, archived, draft or expired.",
};
const STAGE_NAMES = { dense: "Dense", keyword: "Keyword (BM25)", fused: "Fused", rerank: "Rerank" };

// --- the document picker: a combobox over /search, one option per document ----------------------------------------

function picker(ctx, tenantInput) {
  const canSearch = ctx.can("search");
  const input = h("input", {
    id: "doc-picker",
    type: "text",
    role: "combobox",
    autocomplete: "off",
    "aria-autocomplete": "list",
    "aria-expanded": "false",
    "aria-controls": "doc-options",
    "aria-describedby": "doc-picker-hint",
    placeholder: canSearch ? "type words from its title or text" : "type the document id",
  });
  const hint = h(
    "small",
    { id: "doc-picker-hint", class: "hint" },
    canSearch
      ? "Suggestions come from a search as you type; pick one with the arrow keys and Enter."
      : "This key has no search role, so there are no suggestions: type the document's id and take it with Enter.",
  );
  const chosen = h("input", { type: "hidden", name: "doc_id", id: "doc-id" });
  const list = h("ul", { id: "doc-options", role: "listbox", class: "options", hidden: true, "aria-label": "Documents" });
  const shown = h("p", { class: "chosen", id: "doc-chosen", "aria-live": "polite" });
  let options = [];
  let active = -1;
  let asked = 0; // the latest lookup: an older answer arriving late is dropped

  const close = () => {
    list.hidden = true;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
    active = -1;
  };
  const choose = (option) => {
    asked += 1; // a lookup still on its way must not reopen the list over the choice
    chosen.value = option.doc_id;
    replace(shown, "Source: ", h("strong", {}, option.title), ` (${option.doc_id})`);
    input.value = option.doc_id;
    close();
  };
  const highlight = (i) => {
    active = i;
    list.querySelectorAll("[role=option]").forEach((el, n) => el.setAttribute("aria-selected", String(n === i)));
    input.setAttribute("aria-activedescendant", `doc-option-${i}`);
    list.children[i]?.scrollIntoView({ block: "nearest" });
  };
  const show = () => {
    replace(
      list,
      options.map((o, i) =>
        h(
          "li",
          { id: `doc-option-${i}`, role: "option", "aria-selected": "false", onmousedown: (e) => { e.preventDefault(); choose(o); } },
          h("span", { class: "option-title" }, o.label || o.title),
          h("span", { class: "option-id" }, o.doc_id),
        ),
      ),
    );
    input.removeAttribute("aria-activedescendant");
    active = -1;
    list.hidden = options.length === 0 || document.activeElement !== input;
    input.setAttribute("aria-expanded", String(!list.hidden));
  };
  const lookup = debounce(async () => {
    const text = input.value.trim();
    const mine = ++asked;
    let found = [];
    if (canSearch && text.length >= 2) {
      const filters = tenantInput.value.trim() ? { tenant: tenantInput.value.trim() } : {};
      try {
        const result = await post("/search", { query: text, k: 8, distinct_docs: true, fresh_only: false, rerank: false, filters });
        found = result.hits.map((hit) => ({ doc_id: hit.doc_id, title: hit.title }));
      } catch {
        found = [];
      }
    }
    if (mine !== asked) return;
    options = text ? [...found, { doc_id: text, title: text, label: `Use “${text}” as the document id` }] : [];
    show();
  }, 200);

  input.addEventListener("input", () => {
    chosen.value = "";
    replace(shown);
    lookup();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && list.hidden && input.value.trim() && !chosen.value) {
      // before the list came (or without suggestions): Enter takes what was typed as the id
      event.preventDefault();
      const text = input.value.trim();
      choose({ doc_id: text, title: text });
      return;
    }
    if (event.key === "ArrowDown" && list.hidden && options.length) {
      show();
    } else if (list.hidden) {
      return;
    } else if (event.key === "ArrowDown") {
      highlight(Math.min(active + 1, options.length - 1));
    } else if (event.key === "ArrowUp") {
      highlight(Math.max(active - 1, 0));
    } else if (event.key === "Enter") {
      choose(options[active >= 0 ? active : options.length - 1]); // nothing highlighted: the typed id itself
    } else if (event.key === "Escape") {
      close();
    } else {
      return;
    }
    event.preventDefault();
  });
  input.addEventListener("blur", () => setTimeout(close, 150));
  return h("div", { class: "field picker" }, h("label", { for: "doc-picker" }, "Document that answers it"), input, hint, list, chosen, shown);
}

// --- the triage ---------------------------------------------------------------------------------------------------

export function triageView(incident) {
  const t = incident.triage;
  if (!t) {
    return h("div", { class: "triage" }, h("p", {}, incident.triage_error ? `Triage could not run: ${incident.triage_error}` : "No triage yet."));
  }
  // a key without the search role for the tenant gets the verdict only: no rank, stages or hits to show
  const withheld = Object.keys(t.stages).length === 0;
  return h(
    "section",
    { class: "triage", "aria-labelledby": `triage-${incident.incident_id}` },
    h("h4", { id: `triage-${incident.incident_id}` }, "Triage ", badge(t.verdict.replace("_", " "), t.verdict)),
    h("p", { class: "verdict-text" }, VERDICTS[t.verdict] || t.verdict),
    h("p", {}, t.explanation),
    withheld ? null : h("p", {}, t.rank ? `Final rank #${t.rank} (the assistant used the first ${t.k}).` : `Not in the first ${t.k} results.`),
    withheld ? null : table(
      ["Stage", "Rank of the source"],
      Object.entries(t.stages).map(([stage, rank]) => [
        STAGE_NAMES[stage] || stage,
        rank ? `#${rank}` : stage === "rerank" ? "not reranked (no reranker, or below its depth)" : "not retrieved",
      ]),
      { caption: "Where each stage put the source" },
    ),
    t.filtered_by.length ? h("p", {}, `Excluded by: ${t.filtered_by.join(", ")}`) : null,
    t.top.length
      ? h("div", {}, h("p", {}, "What came instead:"), h("ol", { class: "instead" }, t.top.map((x) => h("li", {}, `${x.title || x.doc_id} `, h("code", {}, x.doc_id)))))
      : null,
  );
}

// --- the report form ----------------------------------------------------------------------------------------------

function reportForm(ctx, handoff, categories) {
  const tenant = h("input", { name: "tenant", value: handoff?.filters?.tenant || ctx.me.tenant || "", readonly: Boolean(ctx.me.tenant) });
  const out = h("div", { id: "report-result", "aria-live": "polite" });
  const carried = handoff ? Object.fromEntries(Object.entries(handoff.filters || {}).filter(([k]) => k !== "tenant")) : {};
  const f = h(
    "form",
    { id: "incident-form", class: "stack" },
    field("Question, as the user asked it", h("textarea", { name: "question", required: true, rows: 2, id: "incident-question" }, handoff?.question || "")),
    h("div", { class: "grid" }, field("Tenant", tenant), field("Category", h("input", { name: "category", list: "categories", value: "" }), "e.g. billing, product"), field("Reporter", h("input", { name: "reporter", required: true, value: ctx.me.name }))),
    h("datalist", { id: "categories" }, categories.map((c) => h("option", { value: c }))),
    picker(ctx, tenant),
    field("Evidence: the words in that document that answer it", h("input", { name: "evidence", id: "incident-evidence" }), "they keep the label right when the document is re-chunked"),
    field("The wrong answer the user got (optional)", h("textarea", { name: "answer", rows: 2 })),
    Object.keys(carried).length || handoff
      ? h("p", { class: "hint" }, `Search settings carried over: fresh_only ${handoff?.fresh_only !== false}${handoff?.k ? `, k ${handoff.k}` : ""}${Object.keys(carried).length ? `, filters ${JSON.stringify(carried)}` : ""}`)
      : null,
    h("button", { type: "submit", class: "primary" }, "Report"),
  );
  f.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(f);
    const body = {
      question: data.get("question").trim(),
      reporter: data.get("reporter").trim(),
      category: data.get("category").trim() || "uncategorized",
      tenant: data.get("tenant").trim() || null,
      filters: carried,
      fresh_only: handoff?.fresh_only !== false,
    };
    if (handoff?.k) body.k = handoff.k;
    if (data.get("doc_id")) {
      body.doc_id = data.get("doc_id");
    } else if (document.getElementById("doc-picker").value.trim()) {
      // typed but not taken: it may be a title, not an id; say so rather than send it
      replace(out, errorBox("Pick the document from the suggestions, or press Enter in the field to use what you typed as its id."));
      document.getElementById("doc-picker").focus();
      return;
    }
    if (data.get("evidence").trim()) body.evidence = data.get("evidence").trim();
    if (data.get("answer").trim()) body.answer = data.get("answer").trim();
    replace(out, h("p", { role: "status" }, "Filing and triaging…"));
    try {
      const made = await post("/eval/incidents", body);
      replace(
        out,
        h(
          "div",
          { class: "panel filed" },
          h("p", { role: "status" }, made.duplicate_of ? `Merged into incident #${made.duplicate_of} (${made.reports} reports).` : `Filed as incident #${made.incident_id}.`, " ", h("a", { href: `#/incidents/${made.incident_id}` }, "Open it")),
          triageView(made),
        ),
      );
    } catch (err) {
      replace(out, errorBox(err));
    }
  });
  return h("section", { class: "panel", "aria-labelledby": "report-title" }, h("h3", { id: "report-title" }, "Report a failed answer"), f, out);
}

// --- the review queue ---------------------------------------------------------------------------------------------

function reviewControls(ctx, incident, done) {
  if (!ctx.can("incidents:review")) return null;
  const reason = h("input", { name: "reason", "aria-label": `Reason for the review of incident ${incident.incident_id}`, placeholder: "reason" });
  const message = h("span", { class: "error", role: "alert" });
  const act = async (status) => {
    const body = { status, reviewer: ctx.me.name };
    if (status !== "new") {
      // the service keeps why each incident was accepted or rejected
      if (!reason.value.trim()) {
        replace(message, `Say why it is ${status}.`);
        reason.focus();
        return;
      }
      body.reason = reason.value.trim();
    }
    try {
      await patch(`/eval/incidents/${incident.incident_id}`, body);
      done();
    } catch (err) {
      replace(message, err.message);
    }
  };
  const buttons =
    incident.status === "new"
      ? [
          reason,
          h("button", { type: "button", class: "accept", onclick: () => act("accepted") }, "Accept"),
          h("button", { type: "button", class: "reject", onclick: () => act("rejected") }, "Reject"),
        ]
      : [h("button", { type: "button", onclick: () => act("new") }, "Reopen")];
  return h("div", { class: "review" }, buttons, message);
}

function queue(ctx, params) {
  const holder = h("div", { id: "queue" });
  const filters = h(
    "form",
    { class: "grid filters-row", id: "queue-filters" },
    field("Status", select("status", [["new", "new"], ["accepted", "accepted"], ["rejected", "rejected"], ["", "any"]], params.get("status") ?? "new")),
    field("Category", h("input", { name: "category", value: params.get("category") || "" })),
    field("Reporter", h("input", { name: "reporter", value: params.get("reporter") || "" })),
    field("Set", h("input", { name: "set", value: params.get("set") || "" })),
    field("Updated since", h("input", { name: "since", type: "date", value: params.get("since") || "" })),
    h("div", { class: "field" }, h("button", { type: "submit" }, "Filter")),
  );
  let before = null;
  let asked = {}; // the filters as last submitted: "Older incidents" pages on with these, not with unsent edits
  const status = h("p", { role: "status", tabindex: "-1", class: "queue-status" });
  const list = h("div", {});
  holder.append(status, list);
  let latest = 0; // the newest request: an older answer arriving late is dropped
  const load = async ({ more = false, focus = false, refilter = true } = {}) => {
    if (!more && refilter) asked = Object.fromEntries(new FormData(filters));
    const mine = ++latest;
    try {
      const page = await get("/eval/incidents", { ...asked, before: more ? before : undefined, limit: 25 });
      if (mine !== latest) return;
      before = page.next_before;
      const rows = page.incidents.map((i) => [
        h("a", { href: `#/incidents/${i.incident_id}` }, `#${i.incident_id}`),
        i.question,
        i.category,
        i.triage ? badge(i.triage.verdict.replace("_", " "), i.triage.verdict) : "–",
        badge(i.status),
        String(i.reports),
        when(i.updated_at),
        reviewControls(ctx, i, () => load({ focus: true, refilter: false })),
      ]);
      if (!more) replace(list);
      if (rows.length) {
        list.append(table(["Id", "Question", "Category", "Triage", "Status", "Reports", "Updated", "Review"], rows, { caption: "Incidents, newest first" }));
      }
      const shown = list.querySelectorAll("tbody tr").length;
      replace(status, shown ? `${shown} incidents shown${before ? "; older ones on request" : ""}.` : "No incidents match.");
      if (before) {
        list.append(
          h("button", { type: "button", class: "older", onclick: (e) => { e.target.remove(); load({ more: true, focus: true }); } }, "Older incidents"),
        );
      }
      if (focus) status.focus(); // the control that was used is gone: keep the keyboard in the queue
    } catch (err) {
      if (mine === latest) replace(status, errorBox(err));
    }
  };
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    load({ focus: true });
  });
  load();
  return h("section", { class: "panel", "aria-labelledby": "queue-title" }, h("h3", { id: "queue-title" }, ctx.can("incidents:review") ? "Review queue" : "Incidents"), filters, holder);
}

async function detail(root, ctx, id) {
  const holder = h("div", {});
  root.append(h("p", {}, h("a", { href: "#/incidents" }, "← Incident desk")), holder);
  const show = async () => {
    try {
      const i = await get(`/eval/incidents/${encodeURIComponent(id)}`);
      replace(
        holder,
        h(
          "article",
          { class: "panel", "aria-labelledby": "incident-title" },
          h("h3", { id: "incident-title", tabindex: "-1" }, `Incident #${i.incident_id} `, badge(i.status)),
          h("p", { class: "question" }, i.question),
          table(
            ["Field", "Value"],
            [
              ["Set", i.set],
              ["Category", i.category],
              ["Tenant", i.tenant || "–"],
              ["Sources", i.labels.map((l) => [l.doc_id || l.chunk_id, l.evidence ? ` (“${l.evidence}”)` : ""].join("")).join("; ")],
              ["Reports", `${i.reports} by ${i.reporters.join(", ")}`],
              ["Case once accepted", i.case_id],
              ["Last eval outcome", i.last_outcome ? `${i.last_outcome} (${i.last_run})` : "not replayed yet"],
              ["Reviewed", i.reviewer ? `${i.reviewer}, ${when(i.reviewed_at)}${i.reason ? `: ${i.reason}` : ""}` : "–"],
            ],
          ),
          reviewControls(ctx, i, async () => {
            await show();
            document.getElementById("incident-title")?.focus(); // the buttons that were used are redrawn
          }),
          triageView(i),
          h("h4", {}, "Reports"),
          h(
            "ol",
            { class: "reports" },
            (i.report_details || []).map((r) =>
              h("li", {}, `${when(r.reported_at)} · ${r.reporter}: “${r.question}”`, r.answer ? h("div", { class: "hint" }, `Answer given: ${r.answer}`) : null, r.note ? h("div", { class: "hint" }, `Note: ${r.note}`) : null),
            ),
          ),
          h("h4", {}, "History"),
          h("ol", { class: "history" }, (i.history || []).map((e) => h("li", {}, `${when(e.at)} · ${e.actor} · ${e.action}`))),
        ),
      );
    } catch (err) {
      replace(holder, errorBox(err));
    }
  };
  await show();
}

async function knownCategories() {
  try {
    const page = await get("/eval/incidents", { limit: 200, status: "" });
    return [...new Set(page.incidents.map((i) => i.category))].sort();
  } catch {
    return [];
  }
}

export async function render(root, ctx, { rest, params }) {
  if (rest[0]) {
    await detail(root, ctx, rest[0]);
    return;
  }
  const handoff = params.get("new") ? ctx.handoff : null;
  ctx.handoff = null;
  if (ctx.can("incidents:report")) root.append(reportForm(ctx, handoff, await knownCategories()));
  root.append(queue(ctx, params));
  if (handoff) document.getElementById("doc-picker")?.focus();
}
