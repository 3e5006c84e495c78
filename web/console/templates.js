// Policy templates: list, create/edit/(de)activate/delete, apply to a member,
// and drift (members whose copy differs from the template now) with a
// per-key preview and a bulk re-apply.
import * as api from "./api.js";
import { h, fill, field, table, when, say, busy, ask, errorText, rulesToText, textToRules, keyWords, ruleValue, ruleWords, roleWords } from "./ui.js";
import { t } from "./i18n.js";
import { policyFields } from "./policyform.js";

export async function templatesScreen(root, { query }) {
  const listCard = h("section", { class: "card", "aria-labelledby": "tpl-list-h" });
  const editCard = h("section", { class: "card", "data-write": "", "aria-labelledby": "tpl-edit-h", id: "template-editor" });
  const applyCard = h("section", { class: "card", "data-write": "", "aria-labelledby": "tpl-apply-h" });
  fill(root, h("h1", {}, t("templatesTitle")), listCard, h("div", { class: "grid" }, editCard, applyCard));
  let all = [];

  async function reload() {
    all = (await api.templates()).templates || [];
    fill(listCard, h("h2", { id: "tpl-list-h" }, t("templatesList")),
      all.length ? table(null, [t("colId"), t("colName"), t("colType"), t("colFor"), t("colRules"), t("colActive"), t("colUpdated"), t("colActions")],
        all.map((tp) => h("tr", { "data-template": tp.id },
          h("td", {}, String(tp.id)),
          h("th", { scope: "row" }, tp.name, tp.description ? h("div", { class: "muted" }, tp.description) : null),
          h("td", {}, tp.type),
          h("td", {}, roleWords(tp.requireRole || "MEMBER")),
          h("td", {}, rulesList(tp.defaultRules)),
          h("td", {}, h("span", { class: `badge ${tp.active ? "ok" : "neutral"}` }, tp.active ? t("active") : t("inactive"))),
          h("td", {}, when(tp.updatedAt)),
          h("td", {}, h("div", { class: "actions" },
            h("button", { type: "button", "data-write": "", "data-edit": tp.id, "aria-label": t("editOf", { name: tp.name }), onclick: () => edit(tp) }, t("edit")),
            h("a", { href: `#/templates/${tp.id}/drift`, class: "drift-link", "aria-label": t("driftOf", { name: tp.name }) }, t("drift")),
            h("button", { type: "button", class: "secondary", "data-write": "", "aria-label": t(tp.active ? "deactivateOf" : "activateOf", { name: tp.name }),
              onclick: () => busy(async () => { await api.updateTemplate(tp.id, { ...body(tp), active: !tp.active }); await reload(); },
                t(tp.active ? "deactivated" : "activated", { name: tp.name })) }, tp.active ? t("deactivate") : t("activate")),
            h("button", { type: "button", class: "danger", "data-write": "", "aria-label": t("deleteOf", { name: tp.name }),
              onclick: (ev) => ask(ev.currentTarget, t("deleteConfirm", { name: tp.name }), t("delete"),
                () => busy(async () => { await api.deleteTemplate(tp.id); await reload(); }, t("deleted", { name: tp.name }))) }, t("delete")))))))
        : h("p", { class: "muted" }, t("noTemplates")));
    renderApply(applyCard, all);
  }

  function edit(tp) {
    const name = field(t("tplName"), { name: "name", required: true, maxlength: 100, value: tp ? tp.name : "" });
    const type = field(t("tplType"), { name: "type", required: true, maxlength: 50, value: tp ? tp.type : "LIMIT", placeholder: "LIMIT" });
    const role = field(t("tplRole"), { name: "requireRole", options: [["MEMBER", t("member")], ["OWNER", t("owner")]], value: tp ? tp.requireRole || "MEMBER" : "MEMBER" }, "select");
    const desc = field(t("tplDesc"), { name: "description", maxlength: 1000, value: tp ? tp.description || "" : "" });
    // The rules as typed fields (limits with their unit, blocks by name);
    // the raw keys only under "고급", folded (#38: rules were KEY=bytes).
    const start = tp ? { ...tp.defaultRules } : { "LIMIT:DATA:MONTHLY": String(1024 * 1024 * 1024) };
    const typed = policyFields(start);
    const rawText = rulesToText(start);
    const rules = field(t("tplRules"), { name: "defaultRules", value: rawText, class: "mono", spellcheck: "false" }, "textarea");
    const advanced = h("details", { id: "tpl-advanced" }, h("summary", {}, t("advanced")), rules.wrap);
    const active = h("input", { type: "checkbox", id: "tpl-active", name: "active", checked: tp ? tp.active : true });
    const err = h("p", { class: "error", role: "alert" });
    fill(editCard, h("h2", { id: "tpl-edit-h", tabindex: -1 }, tp ? t("editTemplate", { id: tp.id }) : t("newTemplate")),
      h("form", { class: "stack", onsubmit: async (ev) => {
        ev.preventDefault();
        err.textContent = "";
        let b;
        try {
          // An edit of the raw keys wins; else the typed fields' changes.
          let defaultRules;
          if (rules.input.value !== rawText) defaultRules = textToRules(rules.input.value);
          else {
            const r = typed.read();
            if (r.error) { err.textContent = r.error; return; }
            defaultRules = { ...start, ...r.patch.set };
            for (const k of r.patch.remove) delete defaultRules[k];
          }
          b = { name: name.input.value.trim(), type: type.input.value.trim(), requireRole: role.input.value,
            description: desc.input.value.trim(), defaultRules, active: active.checked };
        } catch (e) { err.textContent = e.message; return; }
        try {
          const saved = tp ? await api.updateTemplate(tp.id, b) : await api.createTemplate(b);
          say(tp ? t("tplSaved", { name: saved.name }) : t("tplCreated", { name: saved.name, id: saved.id }));
          await reload();
          edit(null);
        } catch (e) { err.textContent = errorText(e); }
      } }, name.wrap, type.wrap, role.wrap, desc.wrap, h("h3", {}, t("tplRulesTitle")), typed.element, advanced,
      h("div", { class: "toolbar" }, active, h("label", { for: "tpl-active" }, t("tplActive"))),
      err,
      h("div", { class: "toolbar" }, h("button", { type: "submit" }, tp ? t("tplSave") : t("tplCreate")),
        tp ? h("button", { type: "button", class: "secondary", onclick: () => edit(null) }, t("cancel")) : null)));
    if (tp) editCard.querySelector("h2").focus();
  }

  await reload();
  const want = Number(query.get("edit"));
  edit(all.find((tp) => tp.id === want) || null);
}

