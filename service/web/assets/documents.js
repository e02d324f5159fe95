// The document browser: GET /documents filtered and paged, and one document with its status, its supersession
// chain (what it replaced and what replaced it) and its chunks.

import { get } from "./api.js";
import { badge, errorBox, field, h, replace, select, table, when } from "./dom.js";

const docLink = (id, text = id) => h("a", { href: `#/documents/${encodeURIComponent(id)}` }, text);

function statusBadge(d) {
  if (d.status === "current" && d.current === false) return badge("expired");
  return badge(d.status);
}

async function listing(root, params) {
  const filters = h(
    "form",
    { class: "grid filters-row", id: "document-filters" },
    field("Tenant", h("input", { name: "tenant", value: params.get("tenant") || "" })),
    field("Tags", h("input", { name: "tags", value: params.get("tags") || "" }), "any of, comma-separated"),
    field("Status", select("status", [["", "any"], ["current", "current"], ["superseded", "superseded"], ["archived", "archived"], ["draft", "draft"]], params.get("status") || "")),
    field("Updated after", h("input", { name: "updated_after", type: "date", value: params.get("updated_after") || "" })),
    h("div", { class: "field" }, h("button", { type: "submit" }, "Filter")),
  );
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new URLSearchParams([...new FormData(filters)].filter(([, v]) => v !== ""));
    location.hash = `#/documents?${data}`;
  });
  const holder = h("div", { id: "document-list" });
  root.append(filters, holder);
  const cursors = [null]; // the cursor of each page shown so far, for "previous"
  const load = async (focus = false) => {
    const query = {
      tenant: params.get("tenant") || undefined,
      tags: (params.get("tags") || "").split(",").map((t) => t.trim()).filter(Boolean),
      status: params.get("status") || undefined,
      updated_after: params.get("updated_after") || undefined,
      cursor: cursors[cursors.length - 1] || undefined,
      limit: 25,
    };
    try {
      const page = await get("/documents", query);
      const rows = page.documents.map((d) => [
        docLink(d.id),
        d.title,
        statusBadge(d),
        d.tenant || "–",
        d.tags.join(", ") || "–",
        when(d.updated_at),
        String(d.chunks),
        d.superseded_by ? h("span", {}, "by ", docLink(d.superseded_by)) : d.supersedes ? h("span", {}, "replaces ", docLink(d.supersedes)) : "–",
      ]);
      const nav = h(
        "div",
        { class: "pager" },
        cursors.length > 1 ? h("button", { type: "button", onclick: () => { cursors.pop(); load(true); } }, "Previous page") : null,
        page.next_cursor ? h("button", { type: "button", onclick: () => { cursors.push(page.next_cursor); load(true); } }, "Next page") : null,
      );
      replace(
        holder,
        h("p", { role: "status", tabindex: "-1", id: "document-status" }, `${page.total} documents match; page ${cursors.length}.`),
        rows.length
          ? table(["Id", "Title", "Status", "Tenant", "Tags", "Updated", "Chunks", "Supersession"], rows, { caption: "Documents" })
          : h("p", {}, "No documents match."),
        nav,
      );
      if (focus) document.getElementById("document-status").focus(); // the pager's buttons were redrawn
    } catch (err) {
      replace(holder, errorBox(err));
    }
  };
  await load();
}

// GET /documents/{id} gives the declared status; a current document superseding it makes it superseded
const effectiveStatus = (doc) => (doc.superseded_by ? "superseded" : doc.status);

async function follow(start, next) {
  // the documents from `start` on, each naming the next through `next`, until none (at most 10)
  const found = [];
  for (let id = start; id && found.length < 10; ) {
    try {
      const doc = await get(`/documents/${encodeURIComponent(id)}`);
      found.push({ id, title: doc.title, status: effectiveStatus(doc) });
      id = next(doc);
    } catch {
      found.push({ id, title: "(not in the index)", status: "missing" });
      break;
    }
  }
  return found;
}

async function chain(doc) {
  // what this document replaced, back to the first, and what replaced it, forward to the newest
  const back = (await follow(doc.supersedes, (d) => d.supersedes)).reverse();
  const forward = await follow(doc.superseded_by, (d) => d.superseded_by);
  return [...back, { id: doc.id, title: doc.title, status: effectiveStatus(doc), self: true }, ...forward];
}

async function detail(root, id) {
  const doc = await get(`/documents/${encodeURIComponent(id)}`);
  const links = await chain(doc);
  root.append(
    h("p", {}, h("a", { href: "#/documents" }, "← All documents")),
    h(
      "article",
      { class: "panel", "aria-labelledby": "doc-title" },
      h("h3", { id: "doc-title" }, doc.title, " ", badge(effectiveStatus(doc))),
      table(
        ["Field", "Value"],
        [
          ["Id", doc.id],
          ["Tenant", doc.tenant || "–"],
          ["Tags", doc.tags.join(", ") || "–"],
          ["Declared status", doc.status],
          ["Updated", when(doc.updated_at)],
          ["Valid until", doc.valid_until ? when(doc.valid_until) : "open-ended"],
          ["Format", doc.format],
          ["Generation", `${doc.generation} (ingested ${when(new Date(doc.generation / 1e3).toISOString())})`],
          ["Metadata", Object.keys(doc.metadata).length ? JSON.stringify(doc.metadata) : "–"],
        ],
      ),
      h("h4", {}, "Supersession chain"),
      links.length > 1
        ? h(
            "ol",
            { class: "chain" },
            links.map((l) => h("li", { "aria-current": l.self ? "true" : null, class: l.self ? "self" : null }, l.self ? h("strong", {}, l.id) : docLink(l.id), ` ${l.title} `, badge(l.status))),
          )
        : h("p", {}, "Neither supersedes nor is superseded by another document."),
      h("h4", {}, `Chunks (${doc.chunks.length})`),
      h(
        "ol",
        { class: "chunks" },
        doc.chunks.map((c) => h("li", {}, h("details", {}, h("summary", {}, c.heading_path || "(top of the document)", h("span", { class: "hint" }, ` ${c.chunk_id} · characters ${c.start}–${c.end}`)), h("pre", { class: "chunk-text" }, c.text)))),
      ),
    ),
  );
}

export async function render(root, ctx, { rest, params }) {
  if (rest.length) await detail(root, rest.join("/"));
  else await listing(root, params);
}
