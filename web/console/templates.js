// Policy templates: list, create/edit/(de)activate/delete, apply to a member,
// and drift (members whose copy differs from the template now) with a
// per-key preview and a bulk re-apply.
import * as api from "./api.js";
import { h, fill, field, table, when, say, busy, rulesToText, textToRules, ruleHint } from "./ui.js";

export async function templatesScreen(root, { query }) {
  const listCard = h("section", { class: "card", "aria-labelledby": "tpl-list-h" });
  const editCard = h("section", { class: "card", "data-write": "", "aria-labelledby": "tpl-edit-h", id: "template-editor" });
  const applyCard = h("section", { class: "card", "data-write": "", "aria-labelledby": "tpl-apply-h" });
  fill(root, h("h1", {}, "Policy templates"), listCard, h("div", { class: "grid" }, editCard, applyCard));
  let all = [];

  async function reload() {
    all = (await api.templates()).templates || [];
    fill(listCard, h("h2", { id: "tpl-list-h" }, "Templates"),
      all.length ? table(null, ["Id", "Name", "Type", "For", "Rules", "Active", "Updated", "Actions"],
        all.map((t) => h("tr", { "data-template": t.id },
          h("td", {}, String(t.id)),
          h("th", { scope: "row" }, t.name, t.description ? h("div", { class: "muted" }, t.description) : null),
          h("td", {}, t.type),
          h("td", {}, t.requireRole || "MEMBER"),
          h("td", { class: "mono" }, Object.keys(t.defaultRules || {}).sort().map((k) => h("div", {}, `${k}=${t.defaultRules[k]}`))),
          h("td", {}, h("span", { class: `badge ${t.active ? "ok" : "neutral"}` }, t.active ? "Active" : "Inactive")),
          h("td", {}, when(t.updatedAt)),
          h("td", {}, h("div", { class: "actions" },
            h("button", { type: "button", "data-write": "", "aria-label": `Edit ${t.name}`, onclick: () => edit(t) }, "Edit"),
            h("a", { href: `#/templates/${t.id}/drift`, class: "drift-link", "aria-label": `Drift of ${t.name}` }, "Drift"),
            h("button", { type: "button", class: "secondary", "data-write": "", "aria-label": `${t.active ? "Deactivate" : "Activate"} ${t.name}`,
              onclick: () => busy(async () => { await api.updateTemplate(t.id, { ...body(t), active: !t.active }); await reload(); },
                `${t.name} ${t.active ? "deactivated" : "activated"}.`) }, t.active ? "Deactivate" : "Activate"),
            h("button", { type: "button", class: "danger", "data-write": "", "aria-label": `Delete ${t.name}`,
              onclick: () => {
                if (!confirm(`Delete template “${t.name}”? Members it was applied to keep their policies.`)) return;
                busy(async () => { await api.deleteTemplate(t.id); await reload(); }, `${t.name} deleted.`);
              } }, "Delete"))))))
        : h("p", { class: "muted" }, "No templates yet: create one below."));
    renderApply(applyCard, all);
  }

  function edit(t) {
    const name = field("Name", { name: "name", required: true, maxlength: 100, value: t ? t.name : "" });
    const type = field("Type", { name: "type", required: true, maxlength: 50, value: t ? t.type : "LIMIT", placeholder: "LIMIT" });
    const role = field("Applies to role", { name: "requireRole", options: [["MEMBER", "Member"], ["OWNER", "Owner"]], value: t ? t.requireRole || "MEMBER" : "MEMBER" }, "select");
    const desc = field("Description", { name: "description", maxlength: 1000, value: t ? t.description || "" : "" });
    const rules = field("Default rules (one KEY=value a line)", { name: "defaultRules", value: t ? rulesToText(t.defaultRules) : "LIMIT:DATA:MONTHLY=1073741824", class: "mono", spellcheck: "false" }, "textarea");
    const active = h("input", { type: "checkbox", id: "tpl-active", name: "active", checked: t ? t.active : true });
    const err = h("p", { class: "error", role: "alert" });
    fill(editCard, h("h2", { id: "tpl-edit-h", tabindex: -1 }, t ? `Edit template #${t.id}` : "New template"),
      h("form", { class: "stack", onsubmit: async (ev) => {
        ev.preventDefault();
        err.textContent = "";
        let b;
        try {
          b = { name: name.input.value.trim(), type: type.input.value.trim(), requireRole: role.input.value,
            description: desc.input.value.trim(), defaultRules: textToRules(rules.input.value), active: active.checked };
        } catch (e) { err.textContent = e.message; return; }
        try {
          const saved = t ? await api.updateTemplate(t.id, b) : await api.createTemplate(b);
          say(t ? `Template ${saved.name} saved. Members it was applied to keep their copies: see its drift.` : `Template ${saved.name} created (#${saved.id}).`);
          await reload();
          edit(null);
        } catch (e) { err.textContent = e.message; }
      } }, name.wrap, type.wrap, role.wrap, desc.wrap, rules.wrap,
      h("div", { class: "toolbar" }, active, h("label", { for: "tpl-active" }, "Active (can be applied)")),
      err,
      h("div", { class: "toolbar" }, h("button", { type: "submit" }, t ? "Save template" : "Create template"),
        t ? h("button", { type: "button", class: "secondary", onclick: () => edit(null) }, "Cancel") : null)));
    if (t) editCard.querySelector("h2").focus();
  }

  await reload();
  const want = Number(query.get("edit"));
  edit(all.find((t) => t.id === want) || null);
}

