// Family detail: pool, members (roles, add/remove), each member's policies
// (versioned edits), usage history charts, top-ups and the plan.
import * as api from "./api.js";
import {
  h, fill, field, table, bytes, when, num, say, busy, decisionBadge, ruleHint, chart, chartBox, PALETTE, MB,
} from "./ui.js";

export async function familyScreen(root, { args, query }) {
  const familyId = Number(args[0]);
  const state = { familyId, period: query.get("period") || "month", editing: Number(query.get("member")) || 0 };
  const header = h("div");
  const pool = h("section", { class: "card", "aria-labelledby": "pool-h" });
  const membersCard = h("section", { class: "card", "aria-labelledby": "members-h" });
  const editor = h("section", { class: "card", id: "policy-editor", "aria-labelledby": "policy-h", hidden: true });
  const usage = h("section", { class: "card", "aria-labelledby": "usage-h" });
  const money = h("div", { class: "grid" });
  fill(root, header, h("div", { class: "grid" }, pool, money), membersCard, editor, usage);

  async function reload() {
    const [dash, list] = await Promise.all([api.dashboard(familyId), api.members(familyId)]);
    const phones = new Map((list.members || []).map((m) => [m.customerId, m]));
    fill(header, h("p", {}, h("a", { href: "#/search" }, "← Families")),
      h("h1", {}, `${dash.name} `, h("span", { class: "muted" }, `#${dash.familyId}`)));
    renderPool(pool, dash);
    renderMembers(membersCard, dash, phones, state, reload, openEditor);
    renderMoney(money, dash, reload);
    return dash;
  }

  async function openEditor(customerId, name) {
    state.editing = customerId;
    editor.hidden = false;
    await renderEditor(editor, familyId, customerId, name, reload);
    editor.querySelector("h2").focus();
  }

  const dash = await reload();
  await renderUsage(usage, familyId, state, dash);
  if (state.editing) {
    const m = dash.members.find((x) => x.customerId === state.editing);
    if (m) await openEditor(m.customerId, m.name);
  }
}

function renderPool(card, dash) {
  const p = dash.pool;
  const meter = h("span");
  meter.style.width = `${Math.min(100, Math.max(0, 100 - p.usedPercent))}%`;
  fill(card, h("h2", { id: "pool-h" }, `Pool · ${dash.month.replace(/^(\d{4})(\d\d)$/, "$1-$2")}`),
    dash.provisioned ? null : h("p", { class: "conflict" }, "No pool provisioned: every request of this family is blocked."),
    h("div", { class: "meter", role: "meter", "aria-label": "Pool remaining", "aria-valuemin": 0, "aria-valuemax": 100,
      "aria-valuenow": Math.round(100 - p.usedPercent), "aria-valuetext": `${bytes(p.remainingBytes)} of ${bytes(p.totalBytes)} remaining` }, meter),
    h("dl", { class: "stats" },
      stat("Remaining", bytes(p.remainingBytes), "pool-remaining", p.remainingBytes),
      stat("Used", `${bytes(p.usedBytes)} (${num(p.usedPercent, 1)} %)`),
      stat("Plan", bytes(p.planBytes), "pool-plan"),
      stat("Top-ups", bytes(p.topUpBytes)),
      stat("Alerts at", (p.thresholds || []).map((t) => `${t}%`).join(", ") || "off"),
      stat("Fired", (p.fired || []).map((t) => `${t}%`).join(", ") || "none")));
}

function stat(label, value, id, raw) {
  return h("div", { class: "stat" }, h("dt", {}, label), h("dd", { id, "data-value": raw }, value));
}

