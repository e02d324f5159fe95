// Synthetic cases (#/labs/synthesis): draft a day-0 set from the index's own chunks with the configured LLM, follow
// the drafting, read what it made (drafts by status, discards by reason, the copy overlap as a histogram, tokens,
// model and prompt version), and review the proposed cases one by one or all shown at once, as the incident desk
// reviews incidents. The discarded drafts stay viewable with the rules they broke.

import { get, post } from "./api.js";
import { add, badge, errorBox, field, fmt, h, histogram, replace, select, table, when } from "./dom.js";
import { backLink, follow, RUNNING, showProgress, startError, statusLine, workList } from "./work.js";

const STATUSES = ["proposed", "accepted", "rejected", "discarded"];
// why quality control discarded a draft (eval/synthetic.py REASONS, plus the LLM check and deduplication)
const REASONS = {
  too_short: "too short to be a real question",
  pronoun_led: "leads with a pronoun that refers to nothing",
  refers_to_source: "mentions the source instead of the topic",
  title_only: "answerable from the title and headings alone",
  copied: "copies a long run of words from the passage",
  not_answered: "the LLM's check found the passage does not answer it",
  check_unreadable: "the LLM's check gave no readable answer",
  near_duplicate: "nearly repeats another drafted question",
  malformed: "the LLM's reply held no question",
};
const reasonText = (code) => (REASONS[code] ? `${code}: ${REASONS[code]}` : code);

const synthesisLink = (id, text = id) => h("a", { href: `#/labs/synthesis/${encodeURIComponent(id)}` }, text);

// --- what a synthesis made ------------------------------------------------------------------------------------------

export function summaryView(s) {
  const statuses = Object.entries(s.by_status || {});
  const reasons = Object.entries(s.discarded_by_reason || {}).sort((a, b) => b[1] - a[1]);
  const overlap = s.overlap || {};
  const bins = Object.entries(overlap.histogram || {}).map(([label, count]) => ({ label, count }));
  return h(
    "div",
    { class: "synthesis-summary" },
    h(
      "dl",
      { class: "metrics" },
      h("dt", {}, "Passages"),
      h("dd", {}, String(s.passages)),
      h("dt", {}, "Drafted"),
      h("dd", { class: "drafted" }, String(s.drafted)),
      statuses.map(([status, n]) => [h("dt", {}, status), h("dd", {}, String(n))]),
    ),
    h(
      "div",
      { class: "split" },
      h(
        "div",
        {},
        reasons.length
          ? table(["Reason", "Drafts"], reasons.map(([code, n]) => [reasonText(code), String(n)]), { caption: "Discarded, by reason (a draft may break several rules)" })
          : h("p", {}, "Nothing was discarded."),
        table(
          ["", "Value"],
          [
            ["Model", s.generator?.model || "–"],
            ["Prompt version", s.generator?.prompt_version || "–"],
            ["Tokens", `${s.usage?.prompt_tokens ?? 0} prompt + ${s.usage?.completion_tokens ?? 0} completion`],
            ["Requests", `${s.usage?.requests ?? 0} (${s.usage?.retries ?? 0} retried)`],
            ["Languages", Object.entries(s.languages || {}).map(([l, n]) => `${l} ${n}`).join(", ") || "–"],
          ],
          { caption: "The LLM" },
        ),
      ),
      h(
        "div",
        {},
        bins.length ? histogram(`Copy overlap with the passage, ${overlap.count} drafts`, bins) : null,
        h("p", { class: "hint" }, `Overlap: mean ${fmt(overlap.mean, 2)}, median ${fmt(overlap.p50, 2)}, p90 ${fmt(overlap.p90, 2)}, max ${fmt(overlap.max, 2)}. A high overlap copies the passage's words and flatters keyword search.`),
        Object.keys(s.strata || {}).length
          ? h("details", {}, h("summary", {}, `The sample's strata (${Object.keys(s.strata).length})`), table(["Tenant / tag", "Passages"], Object.entries(s.strata).map(([k, n]) => [k, String(n)])))
          : null,
      ),
    ),
  );
}