function body(t) {
  return { name: t.name, type: t.type, requireRole: t.requireRole || "MEMBER", description: t.description || "", defaultRules: t.defaultRules || {}, active: t.active };
}

// granted reports whether k is what an owner granted on request for a
// while — an extra allowance or an exception (policy.Granted): applying a
// template keeps those (the store does), so the preview says so.
const granted = (k) => k.startsWith("LIMIT:DATA:EXTRA:") || k === "EXCEPT:TIME" || k.startsWith("EXCEPT:APP:");

function renderApply(card, all) {
  const tpl = field("Template", { options: all.filter((t) => t.active).map((t) => [String(t.id), `#${t.id} ${t.name}`]) }, "select");
  const fam = field("Family id", { type: "number", min: 1, required: true });
  const mem = field("Member id", { type: "number", min: 1, required: true });
  const preview = h("div", { id: "apply-preview", "aria-live": "polite" });
  // Applying replaces the member's rules with the template's: first a
  // preview, key by key, of what the member loses, keeps and gets; then the
  // apply, at the policy version previewed (a change since is a 409).
  fill(card, h("h2", { id: "tpl-apply-h" }, "Apply to a member"),
    h("p", { class: "muted" }, "Replaces the member's rules with the template's (audited, enforced at once); approved extra allowances stay. Later template edits do not change the copy: they show up as drift."),
    h("form", { class: "stack", "data-write": "", onsubmit: (ev) => {
      ev.preventDefault();
      const id = Number(tpl.input.value), f = Number(fam.input.value), c = Number(mem.input.value);
      busy(async () => {
        const [t, pol] = await Promise.all([api.template(id), api.policy(f, c)]);
        showPreview(t, pol, f, c);
      });
    } }, tpl.wrap, fam.wrap, mem.wrap, h("button", { type: "submit", disabled: !all.some((t) => t.active) }, "Preview")),
    preview);

  function showPreview(t, pol, f, c) {
    const cur = pol.rules || {}, next = t.defaultRules || {};
    const diffs = [];
    for (const k of [...new Set([...Object.keys(cur), ...Object.keys(next)])].sort()) {
      if (granted(k) && !(k in next)) continue; // kept
      if (!(k in next)) diffs.push({ key: k, change: "removed", current: cur[k] });
      else if (!(k in cur)) diffs.push({ key: k, change: "added", template: next[k] });
      else if (cur[k] !== next[k]) diffs.push({ key: k, change: "changed", current: cur[k], template: next[k] });
    }
    const lost = diffs.filter((d) => d.change === "removed").map((d) => d.key);
    const kept = Object.keys(cur).filter((k) => granted(k) && !(k in next));
    fill(preview, h("h3", {}, `Member #${c}: policy version ${pol.version} → template “${t.name}”`),
      diffs.length ? diffTable(diffs, null) : h("p", {}, "The member's rules already equal the template's."),
      lost.length ? h("p", { class: "error", id: "apply-loses" }, `The member loses its own ${lost.join(", ")}.`) : null,
      kept.length ? h("p", { class: "muted", id: "apply-keeps" }, `Kept: the approved extra allowances ${kept.join(", ")}.`) : null,
      h("div", { class: "toolbar" },
        h("button", { type: "button", id: "apply-confirm", onclick: () => busy(async () => {
          const p = await api.applyTemplate(t.id, f, c, pol.version);
          fill(preview);
          return p;
        }, (p) => `Applied: member #${p.customerId} of family #${p.familyId} now at policy version ${p.version}.`) },
        lost.length ? "Apply and remove them" : "Apply"),
        h("button", { type: "button", class: "secondary", onclick: () => fill(preview) }, "Cancel")));
  }
}

/** diffTable renders a per-key preview: what re-applying does to each key. */
export function diffTable(diffs, caption) {
  const words = { added: "added", removed: "removed", changed: "changed" };
  return table(caption, ["Key", "Change", "Current", "Template"], (diffs || []).map((d) => h("tr", { class: d.change },
    h("td", { class: "k" }, d.key),
    h("td", {}, words[d.change] || d.change),
    h("td", { class: "mono" }, d.current === undefined ? h("span", { class: "muted" }, "(absent)") : h("del", {}, d.current), " ", h("span", { class: "muted" }, d.current ? ruleHint(d.key, d.current) : "")),
    h("td", { class: "mono" }, d.template === undefined ? h("span", { class: "muted" }, "(absent)") : h("ins", {}, d.template), " ", h("span", { class: "muted" }, d.template ? ruleHint(d.key, d.template) : "")))),
  { class: "diff" });
}

