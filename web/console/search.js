// Family search by id, name or phone.
import * as api from "./api.js";
import { h, fill, field, table, bytes, when, say, roleWords } from "./ui.js";
import { t } from "./i18n.js";

export async function searchScreen(root, { query }) {
  const q = query.get("q") || "";
  const f = field(t("searchField"), { type: "search", name: "q", value: q, required: true, autocomplete: "off", placeholder: "100, 김씨, 010-0000-0100" });
  const results = h("div", { id: "search-results" });
  const form = h("form", { class: "row", role: "search", "aria-label": t("searchForm"),
    onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/search?q=${encodeURIComponent(f.input.value.trim())}`; } },
  f.wrap, h("div", {}, h("button", { type: "submit" }, t("search"))));
  fill(root, h("h1", {}, t("searchTitle")), h("section", { class: "card" }, form), results);
  f.input.focus();
  if (!q) {
    fill(results, h("p", { class: "muted" }, t("searchHint")));
    return;
  }
  const list = await api.searchFamilies(q);
  const fams = list.families || [];
  if (!fams.length) {
    fill(results, h("p", { class: "card" }, t("searchNone", { q })));
    return;
  }
  say(t("searchFound", { n: fams.length }));
  fill(results, h("section", { class: "card" }, table(t("searchCaption", { q }),
    [t("colId"), t("colName"), [t("colPlan"), "num"], t("colThresholds"), t("colUpdated")],
    fams.map((fam) => h("tr", { "data-family": fam.id },
      h("td", {}, h("a", { href: `#/family/${fam.id}` }, String(fam.id))),
      // Which member the family was found by (#38), by name and role.
      h("td", {}, h("a", { href: `#/family/${fam.id}` }, fam.name),
        (fam.matched || []).map((m) => h("div", { class: "muted matched", "data-matched": m.customerId },
          t(m.by === "phone" ? "matchedPhone" : "matchedId", { name: m.name, role: roleWords(m.role) })))),
      h("td", { class: "num" }, bytes(fam.planBytes)),
      h("td", {}, (fam.thresholds || [50, 30, 10]).map((x) => `${x}%`).join(", ")),
      h("td", {}, when(fam.updatedAt)))))));
}