// --- the form that starts one ---------------------------------------------------------------------------------------

function startForm(ctx, setNames, onDone) {
  const status = statusLine("synthesis-status");
  const outcome = h("div", { id: "synthesis-outcome" });
  const f = h(
    "form",
    { id: "synthesis-form", class: "grid" },
    field("Set", h("input", { name: "set", required: true, list: "synthesis-sets", pattern: "[A-Za-z0-9_.\\-]{1,100}", title: "letters, digits, _ - . (at most 100)", autocomplete: "off" }), "a new or stored set; the packaged handbook is read-only"),
    h("datalist", { id: "synthesis-sets" }, setNames.map((n) => h("option", { value: n }))),
    field("Passages", h("input", { name: "passages", type: "number", min: 1, max: 2000, value: 20, required: true }), "chunks sampled across tenants, tags and documents"),
    field("Questions per passage", h("input", { name: "per_passage", type: "number", min: 1, max: 5, value: 2, required: true })),
    field("Seed", h("input", { name: "seed", type: "number", min: 0, value: 0, required: true }), "the same seed samples the same chunks"),
    field("Tags", h("input", { name: "tags", autocomplete: "off" }), "comma-separated; empty: every document"),
    field("Tenant", h("input", { name: "tenant", autocomplete: "off" }), "empty: every tenant"),
    h("div", { class: "field check wide" }, h("input", { type: "checkbox", name: "check", id: "synthesis-check", checked: true }), h("label", { for: "synthesis-check" }, "Ask the LLM to check each question")),
    h("div", { class: "field check wide" }, h("input", { type: "checkbox", name: "accept_all", id: "synthesis-accept-all" }), h("label", { for: "synthesis-accept-all" }, "Accept all survivors, unreviewed")),
    h("div", { class: "field" }, h("button", { type: "submit", class: "primary" }, "Draft questions")),
  );
  f.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(f);
    const set = data.get("set").trim();
    const body = {
      passages: Number(data.get("passages")),
      per_passage: Number(data.get("per_passage")),
      seed: Number(data.get("seed")),
      tags: data.get("tags").split(",").map((t) => t.trim()).filter(Boolean),
      check: data.get("check") === "on",
      accept_all: data.get("accept_all") === "on",
    };
    if (data.get("tenant").trim()) body.tenant = data.get("tenant").trim();
    const button = f.querySelector("button[type=submit]");
    button.disabled = true;
    replace(outcome);
    replace(status, "Starting…");
    try {
      const started = await post(`/eval/sets/${encodeURIComponent(set)}/synthesize`, body);
      const final = await follow(`/eval/syntheses/${encodeURIComponent(started.id)}`, status, (view) => showProgress(status, view, "passages"));
      if (final.status === "done") {
        replace(outcome, h("p", {}, "Synthesis ", synthesisLink(final.id), ` of set ${final.set}:`), summaryView(final.result || final.summary));
        onDone(final.set);
      } else if (final.error) {
        replace(outcome, errorBox(final.error));
      }
    } catch (err) {
      replace(status);
      replace(outcome, startError(err));
    } finally {
      button.disabled = false;
    }
  });
  return h(
    "details",
    { class: "panel start-panel", id: "synthesis-start", open: true },
    h("summary", {}, "Draft a synthetic set with the LLM"),
    h("p", { class: "hint" }, "Questions are drafted from the index's own chunks, filtered by rules, the LLM's check and near-duplicate removal, and land as proposed cases to review below."),
    f,
    status,
    outcome,
  );
}

// --- the review -----------------------------------------------------------------------------------------------------

