// The app catalog: the names people see apps by and the categories the
// engine judges category blocks with (PUT and DELETE
// /admin/catalog/apps/{appId}; GET /catalog). An edit is judged at once by
// this server and by the other processes within DPCS_CATALOG_REFRESH.
import * as api from "./api.js";
import { h, fill, field, table, busy, say } from "./ui.js";
import { t } from "./i18n.js";

const CATEGORIES = ["VIDEO", "GAME", "SOCIAL", "MESSAGING", "WEB", "MUSIC"];

export async function catalogScreen(root) {
  const list = h("div", { id: "catalog-list" });
  fill(root, h("h1", {}, t("catalogTitle")), h("p", { class: "muted" }, t("catalogHelp")), addForm(), list);
  await draw();

  async function draw() {
    const c = await api.catalog();
    const apps = c.apps || [];
    fill(list, h("section", { class: "card" }, table(t("catalogCaption", { n: apps.length }),
      [t("colIcon"), t("colAppName"), t("colAppNameEn"), t("colAppId"), t("colCategory"), t("colActions")],
      apps.map((a) => row(a)), { class: "catalog" })));
  }

  // row is one app, editable in place (read only for a care agent).
  function row(a) {
    const slug = a.id.replace(/[^\w-]/g, "_");
    const ro = api.readOnly();
    const icon = h("input", { value: a.icon || "", maxlength: 8, size: 3, disabled: ro, "aria-label": t("appIconOf", { app: a.name }), id: `app-icon-${slug}` });
    const name = h("input", { value: a.name, maxlength: 50, required: true, disabled: ro, "aria-label": t("appNameOf", { app: a.id }), id: `app-name-${slug}` });
    const nameEn = h("input", { value: a.nameEn || "", maxlength: 50, lang: "en", disabled: ro, "aria-label": t("appNameEnOf", { app: a.id }), id: `app-name-en-${slug}` });
    const cat = h("select", { disabled: ro, "aria-label": t("appCategoryOf", { app: a.name }), id: `app-cat-${slug}` },
      CATEGORIES.map((x) => h("option", { value: x, selected: x === a.category }, t(`cat.${x}`))));
    const save = h("button", { type: "button", "data-write": "", id: `app-save-${slug}`, "aria-label": t("saveApp", { app: a.name }) }, t("save"));
    const del = h("button", { type: "button", class: "danger", "data-write": "", id: `app-delete-${slug}`, "aria-label": t("deleteOf", { name: a.name }) }, t("delete"));
    save.addEventListener("click", async () => {
      const ok = await busy(() => api.putApp(a.id, { category: cat.value, name: name.value, nameEn: nameEn.value, icon: icon.value }),
        t("appSaved", { app: name.value }));
      if (ok) await draw();
    });
    del.addEventListener("click", async () => {
      if (!confirm(t("deleteAppConfirm", { app: a.name }))) return;
      const ok = await busy(async () => { await api.deleteApp(a.id); return true; }, t("appDeleted", { app: a.name }));
      if (ok) await draw();
    });
    return h("tr", { "data-app": a.id }, h("td", {}, icon), h("td", {}, name), h("td", {}, nameEn),
      h("td", {}, h("code", {}, a.id)), h("td", {}, cat), h("td", { class: "actions" }, save, " ", del));
  }

  // addForm adds an app (or brings a removed one back).
  function addForm() {
    const id = field(t("colAppId"), { required: true, maxlength: 190, placeholder: "com.example.app", id: "new-app-id", autocomplete: "off" });
    const name = field(t("colAppName"), { required: true, maxlength: 50, id: "new-app-name" });
    const nameEn = field(t("colAppNameEn"), { maxlength: 50, id: "new-app-name-en", lang: "en" });
    const icon = field(t("colIcon"), { maxlength: 8, id: "new-app-icon" });
    const cat = field(t("colCategory"), { id: "new-app-cat", options: CATEGORIES.map((x) => [x, t(`cat.${x}`)]) }, "select");
    const form = h("form", { class: "card grid", "data-write": "", id: "new-app", "aria-label": t("addApp"),
      onsubmit: async (ev) => {
        ev.preventDefault();
        const ok = await busy(() => api.putApp(id.input.value.trim(), { category: cat.input.value, name: name.input.value,
          nameEn: nameEn.input.value, icon: icon.input.value }), t("appSaved", { app: name.input.value }));
        if (ok) {
          form.reset();
          await draw();
        }
      } },
    h("h2", {}, t("addApp")), id.wrap, name.wrap, nameEn.wrap, icon.wrap, cat.wrap, h("div", {}, h("button", { type: "submit" }, t("addApp"))));
    if (api.readOnly()) say("");
    return form;
  }
}
