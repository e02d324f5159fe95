// The page's shell: sign-in, who is signed in and what they may do, and the router between the five views
// (#/search, #/dashboard, #/incidents, #/documents, #/labs). Each view module exports `render(root, ctx, params)`.

import { ApiError, get, session } from "./api.js";
import { $, errorBox, h, replace } from "./dom.js";
import * as dashboard from "./dashboard.js";
import * as documents from "./documents.js";
import * as incidents from "./incidents.js";
import * as labs from "./labs.js";
import * as search from "./search.js";

const VIEWS = {
  search: { module: search, title: "Search playground", roles: ["search"] },
  dashboard: { module: dashboard, title: "Retrieval quality", roles: ["eval:run"] },
  incidents: { module: incidents, title: "Incident desk", roles: ["incidents:report", "incidents:review"] },
  documents: { module: documents, title: "Documents", roles: ["search", "ingest"] },
  labs: { module: labs, title: "Labs: day-0 sets, sweeps and answer grades", roles: ["eval:run"] },
};

const ctx = {
  me: null,
  can: (role) => Boolean(ctx.me && ctx.me.roles.includes(role)),
  go: (hash) => {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
  // a hand-over between views, e.g. a failed search pre-filling the incident form
  handoff: null,
};

function parseHash() {
  const [path, query = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const [name, ...rest] = path.split("/");
  const decode = (part) => {
    try {
      return decodeURIComponent(part);
    } catch {
      return part; // a malformed %-escape: taken as written
    }
  };
  return { name, rest: rest.map(decode), params: new URLSearchParams(query) };
}

async function identify() {
  try {
    ctx.me = await get("/auth/me");
  } catch (err) {
    ctx.me = null;
    if (!(err instanceof ApiError) || err.status !== 401) throw err;
  }
  showWho();
  return ctx.me;
}

function showWho() {
  const who = $("#who");
  const banner = $("#banner");
  $("#nav").hidden = !ctx.me;
  if (!ctx.me) {
    replace(who);
    banner.hidden = true;
    return;
  }
  const tenant = ctx.me.tenant ? ` · tenant ${ctx.me.tenant}` : "";
  replace(
    who,
    h("span", { class: "who-name" }, `${ctx.me.name}${tenant}`),
    ctx.me.auth === "on"
      ? h("button", { type: "button", class: "link", onclick: signOut }, "Sign out")
      : null,
  );
  banner.hidden = ctx.me.auth !== "off";
  replace(banner, "Auth is off (PLUMBLINE_AUTH=off): anyone who can reach this service may do anything. A local demo only.");
  for (const link of document.querySelectorAll("#nav a[data-page]")) {
    const view = VIEWS[link.dataset.page];
    const allowed = view.roles.some(ctx.can);
    link.parentElement.hidden = !allowed;
  }
}

function signOut() {
  session.signOut();
  ctx.me = null;
  showWho();
  showLogin();
}

function showLogin(message = "") {
  $("#login").hidden = false;
  replace($("#page"));
  replace($("#login-error"), message);
  $("#login-key").focus();
}

async function route() {
  const page = $("#page");
  if (!ctx.me) {
    showLogin();
    return;
  }
  $("#login").hidden = true;
  const parsed = parseHash();
  const { rest, params } = parsed;
  // no view named (or an unknown one): the first this key may use
  const name = Object.hasOwn(VIEWS, parsed.name) ? parsed.name : Object.keys(VIEWS).find((v) => VIEWS[v].roles.some(ctx.can)) || "search";
  const view = VIEWS[name];
  for (const link of document.querySelectorAll("#nav a[data-page]")) {
    if (link.dataset.page === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${view.title} · Plumbline`;
  if (!view.roles.some(ctx.can)) {
    replace(page, h("h2", {}, view.title), errorBox(`This key (${ctx.me.name}) may not use this page: it needs one of the roles ${view.roles.join(", ")}.`));
    return;
  }
  replace(page, h("h2", { id: "view-title", tabindex: "-1" }, view.title));
  const body = h("div", { class: "view" });
  page.append(body);
  try {
    await view.module.render(body, ctx, { rest, params });
  } catch (err) {
    body.append(errorBox(err));
  }
}

async function start() {
  $("#login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    session.signIn($("#login-key").value);
    try {
      if (!(await identify())) {
        session.signOut();
        showLogin("That key was not accepted: check it was copied whole, and that it has not been revoked.");
        return;
      }
    } catch (err) {
      showLogin(err.message);
      return;
    }
    $("#login-key").value = "";
    await route();
    $("#view-title")?.focus();
  });
  window.addEventListener("plumbline:unauthorized", () => {
    if (ctx.me) {
      session.signOut();
      ctx.me = null;
      showWho();
      showLogin("The key is no longer accepted (revoked or rotated): sign in again.");
    }
  });
  window.addEventListener("hashchange", async () => {
    if (!location.hash.startsWith("#/")) return; // e.g. the skip link's #main: not a view
    await route();
    // a view may have put the focus somewhere useful (the query box, the document picker); else its title
    if (!$("#page").contains(document.activeElement)) $("#view-title")?.focus();
  });
  try {
    await identify();
  } catch (err) {
    replace($("#page"), errorBox(err));
    return;
  }
  await route();
}

start();