function body(tp) {
  return { name: tp.name, type: tp.type, requireRole: tp.requireRole || "MEMBER", description: tp.description || "", defaultRules: tp.defaultRules || {}, active: tp.active };
}

/** rulesList shows a template's rules in words, one a line (the keys in the editor only). */
function rulesList(rules) {
  return Object.keys(rules || {}).sort().map((k) => h("div", { "data-rule": `${k}=${rules[k]}` }, ruleWords(k, rules[k])));
}

// granted reports whether k is what an owner granted on request for a
// while — an extra allowance or an exception (policy.Granted): applying a
// template keeps those (the store does), so the preview says so.
const granted = (k) => k.startsWith("LIMIT:DATA:EXTRA:") || k.startsWith("LIMIT:DATA:GIFT:") || k === "EXCEPT:TIME" || k.startsWith("EXCEPT:APP:");

function renderApply(card, all) {
  const tpl = field(t("template"), { options: all.filter((tp) => tp.active).map((tp) => [String(tp.id), `#${tp.id} ${tp.name}`]) }, "select");
  const fam = field(t("familyId"), { type: "number", min: 1, required: true });
  // The member is picked by name from the family's members (#38: an id had
  // to be typed), read when the family is given.
  const mem = field(t("memberPick"), { required: true, disabled: true, options: [["", t("memberPickFirst")]] }, "select");
  const preview = h("div", { id: "apply-preview", "aria-live": "polite" });
  const loadMembers = async () => {
    const f = Number(fam.input.value);
    mem.input.disabled = true;
    if (!(f > 0)) { fill(mem.input, h("option", { value: "" }, t("memberPickFirst"))); return; }
    let list;
    try { list = (await api.members(f)).members || []; } catch (e) {
      fill(mem.input, h("option", { value: "" }, e.status === 404 ? t("memberPickNoFamily") : errorText(e)));
      return;
    }
    fill(mem.input, list.map((m) => h("option", { value: String(m.customerId) }, `${m.name} (${roleWords(m.role)}) #${m.customerId}`)));
    mem.input.disabled = !list.length;
  };
  fam.input.addEventListener("change", loadMembers);
  // Applying replaces the member's rules with the template's: first a
  // preview, key by key, of what the member loses, keeps and gets; then the
  // apply, at the policy version previewed (a change since is a 409).
  fill(card, h("h2", { id: "tpl-apply-h" }, t("applyTitle")),
    h("p", { class: "muted" }, t("applyHelp")),
    h("form", { class: "stack", "data-write": "", onsubmit: (ev) => {
      ev.preventDefault();
      const id = Number(tpl.input.value), f = Number(fam.input.value), c = Number(mem.input.value);
      busy(async () => {
        const [tp, pol] = await Promise.all([api.template(id), api.policy(f, c)]);
        showPreview(tp, pol, f, c);
      });
    } }, tpl.wrap, fam.wrap, mem.wrap, h("button", { type: "submit", disabled: !all.some((tp) => tp.active) }, t("preview"))),
    preview);

  function showPreview(tp, pol, f, c) {
    const cur = pol.rules || {}, next = tp.defaultRules || {};
    const diffs = [];
    for (const k of [...new Set([...Object.keys(cur), ...Object.keys(next)])].sort()) {
      if (granted(k) && !(k in next)) continue; // kept
      if (!(k in next)) diffs.push({ key: k, change: "removed", current: cur[k] });
      else if (!(k in cur)) diffs.push({ key: k, change: "added", template: next[k] });
      else if (cur[k] !== next[k]) diffs.push({ key: k, change: "changed", current: cur[k], template: next[k] });
    }
    const lost = diffs.filter((d) => d.change === "removed").map((d) => d.key);
    const kept = Object.keys(cur).filter((k) => granted(k) && !(k in next));
    fill(preview, h("h3", {}, t("previewTitle", { c, v: pol.version, name: tp.name })),
      diffs.length ? diffTable(diffs, null) : h("p", {}, t("previewSame")),
      lost.length ? h("p", { class: "error", id: "apply-loses", "data-keys": lost.join(" ") }, t("applyLoses", { keys: lost.map(keyWords).join(", ") })) : null,
      kept.length ? h("p", { class: "muted", id: "apply-keeps", "data-keys": kept.join(" ") }, t("applyKeeps", { keys: kept.map(keyWords).join(", ") })) : null,
      h("div", { class: "toolbar" },
        h("button", { type: "button", id: "apply-confirm", onclick: () => busy(async () => {
          const p = await api.applyTemplate(tp.id, f, c, pol.version);
          fill(preview);
          return p;
        }, (p) => t("applied", { c: p.customerId, f: p.familyId, v: p.version })) },
        lost.length ? t("applyAndRemove") : t("apply")),
        h("button", { type: "button", class: "secondary", onclick: () => fill(preview) }, t("cancel"))));
  }
}