// The evidence marked in a text (the first place it occurs, ignoring case); the text as it is when absent.
function marked(text, evidence) {
  const at = evidence ? text.toLowerCase().indexOf(evidence.toLowerCase()) : -1;
  if (at < 0) return [text];
  return [text.slice(0, at), h("mark", {}, text.slice(at, at + evidence.length)), text.slice(at + evidence.length)];
}

function passageView(p, label) {
  // the chunk the question was drafted from, fetched when opened, with the evidence marked
  const holder = h("div", { class: "passage" });
  const details = h("details", { class: "passage-details" }, h("summary", {}, "Show the passage"), holder);
  let loaded = false;
  details.addEventListener("toggle", async () => {
    if (!details.open || loaded) return;
    loaded = true;
    replace(holder, h("p", { class: "hint" }, "Loading…"));
    try {
      const doc = await get(`/documents/${encodeURIComponent(label.doc_id)}`);
      const chunk = doc.chunks.find((c) => c.chunk_id === p.chunk_id);
      replace(
        holder,
        chunk
          ? [h("p", { class: "path" }, `${doc.title} › ${chunk.heading_path || "(top of the document)"}`), h("p", { class: "text chunk-text" }, marked(chunk.text, label.evidence))]
          : h("p", { class: "warning" }, `Chunk ${p.chunk_id} is gone (the document was re-ingested since).`),
      );
    } catch (err) {
      replace(holder, errorBox(err));
    }
  });
  return details;
}

function overlapBadge(overlap) {
  if (overlap === null || overlap === undefined) return badge("–");
  return badge(fmt(overlap, 2), overlap >= 0.6 ? "fail" : overlap >= 0.3 ? "draft" : "pass");
}

function proposalCard(ctx, p, act) {
  const label = p.case?.relevant?.[0] || {};
  const docId = label.doc_id || p.chunk_id.split("#")[0];
  const titleId = `proposal-${p.id}`;
  const reason = h("input", { name: "reason", placeholder: "reason (optional)", "aria-label": `Reason for the review of draft ${p.id}` });
  const review =
    p.status === "proposed" && ctx.can("eval:admin")
      ? h(
          "div",
          { class: "review" },
          reason,
          h("button", { type: "button", class: "accept", "aria-label": `Accept draft ${p.id}`, onclick: () => act([p.id], "accepted", reason.value) }, "Accept"),
          h("button", { type: "button", class: "reject", "aria-label": `Reject draft ${p.id}`, onclick: () => act([p.id], "rejected", reason.value) }, "Reject"),
        )
      : null;
  return h(
    "article",
    { class: `panel proposal status-${p.status}`, "aria-labelledby": titleId, dataset: { id: String(p.id) } },
    h("h4", { id: titleId, class: "question" }, p.question || "(no question)"),
    h(
      "p",
      { class: "meta" },
      badge(p.status),
      ` #${p.id} · `,
      p.case?.category ? `category ${p.case.category} · ` : "",
      "source ",
      h("a", { href: `#/documents/${encodeURIComponent(docId)}` }, docId),
      " · chunk ",
      h("code", {}, p.chunk_id || "–"),
      p.tenant ? ` · tenant ${p.tenant}` : "",
    ),
    label.evidence ? h("blockquote", { class: "evidence" }, h("span", { class: "hint" }, "Evidence: "), h("mark", {}, label.evidence)) : null,
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Copy overlap"),
      h("dd", {}, overlapBadge(p.overlap)),
      h("dt", {}, "LLM check"),
      h("dd", { class: "check-reason" }, p.check || "not checked"),
      p.reasons.length ? [h("dt", {}, "Discarded because"), h("dd", {}, h("ul", { class: "reasons" }, p.reasons.map((r) => h("li", {}, reasonText(r)))))] : null,
      p.reviewer ? [h("dt", {}, "Reviewed"), h("dd", {}, `${p.reviewer}${p.reason ? `: ${p.reason}` : ""}`)] : null,
      h("dt", {}, "Drafted"),
      h("dd", {}, when(p.created_at), " by ", synthesisLink(p.job_id)),
    ),
    label.doc_id ? passageView(p, label) : null,
    review,
  );
}

