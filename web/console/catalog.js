// The app catalog: the names people see apps by and the categories the
// engine judges category blocks with (PUT and DELETE
// /admin/catalog/apps/{appId}; GET /catalog). An edit is judged at once by
// this server and by the other processes within DPCS_CATALOG_REFRESH.
import * as api from "./api.js";
import { h, fill, field, table, busy, say, ask, setApps, errorText, num, bytes, when } from "./ui.js";
import { t } from "./i18n.js";

const CATEGORIES = ["VIDEO", "GAME", "SOCIAL", "MESSAGING", "WEB", "MUSIC"];

export async function catalogScreen(root) {
  const list = h("div", { id: "catalog-list" });
  const unknown = h("section", { class: "card", id: "unknown-apps", "aria-labelledby": "unknown-apps-h" });
  const adder = addForm();
  fill(root, h("h1", {}, t("catalogTitle")), h("p", { class: "muted" }, t("catalogHelp")), unknown, adder, list);
  await draw();

  // drawUnknown lists the apps seen in traffic that the catalog does not
  // name (#38): people see them as "알 수 없는 앱" until they are named.
  async function drawUnknown() {
    let u;
    try { u = await api.unknownApps(); } catch (e) {
      fill(unknown, h("h2", { id: "unknown-apps-h" }, t("unknownAppsTitle")), h("p", { class: "error" }, errorText(e)));
      return;
    }
    const apps = u.apps || [];
    fill(unknown, h("h2", { id: "unknown-apps-h" }, t("unknownAppsTitle")),
      h("p", { class: "muted" }, t("unknownAppsHelp", { n: num(u.records) })),
      apps.length ? table(t("unknownAppsCaption", { n: apps.length }),
        [t("colAppId"), [t("colEvents"), "num"], [t("colUsed"), "num"], [t("colFamilies"), "num"], t("colLastSeen"), t("colActions")],
        apps.map((a) => h("tr", { "data-unknown-app": a.id }, h("td", {}, h("code", {}, a.id)), h("td", { class: "num" }, num(a.events)),
          h("td", { class: "num" }, bytes(a.bytes)), h("td", { class: "num" }, num(a.families)), h("td", {}, when(a.lastSeen)),
          h("td", {}, h("button", { type: "button", class: "secondary", "data-write": "", "aria-label": t("nameAppOf", { app: a.id }),
            onclick: () => { adder.querySelector("#new-app-id").value = a.id; adder.querySelector("#new-app-name").focus(); } }, t("nameApp"))))))
        : h("p", { id: "unknown-apps-none" }, t("unknownAppsNone")));
  }

  async function draw() {
    const c = await api.catalog();
    const apps = c.apps || [];
    setApps(apps); // the other screens name apps as edited here
    await drawUnknown();
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
    del.addEventListener("click", () => ask(del, t("deleteAppConfirm", { app: a.name }), t("delete"), async () => {
      const ok = await busy(async () => { await api.deleteApp(a.id); return true; }, t("appDeleted", { app: a.name }));
      if (ok) await draw();
    }));
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
