// Family search by id, name or phone.
import * as api from "./api.js";
import { h, fill, field, table, bytes, when, say } from "./ui.js";

export async function searchScreen(root, { query }) {
  const q = query.get("q") || "";
  const f = field("Family id, name or member phone", { type: "search", name: "q", value: q, required: true, autocomplete: "off", placeholder: "100, 김씨, 010-0000-0100" });
  const results = h("div", { id: "search-results" });
  const form = h("form", { class: "row", role: "search", "aria-label": "Families",
    onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/search?q=${encodeURIComponent(f.input.value.trim())}`; } },
  f.wrap, h("div", {}, h("button", { type: "submit" }, "Search")));
  fill(root, h("h1", {}, "Families"), h("section", { class: "card" }, form), results);
  f.input.focus();
  if (!q) {
    fill(results, h("p", { class: "muted" }, "Search by family id, family name, or the phone of any member."));
    return;
  }
  const list = await api.searchFamilies(q);
  const fams = list.families || [];
  if (!fams.length) {
    fill(results, h("p", { class: "card" }, `No family matches “${q}”.`));
    return;
  }
  say(`${fams.length} ${fams.length === 1 ? "family" : "families"} found.`);
  fill(results, h("section", { class: "card" }, table(`Families matching “${q}”`,
    ["Id", "Name", ["Plan", "num"], "Alert thresholds", "Updated"],
    fams.map((fam) => h("tr", {},
      h("td", {}, h("a", { href: `#/family/${fam.id}` }, String(fam.id))),
      h("td", {}, h("a", { href: `#/family/${fam.id}` }, fam.name)),
      h("td", { class: "num" }, bytes(fam.planBytes)),
      h("td", {}, (fam.thresholds || [50, 30, 10]).map((t) => `${t}%`).join(", ")),
      h("td", {}, when(fam.updatedAt)))))));
}