function renderMembers(card, dash, phones, state, reload, openEditor) {
  const rows = dash.members.map((m) => {
    const info = phones.get(m.customerId) || {};
    const role = field(`Role of ${m.name}`, { options: [["MEMBER", "Member"], ["OWNER", "Owner"]], value: m.role }, "select");
    role.wrap.querySelector("label").className = "sr-only";
    return h("tr", { class: state.editing === m.customerId ? "selected" : undefined, "data-member": m.customerId },
      h("th", { scope: "row" }, m.name, h("div", { class: "muted mono" }, `#${m.customerId}`)),
      h("td", {}, info.phone || h("span", { class: "muted" }, "—")),
      h("td", {}, h("span", { "data-read": "" }, m.role === "OWNER" ? "Owner" : "Member"),
        h("div", { class: "actions", "data-write": "" }, role.wrap,
        h("button", { type: "button", class: "secondary", "aria-label": `Set role of ${m.name}`,
          onclick: () => busy(async () => { await api.setRole(dash.familyId, m.customerId, role.input.value); await reload(); },
            `${m.name} is now ${role.input.value}.`) }, "Set"))),
      h("td", {}, decisionBadge(m.decision), m.rule ? h("div", { class: "muted mono" }, m.rule) : null),
      h("td", { class: "num" }, bytes(m.dailyUsedBytes)),
      h("td", { class: "num" }, bytes(m.monthlyUsedBytes)),
      h("td", { class: "num" }, `${num(m.sharePercent, 1)} %`),
      h("td", { class: "num" }, String(m.policyVersion)),
      h("td", {}, h("div", { class: "actions" },
        h("button", { type: "button", "aria-label": `Policies of ${m.name}`, onclick: () => openEditor(m.customerId, m.name) }, "Policies"),
        h("button", { type: "button", class: "danger", "data-write": "", "aria-label": `Remove ${m.name}`,
          onclick: () => {
            if (!confirm(`Remove ${m.name} (#${m.customerId}) from the family? Their next event is blocked as not a member.`)) return;
            busy(async () => { await api.removeMember(dash.familyId, m.customerId); await reload(); }, `${m.name} removed.`);
          } }, "Remove"))));
  });
  const name = field("Name", { name: "name", required: true, maxlength: 100 });
  const phone = field("Phone (login)", { name: "phone", placeholder: "010-1234-5678" });
  const pw = field("Password (empty: cannot log in)", { name: "password", type: "password", autocomplete: "new-password" });
  const role = field("Role", { name: "role", options: [["MEMBER", "Member"], ["OWNER", "Owner"]] }, "select");
  const add = h("form", { class: "row", "data-write": "", "aria-label": "Add a member",
    onsubmit: (ev) => {
      ev.preventDefault();
      const body = { name: name.input.value.trim(), role: role.input.value };
      if (phone.input.value.trim()) body.phone = phone.input.value.trim();
      if (pw.input.value) body.password = pw.input.value;
      busy(async () => { const m = await api.addMember(dash.familyId, body); ev.target.reset(); await reload(); return m; },
        (m) => `${m.name} added as #${m.customerId}.`);
    } }, name.wrap, phone.wrap, pw.wrap, role.wrap, h("div", {}, h("button", { type: "submit" }, "Add member")));
  fill(card, h("h2", { id: "members-h" }, "Members and owners"),
    table(null, ["Member", "Phone", "Role", "Standing", ["Today", "num"], ["This month", "num"], ["Share", "num"], ["Policy v.", "num"], "Actions"], rows),
    h("h3", { "data-write": "" }, "Add a member"), add);
}

function renderMoney(box, dash, reload) {
  const top = field("Top-up (MB)", { type: "number", min: 1, step: 1, name: "topup", required: true });
  const plan = field("Monthly plan (MB)", { type: "number", min: 0, step: 1, name: "plan", required: true, value: Math.round(dash.pool.planBytes / MB) });
  fill(box,
    h("section", { class: "card", "data-write": "", "aria-labelledby": "topup-h" }, h("h2", { id: "topup-h" }, "Top up this month"),
      h("form", { class: "row", onsubmit: (ev) => {
        ev.preventDefault();
        const b = Math.round(Number(top.input.value) * MB);
        busy(async () => { const r = await api.topUp(dash.familyId, b); ev.target.reset(); await reload(); return r; },
          (r) => `Topped up ${bytes(r.bytes)}: ${bytes(r.remainingBytes)} of ${bytes(r.totalBytes)} remaining.`);
      } }, top.wrap, h("div", {}, h("button", { type: "submit" }, "Top up")))),
    h("section", { class: "card", "data-write": "", "aria-labelledby": "plan-h" }, h("h2", { id: "plan-h" }, "Plan"),
      h("form", { class: "row", onsubmit: (ev) => {
        ev.preventDefault();
        const b = Math.round(Number(plan.input.value) * MB);
        busy(async () => { const r = await api.setPlan(dash.familyId, b); await reload(); return r; }, (r) => `Plan set to ${bytes(r.planBytes)}.`);
      } }, plan.wrap, h("div", {}, h("button", { type: "submit" }, "Set plan")))));
}

