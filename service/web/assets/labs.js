// Labs (#/labs): the work that helps a team before and beside the retrieval gate, none of it a retrieval run and
// none of it gated: day-0 sets drafted by an LLM and reviewed (#/labs/synthesis), parameter sweeps
// (#/labs/sweeps) and LLM-graded answers (#/labs/answers). Each tab is a module with `render(root, ctx, params)`.

import { h } from "./dom.js";
import * as answers from "./answers.js";
import * as sweeps from "./sweeps.js";
import * as synthesis from "./synthesis.js";

const TABS = [
  ["synthesis", "Synthetic cases", synthesis],
  ["sweeps", "Sweeps", sweeps],
  ["answers", "Answer grades", answers],
];

export async function render(root, ctx, { rest, params }) {
  const tab = TABS.find(([name]) => name === rest[0]) || TABS[0];
  root.append(
    h(
      "nav",
      { class: "tabs", "aria-label": "Labs" },
      h(
        "ul",
        {},
        TABS.map(([name, title]) => h("li", {}, h("a", { href: `#/labs/${name}`, "aria-current": name === tab[0] ? "page" : null }, title))),
      ),
    ),
  );
  const body = h("div", { class: "lab", id: `lab-${tab[0]}` });
  root.append(body);
  await tab[2].render(body, ctx, { rest: rest.slice(1), params });
}