function reviewSection(ctx, setNames, params) {
  const chosenSet = params.get("set") || setNames[0] || "";
  const setPick = select("set", setNames.map((n) => [n, n]), chosenSet);
  const statusPick = select("status", STATUSES.map((s) => [s, s]), STATUSES.includes(params.get("status")) ? params.get("status") : "proposed");
  setPick.id = "proposals-set";
  statusPick.id = "proposals-filter";
  const filters = h(
    "form",
    { class: "grid filters-row", id: "proposals-filters" },
    h("div", { class: "field" }, h("label", { for: setPick.id }, "Set"), setPick),
    h("div", { class: "field" }, h("label", { for: statusPick.id }, "Status"), statusPick),
    h("div", { class: "field" }, h("button", { type: "submit" }, "Show")),
  );
  const counts = h("p", { id: "proposal-counts", class: "counts", "aria-live": "polite" });
  const status = h("p", { role: "status", tabindex: "-1", id: "proposals-status" });
  const bulk = h("div", { class: "review bulk", id: "proposals-bulk" });
  const list = h("div", { id: "proposals" });
  let latest = 0;
  let shown = [];

  const act = async (ids, decision, reason) => {
    const body = { status: decision, ids };
    if (reason && reason.trim()) body.reason = reason.trim();
    try {
      const done = await post(`/eval/sets/${encodeURIComponent(setPick.value)}/proposals/review`, body);
      await load();
      replace(status, `${done.changed.length} draft${done.changed.length === 1 ? "" : "s"} ${decision}${decision === "accepted" ? ` into set ${done.set}` : ""}. `, status.textContent);
      status.focus(); // the buttons that were used are gone
    } catch (err) {
      replace(status, errorBox(err));
      status.focus();
    }
  };

  const load = async () => {
    const mine = ++latest;
    const set = setPick.value;
    if (!set) {
      replace(status, "No synthetic set yet: draft one above.");
      return;
    }
    const query = new URLSearchParams({ set, status: statusPick.value });
    history.replaceState(null, "", `#/labs/synthesis?${query}`); // linkable, without redrawing the page
    try {
      const page = await get(`/eval/sets/${encodeURIComponent(set)}/proposals`, { status: statusPick.value, limit: 200 });
      if (mine !== latest) return;
      shown = page.proposals;
      replace(
        counts,
        "Drafts of set ",
        h("strong", {}, page.set),
        ": ",
        STATUSES.map((s, i) => [i ? " · " : "", h("span", { class: `count count-${s}`, dataset: { status: s } }, `${s} ${page.counts[s] || 0}`)]),
      );
      replace(list, shown.map((p) => proposalCard(ctx, p, act)));
      replace(status, shown.length ? `${shown.length} ${statusPick.value} draft${shown.length === 1 ? "" : "s"} shown${shown.length === 200 ? " (the first 200)" : ""}.` : `No ${statusPick.value} drafts.`);
      replace(
        bulk,
        statusPick.value === "proposed" && shown.length && ctx.can("eval:admin")
          ? [
              h("button", { type: "button", class: "accept", id: "accept-shown", onclick: () => act(shown.map((p) => p.id), "accepted", "") }, `Accept all ${shown.length} shown`),
              h("button", { type: "button", class: "reject", id: "reject-shown", onclick: () => act(shown.map((p) => p.id), "rejected", "") }, `Reject all ${shown.length} shown`),
            ]
          : null,
      );
    } catch (err) {
      if (mine === latest) replace(status, errorBox(err));
    }
  };
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });
  setPick.addEventListener("change", load);
  statusPick.addEventListener("change", load);
  load();
  return {
    element: h(
      "section",
      { class: "panel", "aria-labelledby": "review-title", id: "synthesis-review" },
      h("h3", { id: "review-title" }, "Review drafted cases"),
      h("p", { class: "hint" }, "An accepted case joins the set (source: synthetic, with the model and prompt version that made it); a rejected one does not. Discarded drafts never reached review: the rules they broke are shown."),
      filters,
      counts,
      bulk,
      status,
      list,
    ),
    show(set) {
      if (![...setPick.options].some((o) => o.value === set)) setPick.append(h("option", { value: set }, set));
      setPick.value = set;
      statusPick.value = "proposed";
      load();
    },
  };
}