// The policy editor: each key's value editable, keys removable, new keys added;
// saved with the version it was read at, so a concurrent change is a clear 409.
async function renderEditor(card, familyId, customerId, name, reload) {
  let pol = await api.policy(familyId, customerId); // the version edited; a conflict moves it on
  const conflict = h("div", { class: "conflict", role: "alert", id: "policy-conflict" });
  const keys = Object.keys(pol.rules || {}).sort();
  const inputs = [];
  const rows = keys.map((k) => {
    const v = field(`Value of ${k}`, { value: pol.rules[k], class: "mono", "data-key": k });
    v.wrap.querySelector("label").className = "sr-only";
    const rm = h("input", { type: "checkbox", id: `rm-${k}`, "aria-label": `Remove ${k}` });
    inputs.push({ k, v: v.input, rm });
    return h("tr", {}, h("th", { scope: "row", class: "mono" }, k), h("td", {}, v.wrap),
      h("td", { class: "muted" }, ruleHint(k, pol.rules[k])), h("td", {}, rm));
  });
  const newKey = field("New key", { class: "mono", placeholder: "LIMIT:DATA:MONTHLY", list: "policy-keys", id: "new-key" });
  const newVal = field("Value", { class: "mono", placeholder: "524288000", id: "new-value" });
  const keyList = h("datalist", { id: "policy-keys" },
    ["BLOCK:ACCESS", "LIMIT:DATA:DAILY", "LIMIT:DATA:MONTHLY", "BLOCK:TIME:START", "BLOCK:TIME:END", "THROTTLE:SPEED",
      "BLOCK:CATEGORY:VIDEO", "BLOCK:CATEGORY:GAME", "BLOCK:CATEGORY:SOCIAL", "BLOCK:TIME:night"].map((k) => h("option", { value: k })));
  const form = h("form", { onsubmit: async (ev) => {
    ev.preventDefault();
    conflict.textContent = "";
    const set = {};
    const remove = [];
    for (const { k, v, rm } of inputs) {
      if (rm.checked) remove.push(k);
      else if (v.value !== pol.rules[k]) set[k] = v.value.trim();
    }
    if (newKey.input.value.trim()) set[newKey.input.value.trim()] = newVal.input.value.trim();
    if (!Object.keys(set).length && !remove.length) { say("Nothing changed."); return; }
    const save = async (version) => {
      const after = await api.patchPolicy(familyId, customerId, { set, remove, expectedVersion: version || undefined });
      say(`Policies of ${name} saved: version ${after.version}.`);
      await reload();
      await renderEditor(card, familyId, customerId, name, reload);
    };
    try {
      await save(pol.version);
    } catch (e) {
      if (e.status === 409) await showConflict(e, save);
      else fill(conflict, h("strong", {}, "Not saved: "), e.message);
    }
  } });

  // showConflict says what the other change was (against the version this
  // editor read), which of the agent's keys it touched too, and keeps the
  // agent's edit: it can be saved on the latest version, or dropped.
  async function showConflict(e, save) {
    let cur;
    try { cur = await api.policy(familyId, customerId); } catch {
      fill(conflict, h("strong", {}, "Not saved: someone changed this policy since you opened it. "), e.message);
      return;
    }
    const was = pol.rules || {}, now = cur.rules || {};
    const changed = [...new Set([...Object.keys(was), ...Object.keys(now)])].sort().filter((k) => was[k] !== now[k]);
    const mine = new Set(inputs.filter(({ k, v, rm }) => rm.checked || v.value !== was[k]).map(({ k }) => k));
    if (newKey.input.value.trim()) mine.add(newKey.input.value.trim());
    const both = changed.filter((k) => mine.has(k));
    const show = (v) => (v === undefined ? "(none)" : v);
    fill(conflict, h("strong", {}, `Not saved: someone changed this policy since you opened it (version ${pol.version} → ${cur.version}`,
      cur.updatedBy ? ` by #${cur.updatedBy}` : "", "). Your edit is kept."),
    changed.length ? h("ul", { id: "policy-other-change" }, changed.map((k) => h("li", { class: "mono" }, `${k}: ${show(was[k])} → ${show(now[k])}`)))
      : h("p", {}, "Their change left every key as it was."),
    both.length ? h("p", { class: "error" }, `You changed ${both.join(", ")} too: saving replaces their value with yours.`) : null,
    h("div", { class: "toolbar" },
      h("button", { type: "button", id: "policy-keep-mine", "data-write": "",
        onclick: () => busy(async () => {
          try { await save(cur.version); } catch (e2) {
            if (e2.status === 409) { pol = cur; await showConflict(e2, save); } else throw e2;
          }
        }) }, `Save my edit on version ${cur.version}`),
      h("button", { type: "button", class: "secondary", id: "policy-reload",
        onclick: () => renderEditor(card, familyId, customerId, name, reload) }, "Drop my edit and reload")));
  }
  fill(form,
  keys.length ? table(`Constraints (version ${pol.version})`, ["Key", "Value", "Means", "Remove"], rows)
    : h("p", { class: "muted" }, `No constraints (version ${pol.version}): only the family pool applies.`),
  h("h3", { "data-write": "" }, "Add or set a key"), h("div", { class: "row", "data-write": "" }, newKey.wrap, newVal.wrap), keyList,
  pol.version ? null : h("p", { class: "muted" }, "This member's first policy: the API has no version to check a first write against, so a concurrent first edit is not detected."),
  conflict,
  h("div", { class: "toolbar" }, h("button", { type: "submit", "data-write": "" }, "Save policies"),
    h("button", { type: "button", class: "secondary", onclick: () => { card.hidden = true; } }, "Close")));
  const usageChart = chartBox(`Usage of ${name} this month by hour`, true);
  fill(card, h("h2", { id: "policy-h", tabindex: -1 }, `Policies of ${name} `, h("span", { class: "muted" }, `#${customerId}`)),
    h("p", {}, "Standing now: ", decisionBadge(pol.standing && pol.standing.decision),
      pol.templateId ? h("span", { class: "muted" }, ` · from template #${pol.templateId}`) : null,
      pol.updatedAt ? h("span", { class: "muted" }, ` · last changed ${when(pol.updatedAt)} by #${pol.updatedBy || "?"}`) : null),
    form, h("h3", {}, `Usage of ${name} (this month, by hour)`), usageChart.box);
  const u = await api.memberUsage(familyId, customerId, "month");
  if (!empty(usageChart, (u.byHour || []).length, `No usage by ${name} this month.`)) chart(usageChart.canvas, {
    type: "bar",
    data: { labels: (u.byHour || []).map((x) => hourLabel(x.hour)),
      datasets: [{ label: "MB allowed", data: (u.byHour || []).map((x) => x.allowedBytes / MB), backgroundColor: PALETTE[0] }] },
    options: { maintainAspectRatio: false, animation: false, plugins: { legend: { display: false } } },
  });
}

