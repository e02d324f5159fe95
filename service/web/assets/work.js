// What the three Labs views share: following a piece of background work (a synthesis, a sweep, an answer grading)
// until it ends, its status and progress in words, and the listing of them.

import { get } from "./api.js";
import { badge, errorBox, h, replace, table, when } from "./dom.js";

export const RUNNING = new Set(["queued", "running"]);
const POLL_MS = 500;

// "running: 3 of 7 passages"
export function progressText(view, unit = "steps") {
  if (view.status === "queued") return "queued: waiting for a worker";
  if (view.status === "running") return view.progress ? `running: ${view.progress.done} of ${view.progress.total} ${unit}` : "running";
  if (view.status === "done") return `done ${when(view.finished_at)}`;
  return `${view.status}${view.error ? `: ${view.error}` : ""}`;
}

export function statusBadge(view) {
  const kind = { done: "pass", failed: "fail", lost: "fail", cancelled: "draft", running: "monitoring", queued: "new" }[view.status];
  return badge(view.status, kind);
}

// Poll `path` until its work is no longer queued or running (or `holder` left the page), telling `onUpdate` each time;
// the final view.
export async function follow(path, holder, onUpdate) {
  for (;;) {
    const view = await get(path);
    if (!holder.isConnected) return view; // the user went elsewhere: stop polling
    onUpdate(view);
    if (!RUNNING.has(view.status)) return view;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

// The error of a start: the service's own words; an unconfigured LLM said prominently, with what to set.
export function startError(err) {
  if (/no LLM is configured/i.test(err.message)) {
    return h(
      "div",
      { class: "error-box", role: "alert" },
      h("p", { class: "error" }, "No LLM is configured on this service."),
      h("p", {}, err.message),
    );
  }
  return errorBox(err);
}

// A listing of works of one kind, newest first: `columns` [header, view => cell] after id, set and status.
export function workList(id, kind, views, columns, { caption, empty }) {
  const holder = h("div", { id });
  if (!views.length) {
    holder.append(h("p", { class: "empty" }, empty));
    return holder;
  }
  holder.append(
    table(
      ["Id", "Set", "Status", ...columns.map(([header]) => header), "Started"],
      views.map((v) => [
        h("a", { href: `#/labs/${kind}/${encodeURIComponent(v.id)}` }, v.id),
        v.set,
        h("span", {}, statusBadge(v), v.status === "running" && v.progress ? ` ${v.progress.done}/${v.progress.total}` : ""),
        ...columns.map(([, cell]) => (v.status === "done" && v.summary ? cell(v) : "–")),
        when(v.created_at),
      ]),
      { caption },
    ),
  );
  return holder;
}

// A status line that `follow` keeps current, with the work's error if it ends badly.
export function statusLine(id) {
  return h("p", { role: "status", id, class: "work-status" });
}

export function showProgress(line, view, unit) {
  replace(line, statusBadge(view), " ", progressText(view, unit));
}

export const backLink = (kind, text) => h("p", {}, h("a", { href: `#/labs/${kind}` }, `← ${text}`));