// --- one synthesis --------------------------------------------------------------------------------------------------

async function detail(root, ctx, id) {
  const holder = h("article", { class: "panel", "aria-labelledby": "synthesis-title" });
  root.append(backLink("synthesis", "Synthetic cases"), holder);
  const path = `/eval/syntheses/${encodeURIComponent(id)}`;
  const line = statusLine("synthesis-detail-status");
  const body = h("div", {});
  const actions = h("div", { class: "review" });
  const draw = (view) => {
    showProgress(line, view, "passages");
    const act = async (what) => {
      try {
        await post(`${path}/${what}`, {});
        await show();
      } catch (err) {
        replace(actions, errorBox(err));
      }
    };
    replace(
      actions,
      RUNNING.has(view.status) ? h("button", { type: "button", onclick: () => act("cancel") }, "Cancel") : null,
      ["failed", "cancelled", "lost"].includes(view.status) && ctx.can("eval:admin") ? h("button", { type: "button", onclick: () => act("resume") }, "Resume") : null,
      view.status === "done" ? h("a", { href: `#/labs/synthesis?${new URLSearchParams({ set: view.set })}` }, `Review the drafts of set ${view.set}`) : null,
    );
  };
  const show = async () => {
    const first = await get(path);
    replace(
      holder,
      h("h3", { id: "synthesis-title", tabindex: "-1" }, `Synthesis ${first.id}`),
      h("p", {}, `Set ${first.set} · started ${when(first.created_at)}`),
      line,
      actions,
      body,
      h("details", {}, h("summary", {}, "Parameters"), h("pre", {}, JSON.stringify(first.params, null, 2))),
    );
    draw(first);
    const final = RUNNING.has(first.status) ? await follow(path, holder, draw) : first;
    if (final.status === "done") replace(body, summaryView(final.result || final.summary));
  };
  await show();
}

// --- the tab ------------------------------------------------------------------------------------------------------

export async function render(root, ctx, { rest, params }) {
  if (rest[0]) {
    await detail(root, ctx, rest[0]);
    return;
  }
  const [sets, syntheses] = await Promise.all([get("/eval/sets"), get("/eval/syntheses", { limit: 50 })]);
  // the sets drafts may belong to: those synthesized (newest first), then the stored ones
  const names = [...new Set([...syntheses.map((s) => s.set), ...sets.filter((s) => s.source !== "packaged").map((s) => s.name)])];
  const review = reviewSection(ctx, names, params);
  const list = workList(
    "synthesis-list",
    "synthesis",
    syntheses,
    [
      ["Drafted", (v) => String(v.summary.drafted)],
      ["Proposed", (v) => String(v.summary.by_status?.proposed ?? 0)],
      ["Discarded", (v) => String(v.summary.by_status?.discarded ?? 0)],
      ["Model", (v) => `${v.summary.generator?.model} (${v.summary.generator?.prompt_version})`],
    ],
    { caption: "Syntheses, newest first", empty: "No synthesis yet." },
  );
  add(
    root,
    ctx.can("eval:admin")
      ? startForm(ctx, names, (set) => review.show(set))
      : h("p", { class: "hint" }, "Drafting and reviewing synthetic cases needs the eval:admin role; this key may read them."),
    review.element,
    h("section", { class: "panel", "aria-labelledby": "syntheses-title" }, h("h3", { id: "syntheses-title" }, "Syntheses"), list),
  );
}