/** empty shows msg instead of the chart when there is nothing to draw; reports whether it did. */
function empty(c, n, msg) {
  c.box.hidden = n === 0;
  let note = c.box.previousElementSibling;
  if (!note || !note.classList.contains("empty-note")) {
    note = h("p", { class: "muted empty-note" });
    c.box.before(note);
  }
  note.textContent = n === 0 ? msg : "";
  note.hidden = n !== 0;
  return n === 0;
}

function hourLabel(h0) {
  const d = new Date(h0);
  return Number.isNaN(d.getTime()) ? String(h0) : d.toLocaleString("en-GB", { month: "short", day: "numeric", hour: "2-digit", hour12: false });
}

async function renderUsage(card, familyId, state, dash) {
  const period = field("Period", { options: [["month", "This month"], ["day", "Today"]], value: state.period }, "select");
  const byHour = chartBox("Family usage by hour");
  const byMember = chartBox("Family usage by member", true);
  const byApp = chartBox("Family usage by app", true);
  const summary = h("p", { class: "muted" });
  fill(card, h("h2", { id: "usage-h" }, "Usage history"),
    h("div", { class: "row" }, period.wrap), summary,
    h("h3", {}, "By hour"), byHour.box,
    h("div", { class: "grid" }, h("div", {}, h("h3", {}, "By member"), byMember.box), h("div", {}, h("h3", {}, "By app (top 10)"), byApp.box)));
  const names = new Map(dash.members.map((m) => [m.customerId, m.name]));
  async function draw() {
    const u = await api.familyUsage(familyId, period.input.value);
    summary.textContent = `${bytes(u.allowedBytes)} allowed in ${num(u.events)} events, ${num(u.blocked)} blocked, ${when(u.from)} – ${when(u.to)}.`;
    // A fresh options object per chart: Chart.js writes into the one it is given.
    const opts = () => ({ maintainAspectRatio: false, animation: false, plugins: { legend: { display: false } },
      scales: { y: { beginAtZero: true, title: { display: true, text: "MB" } } } });
    const none = "No usage in this period.";
    if (!empty(byHour, (u.byHour || []).length, none)) chart(byHour.canvas, { type: "bar", options: opts(), data: {
      labels: (u.byHour || []).map((x) => hourLabel(x.hour)),
      datasets: [{ label: "MB allowed", data: (u.byHour || []).map((x) => x.allowedBytes / MB), backgroundColor: PALETTE[0] }] } });
    if (!empty(byMember, (u.byMember || []).length, none)) chart(byMember.canvas, { type: "bar", options: opts(), data: {
      labels: (u.byMember || []).map((x) => names.get(x.customerId) || `#${x.customerId}`),
      datasets: [{ label: "MB allowed", data: (u.byMember || []).map((x) => x.allowedBytes / MB), backgroundColor: PALETTE.slice(0, (u.byMember || []).length) }] } });
    const apps = [...(u.byApp || [])].sort((a, b) => b.allowedBytes - a.allowedBytes).slice(0, 10);
    if (!empty(byApp, apps.length, none)) chart(byApp.canvas, { type: "bar", options: { ...opts(), indexAxis: "y", scales: { x: { beginAtZero: true, title: { display: true, text: "MB" } } } }, data: {
      labels: apps.map((x) => x.appId), datasets: [{ label: "MB allowed", data: apps.map((x) => x.allowedBytes / MB), backgroundColor: PALETTE[2] }] } });
  }
  period.input.addEventListener("change", () => busy(draw));
  await draw();
}