export async function driftScreen(root, { args, query }) {
  const id = Number(args[0]);
  const familyFilter = query.get("familyId") || "";
  const head = h("div");
  const body = h("section", { class: "card", "aria-labelledby": "drift-h" });
  const report = h("section", { class: "card", id: "reapply-report", hidden: true, "aria-labelledby": "reapply-h" });
  fill(root, head, report, body);
  const fam = field("Only family id", { type: "number", min: 1, value: familyFilter });
  fill(head, h("p", {}, h("a", { href: "#/templates" }, "← Policy templates")), h("h1", {}, "Template drift"),
    h("form", { class: "row", onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/templates/${id}/drift${fam.input.value ? `?familyId=${fam.input.value}` : ""}`; } },
      fam.wrap, h("div", {}, h("button", { type: "submit", class: "secondary" }, "Filter"))));

  async function load(after) {
    const d = await api.templateDrift(id, { familyId: familyFilter || undefined, after, limit: 100 });
    const boxes = [];
    const rows = (d.items || []).map((m) => {
      const cb = h("input", { type: "checkbox", "aria-label": `Select member ${m.customerId} of family ${m.familyId}`, "data-member": m.customerId, "data-write": "" });
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
      if (!b) { say("Select at least one member.", true); return; }
      const r = await busy(() => api.reapplyTemplate(id, b));
      if (!r) return;
      showReport(report, r, label);
      await load();
    };
    fill(body, h("h2", { id: "drift-h" }, `#${d.templateId} ${d.templateName}`),
      d.templateActive ? null : h("p", { class: "conflict" }, "This template is inactive: re-applying it is refused. Activate it first."),
      h("dl", { class: "stats" },
        h("div", { class: "stat" }, h("dt", {}, "Members with a copy"), h("dd", {}, String(d.members))),
        h("div", { class: "stat" }, h("dt", {}, "Drifted"), h("dd", { id: "drift-count" }, String(d.drifted))),
        h("div", { class: "stat" }, h("dt", {}, "Families affected"), h("dd", {}, String(d.families)))),
      h("h3", {}, "Template rules now"),
      h("pre", { class: "mono" }, rulesToText(d.templateRules) || "(none)"),
      d.items && d.items.length ? [
        h("div", { class: "toolbar", "data-write": "" },
          selectAll, h("label", { for: "drift-all" }, "Select all on this page"),
          h("button", { type: "button", id: "reapply-selected", "data-write": "", disabled: !d.templateActive,
            onclick: () => reapply(() => {
              const members = boxes.filter((b) => b.cb.checked).map(({ m }) => ({ familyId: m.familyId, customerId: m.customerId, expectedVersion: m.version }));
              return members.length ? { members } : null;
            }, "selected members") }, "Re-apply to selected"),
          h("button", { type: "button", class: "secondary", id: "reapply-all", "data-write": "", disabled: !d.templateActive,
            onclick: () => {
              if (!confirm(`Re-apply “${d.templateName}” to every drifted member (${d.drifted})? Their own edits to these keys are overwritten.`)) return;
              reapply(() => (familyFilter ? { familyIds: [Number(familyFilter)] } : { all: true }), familyFilter ? `family #${familyFilter}` : "all drifted members");
            } }, familyFilter ? `Re-apply to all of family #${familyFilter}` : "Re-apply to all drifted")),
        table("Drifted members: what re-applying changes", ["Select", "Family", "Member", "Preview (current → template)"], rows),
        d.nextAfter ? h("button", { type: "button", class: "secondary", onclick: () => busy(() => load(d.nextAfter)) }, "Next page") : null,
      ] : h("p", { id: "drift-none" }, "No member's copy differs from the template."));
  }
  await load();
}

function showReport(card, r, label) {
  card.hidden = false;
  fill(card, h("h2", { id: "reapply-h" }, "Re-apply result"),
    h("p", {}, `Re-applied to ${label}: ${r.reapplied} updated, ${r.failed} failed, ${r.remaining} still drifted.`),
    r.results && r.results.length ? table(null, ["Family", "Member", "Status", "Result"], r.results.map((x) => h("tr", {},
      h("td", {}, `#${x.familyId}`), h("td", {}, `#${x.customerId}`),
      h("td", {}, h("span", { class: `badge ${x.status === 200 ? "ok" : "bad"}` }, String(x.status))),
      h("td", {}, x.error || (x.changed ? `new policy version ${x.policy ? x.policy.version : ""}` : "already equal"))))) : null);
  say(`Re-applied: ${r.reapplied} updated, ${r.failed} failed.`, r.failed > 0);
}