/** diffTable renders a per-key preview, in words: what re-applying does to each key. */
export function diffTable(diffs, caption) {
  const value = (d, v, tag) => (v === undefined ? h("span", { class: "muted" }, t("absent")) : h(tag, { "data-value": v }, ruleValue(d.key, v)));
  return table(caption, [t("colKey"), t("colChange"), t("colCurrent"), t("colTemplate")], (diffs || []).map((d) => h("tr", { class: d.change, "data-key": d.key },
    h("td", {}, keyWords(d.key)),
    h("td", {}, t(`change.${d.change}`)),
    h("td", {}, value(d, d.current, "del")),
    h("td", {}, value(d, d.template, "ins")))),
  { class: "diff" });
}

export async function driftScreen(root, { args, query }) {
  const id = Number(args[0]);
  const familyFilter = query.get("familyId") || "";
  const head = h("div");
  const body = h("section", { class: "card", "aria-labelledby": "drift-h" });
  const report = h("section", { class: "card", id: "reapply-report", hidden: true, "aria-labelledby": "reapply-h" });
  fill(root, head, report, body);
  const fam = field(t("onlyFamily"), { type: "number", min: 1, value: familyFilter });
  fill(head, h("p", {}, h("a", { href: "#/templates" }, t("backToTemplates"))), h("h1", {}, t("driftTitle")),
    h("form", { class: "row", onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/templates/${id}/drift${fam.input.value ? `?familyId=${fam.input.value}` : ""}`; } },
      fam.wrap, h("div", {}, h("button", { type: "submit", class: "secondary" }, t("filter")))));

  async function load(after) {
    const d = await api.templateDrift(id, { familyId: familyFilter || undefined, after, limit: 100 });
    const boxes = [];
    const rows = (d.items || []).map((m) => {
      const cb = h("input", { type: "checkbox", "aria-label": t("selectMember", { c: m.customerId, f: m.familyId }), "data-member": m.customerId, "data-write": "" });
      boxes.push({ cb, m });
      return h("tr", {},
        h("td", {}, cb),
        h("td", {}, h("a", { href: `#/family/${m.familyId}?member=${m.customerId}` }, `#${m.familyId}`)),
        h("th", { scope: "row" }, m.memberName ? `${m.memberName} #${m.customerId}` : `#${m.customerId}`, h("div", { class: "muted" }, `v${m.version}`, m.updatedAt ? ` · ${when(m.updatedAt)}` : "")),
        h("td", {}, diffTable(m.diffs, null)));
    });
    const selectAll = h("input", { type: "checkbox", id: "drift-all", onchange: (ev) => { for (const b of boxes) b.cb.checked = ev.target.checked; } });
    const reapply = async (bodyOf, label) => {
      const b = bodyOf();
      if (!b) { say(t("selectOne"), true); return; }
      const r = await busy(() => api.reapplyTemplate(id, b));
      if (!r) return;
      showReport(report, r, label);
      await load();
    };
    fill(body, h("h2", { id: "drift-h" }, `#${d.templateId} ${d.templateName}`),
      d.templateActive ? null : h("p", { class: "conflict" }, t("driftInactive")),
      h("dl", { class: "stats" },
        h("div", { class: "stat" }, h("dt", {}, t("driftMembers")), h("dd", {}, String(d.members))),
        h("div", { class: "stat" }, h("dt", {}, t("driftDrifted")), h("dd", { id: "drift-count" }, String(d.drifted))),
        h("div", { class: "stat" }, h("dt", {}, t("driftFamilies")), h("dd", {}, String(d.families)))),
      h("h3", {}, t("driftRulesNow")),
      Object.keys(d.templateRules || {}).length ? h("div", { class: "rules" }, rulesList(d.templateRules)) : h("p", { class: "muted" }, t("absent")),
      d.items && d.items.length ? [
        h("div", { class: "toolbar", "data-write": "" },
          selectAll, h("label", { for: "drift-all" }, t("selectAllPage")),
          h("button", { type: "button", id: "reapply-selected", "data-write": "", disabled: !d.templateActive,
            onclick: () => reapply(() => {
              const members = boxes.filter((b) => b.cb.checked).map(({ m }) => ({ familyId: m.familyId, customerId: m.customerId, expectedVersion: m.version }));
              return members.length ? { members } : null;
            }, t("selectedMembers")) }, t("reapplySelected")),
          h("button", { type: "button", class: "secondary", id: "reapply-all", "data-write": "", disabled: !d.templateActive,
            onclick: (ev) => ask(ev.currentTarget, t("reapplyAllConfirm", { name: d.templateName, n: d.drifted }), t("reapplyAll"),
              () => reapply(() => (familyFilter ? { familyIds: [Number(familyFilter)] } : { all: true }), familyFilter ? t("familyN", { f: familyFilter }) : t("allDrifted")),
              "primary") }, familyFilter ? t("reapplyFamily", { f: familyFilter }) : t("reapplyAll"))),
        table(t("driftCaption"), [t("colSelect"), t("colFamily"), t("colMember"), t("colPreview")], rows),
        d.nextAfter ? h("button", { type: "button", class: "secondary", onclick: () => busy(() => load(d.nextAfter)) }, t("nextPage")) : null,
      ] : h("p", { id: "drift-none" }, t("driftNone")));
  }
  await load();
}

function showReport(card, r, label) {
  card.hidden = false;
  fill(card, h("h2", { id: "reapply-h" }, t("reapplyTitle")),
    h("p", {}, t("reapplyDone", { label, ok: r.reapplied, failed: r.failed, left: r.remaining })),
    r.results && r.results.length ? table(null, [t("colFamily"), t("colMember"), t("colStatus"), t("colResult")], r.results.map((x) => h("tr", {},
      h("td", {}, `#${x.familyId}`), h("td", {}, `#${x.customerId}`),
      h("td", {}, h("span", { class: `badge ${x.status === 200 ? "ok" : "bad"}`, "data-status": x.status }, x.status === 200 ? t("resultDone") : t("resultRefused"))),
      // A member's refusal in the console's words, by its status.
      h("td", {}, x.error ? errorText({ status: x.status, problem: {} })
        : x.changed ? t("newVersion", { v: x.policy ? x.policy.version : "" }) : t("alreadyEqual"))))) : null);
  say(t("reapplySaid", { ok: r.reapplied, failed: r.failed }), r.failed > 0);
}
