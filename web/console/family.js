// Family detail: pool, members (roles, add/remove), care agents' notes,
// each member's policies (a typed form, the raw keys under "Advanced",
// versioned edits), usage history charts, top-ups and the plan.
import * as api from "./api.js";
import {
  h, fill, field, table, bytes, when, num, say, busy, ask, errorText, decisionBadge, keyWords, ruleValue, ruleHint, roleWords,
  chart, chartBox, PALETTE, MB,
} from "./ui.js";
import { t, lang, locale } from "./i18n.js";
import { policyForm } from "./policyform.js";

export async function familyScreen(root, { args, query }) {
  const familyId = Number(args[0]);
  const state = { familyId, period: query.get("period") || "month", editing: Number(query.get("member")) || 0 };
  const header = h("div");
  const pool = h("section", { class: "card", "aria-labelledby": "pool-h" });
  const membersCard = h("section", { class: "card", "aria-labelledby": "members-h" });
  const notesCard = h("section", { class: "card", id: "notes", "aria-labelledby": "notes-h" });
  const editor = h("section", { class: "card", id: "policy-editor", "aria-labelledby": "policy-h", hidden: true });
  const usage = h("section", { class: "card", "aria-labelledby": "usage-h" });
  const money = h("div", { class: "grid" });
  const historyCard = h("section", { class: "card", id: "history", "aria-labelledby": "history-h" });
  fill(root, header, h("div", { class: "grid" }, pool, money), membersCard, historyCard, notesCard, editor, usage);

  async function reload() {
    const [dash, list, logins] = await Promise.all([api.dashboard(familyId), api.members(familyId),
      api.familyLogins(familyId).catch(() => null)]);
    const phones = new Map((list.members || []).map((m) => [m.customerId, m]));
    for (const l of (logins && logins.members) || []) if (phones.has(l.customerId)) phones.get(l.customerId).login = l;
    fill(header, h("p", {}, h("a", { href: "#/search" }, t("backToSearch"))),
      h("h1", {}, `${dash.name} `, h("span", { class: "muted" }, `#${dash.familyId}`)));
    renderPool(pool, dash);
    renderMembers(membersCard, dash, phones, state, reload, openEditor);
    renderMoney(money, dash, async () => { await reload(); await renderHistory(historyCard, dash, state); });
    return dash;
  }

  async function openEditor(customerId, name) {
    state.editing = customerId;
    editor.hidden = false;
    await renderEditor(editor, familyId, customerId, name, reload);
    editor.querySelector("h2").focus();
  }

  const dash = await reload();
  await renderHistory(historyCard, dash, state).catch((e) => fill(historyCard, h("p", { class: "error" }, errorText(e))));
  // The notes load on their own: a failure there leaves the rest of the screen.
  const notesLoaded = renderNotes(notesCard, familyId);
  await renderUsage(usage, familyId, state, dash);
  if (state.editing) {
    const m = dash.members.find((x) => x.customerId === state.editing);
    if (m) await openEditor(m.customerId, m.name);
  }
  await notesLoaded;
}

function monthName(yyyymm) {
  const m = /^(\d{4})(\d\d)$/.exec(yyyymm || "");
  return m ? new Date(Number(m[1]), Number(m[2]) - 1, 1).toLocaleDateString(locale(), { year: "numeric", month: "long" }) : yyyymm;
}

function renderPool(card, dash) {
  const p = dash.pool;
  const meter = h("span");
  meter.style.width = `${Math.min(100, Math.max(0, 100 - p.usedPercent))}%`;
  fill(card, h("h2", { id: "pool-h" }, t("poolTitle", { month: monthName(dash.month) })),
    dash.provisioned ? null : h("p", { class: "conflict" }, t("noPool")),
    h("div", { class: "meter", role: "meter", "aria-label": t("poolRemaining"), "aria-valuemin": 0, "aria-valuemax": 100,
      "aria-valuenow": Math.round(100 - p.usedPercent), "aria-valuetext": t("poolValue", { remaining: bytes(p.remainingBytes), total: bytes(p.totalBytes) }) }, meter),
    h("dl", { class: "stats" },
      stat(t("remaining"), bytes(p.remainingBytes), "pool-remaining", p.remainingBytes),
      stat(t("used"), t("usedPct", { bytes: bytes(p.usedBytes), pct: num(p.usedPercent, 1) })),
      stat(t("plan"), bytes(p.planBytes), "pool-plan"),
      stat(t("topUps"), bytes(p.topUpBytes)),
      stat(t("alertsAt"), (p.thresholds || []).map((x) => `${x}%`).join(", ") || t("off")),
      stat(t("fired"), (p.fired || []).map((x) => `${x}%`).join(", ") || t("none"))));
}

function stat(label, value, id, raw) {
  return h("div", { class: "stat" }, h("dt", {}, label), h("dd", { id, "data-value": raw }, value));
}

// Rules a decision badge already names ("차단: 가족 데이터").
const SAID_BY_BADGE = new Set(["POOL", "POOL:UNPROVISIONED", "MEMBERSHIP", "BLOCK:ACCESS", "LIMIT:DATA:DAILY", "LIMIT:DATA:MONTHLY"]);

const roleOptions = () => [["MEMBER", t("member")], ["OWNER", t("owner")]];

function renderMembers(card, dash, phones, state, reload, openEditor) {
  const rows = dash.members.map((m) => {
    const info = phones.get(m.customerId) || {};
    const role = field(t("roleOf", { name: m.name }), { options: roleOptions(), value: m.role }, "select");
    role.wrap.querySelector("label").className = "sr-only";
    return h("tr", { class: state.editing === m.customerId ? "selected" : undefined, "data-member": m.customerId },
      h("th", { scope: "row" }, m.name, h("div", { class: "muted mono" }, `#${m.customerId}`)),
      h("td", { class: "nowrap" }, info.phone || h("span", { class: "muted" }, "—")),
      // The login as the agent on the phone needs it (#38): locked, or
      // how many tries are left, by number and by phone.
      h("td", { "data-login": m.customerId }, loginWords(info.login)),
      h("td", {}, h("span", { "data-read": "" }, roleWords(m.role)),
        h("div", { class: "actions", "data-write": "" }, role.wrap,
          h("button", { type: "button", class: "secondary", "aria-label": t("setRoleOf", { name: m.name }), "data-set-role": m.customerId,
            onclick: () => busy(async () => { await api.setRole(dash.familyId, m.customerId, role.input.value); await reload(); },
              t("roleSet", { name: m.name, role: roleWords(role.input.value) })) }, t("setRole")))),
      // The rule that decides the standing, in words (the key only in the
      // raw editor), where it says more than the badge: which window, app.
      h("td", {}, decisionBadge(m.decision), m.rule && !SAID_BY_BADGE.has(m.rule) ? h("div", { class: "muted", "data-rule": m.rule }, keyWords(m.rule)) : null),
      h("td", { class: "num" }, bytes(m.dailyUsedBytes)),
      h("td", { class: "num" }, bytes(m.monthlyUsedBytes)),
      h("td", { class: "num" }, `${num(m.sharePercent, 1)} %`),
      h("td", { class: "num" }, String(m.policyVersion)),
      h("td", {}, h("div", { class: "actions" },
        h("button", { type: "button", "aria-label": t("policiesOf", { name: m.name }), "data-policies": m.customerId,
          onclick: () => openEditor(m.customerId, m.name) }, t("policies")),
        h("button", { type: "button", class: "danger", "data-write": "", "aria-label": t("removeOf", { name: m.name }), "data-remove": m.customerId,
          onclick: (ev) => ask(ev.currentTarget, t("removeConfirm", { name: m.name, id: m.customerId }), t("remove"),
            () => busy(async () => { await api.removeMember(dash.familyId, m.customerId); await reload(); }, t("removed", { name: m.name }))) },
        t("remove")))));
  });
  const name = field(t("name"), { name: "name", required: true, maxlength: 100 });
  const phone = field(t("phoneLogin"), { name: "phone", placeholder: "010-1234-5678" });
  const pw = field(t("pwOptional"), { name: "password", type: "password", autocomplete: "new-password" });
  const role = field(t("role"), { name: "role", options: roleOptions() }, "select");
  const add = h("form", { class: "row", id: "add-member", "data-write": "", "aria-label": t("addMember"),
    onsubmit: (ev) => {
      ev.preventDefault();
      const body = { name: name.input.value.trim(), role: role.input.value };
      if (phone.input.value.trim()) body.phone = phone.input.value.trim();
      if (pw.input.value) body.password = pw.input.value;
      busy(async () => { const m = await api.addMember(dash.familyId, body); ev.target.reset(); await reload(); return m; },
        (m) => t("added", { name: m.name, id: m.customerId }));
    } }, name.wrap, phone.wrap, pw.wrap, role.wrap, h("div", {}, h("button", { type: "submit" }, t("addMember"))));
  fill(card, h("h2", { id: "members-h" }, t("membersTitle")),
    table(null, [t("colMember"), t("colPhone"), t("colLogin"), t("colRole"), t("colStanding"), [t("colToday"), "num"], [t("colMonth"), "num"],
      [t("colShare"), "num"], [t("colPolicyVersion"), "num"], t("colActions")], rows),
    h("h3", { "data-write": "" }, t("addMember")), add);
}

// loginWords says a member's logins: locked (for how long) or the tries
// left; a parent resets a child's password in the app.
function loginWords(l) {
  if (!l) return h("span", { class: "muted" }, "—");
  const one = (s, by) => (s.lockedSeconds > 0
    ? h("div", { class: "bad-text" }, t("loginLocked", { by, min: Math.ceil(s.lockedSeconds / 60) }))
    : h("div", { class: s.attemptsLeft < 10 ? "warn-text" : "muted" }, t("loginTries", { by, n: s.attemptsLeft })));
  return [one(l.byId, t("loginById")), l.byPhone ? one(l.byPhone, t("loginByPhone")) : null];
}

function renderMoney(box, dash, reload) {
  // A top-up is one of the operator's offers (billed to the phone bill), or
  // the back office's amount outside them (free, a goodwill top-up).
  const offer = field(t("topupOffer"), { name: "offer", options: [["", t("topupFreeAmount")]] }, "select");
  api.catalog().then((c) => {
    for (const o of c.topUpOffers || []) {
      offer.input.append(h("option", { value: o.id }, t("offerLine", { bytes: bytes(o.bytes), price: won(o.priceKrw) })));
    }
    if ((c.topUpOffers || []).length) offer.input.value = c.topUpOffers[0].id;
    sync();
  }).catch(() => {});
  const top = field(t("topupMb"), { type: "number", min: 1, step: 1, name: "topup" });
  const sync = () => { top.wrap.hidden = offer.input.value !== ""; top.input.required = offer.input.value === ""; };
  offer.input.addEventListener("change", sync);
  sync();
  const plan = field(t("planMb"), { type: "number", min: 0, step: 1, name: "plan", required: true, value: Math.round(dash.pool.planBytes / MB) });
  fill(box,
    h("section", { class: "card", "data-write": "", "aria-labelledby": "topup-h" }, h("h2", { id: "topup-h" }, t("topupTitle")),
      h("form", { class: "row", id: "topup-form", onsubmit: (ev) => {
        ev.preventDefault();
        const id = offer.input.value;
        const b = Math.round(Number(top.input.value) * MB);
        busy(async () => { const r = id ? await api.buyTopUp(dash.familyId, id) : await api.topUp(dash.familyId, b); top.input.value = ""; await reload(); return r; },
          (r) => t("toppedUp", { bytes: bytes(r.bytes), remaining: bytes(r.remainingBytes), total: bytes(r.totalBytes) }));
      } }, offer.wrap, top.wrap, h("div", {}, h("button", { type: "submit" }, t("topup"))))),
    h("section", { class: "card", "data-write": "", "aria-labelledby": "plan-h" }, h("h2", { id: "plan-h" }, t("planTitle")),
      h("form", { class: "row", onsubmit: (ev) => {
        ev.preventDefault();
        const b = Math.round(Number(plan.input.value) * MB);
        busy(async () => { const r = await api.setPlan(dash.familyId, b); await reload(); return r; }, (r) => t("planSet", { bytes: bytes(r.planBytes) }));
      } }, plan.wrap, h("div", {}, h("button", { type: "submit" }, t("setPlan"))))));
}

const won = (n) => Number(n || 0).toLocaleString(locale());

// The family's 충전/선물 내역: a month's top-ups (with price and VAT, and the
// receipt on demand) and gifts, one member's or everyone's; read by admins
// and care agents alike.
async function renderHistory(card, dash, state) {
  const month = state.historyMonth || dash.month;
  const member = state.historyMember || 0;
  const hist = await api.history(dash.familyId, month, member || undefined);
  const months = [];
  for (let y = Number(dash.month.slice(0, 4)), m = Number(dash.month.slice(4, 6)), i = 0; i < 6; i++) {
    months.push([`${y}${String(m).padStart(2, "0")}`, monthName(`${y}${String(m).padStart(2, "0")}`)]);
    if (--m === 0) { m = 12; y--; }
  }
  const pickMonth = field(t("historyMonth"), { name: "history-month", options: months, value: month }, "select");
  const pickWho = field(t("historyWho"), { name: "history-member", options: [["0", t("historyEveryone")],
    ...dash.members.map((m) => [String(m.customerId), m.name])], value: String(member) }, "select");
  const again = () => {
    state.historyMonth = pickMonth.input.value;
    state.historyMember = Number(pickWho.input.value) || 0;
    renderHistory(card, dash, state).catch((e) => say(errorText(e)));
  };
  pickMonth.input.addEventListener("change", again);
  pickWho.input.addEventListener("change", again);
  const rows = hist.entries.map((e) => {
    const receipt = h("td", {});
    if (e.kind === "TOPUP") {
      const open = h("button", { type: "button", class: "secondary", "data-receipt": e.id, "aria-label": t("receiptOf", { id: e.id }),
        onclick: async () => {
          try {
            const r = await api.receipt(dash.familyId, e.id);
            fill(receipt, h("dl", { class: "receipt", id: `receipt-${e.id}` },
              h("dt", {}, t("receiptSupply")), h("dd", {}, `${won(r.supplyKrw)} ${t("wonUnit")}`),
              h("dt", {}, t("receiptVat", { rate: r.vatRate })), h("dd", {}, `${won(r.vatKrw)} ${t("wonUnit")}`),
              h("dt", {}, t("receiptTotal")), h("dd", {}, h("strong", {}, `${won(r.priceKrw)} ${t("wonUnit")}`)),
              h("dt", {}, t("receiptBilling")), h("dd", {}, t(`billing.${r.billing}`))));
          } catch (err) { fill(receipt, h("p", { class: "error" }, errorText(err))); }
        } }, t("receipt"));
      receipt.append(open);
    }
    const what = e.kind === "TOPUP"
      ? (e.offerId ? t("histTopup", { offer: e.offerId }) : t("histTopupFree"))
      : t("histGift", { from: e.from?.name || `#${e.from?.customerId}`, to: e.to?.name || `#${e.to?.customerId}` });
    return h("tr", { "data-kind": e.kind, "data-id": e.id },
      h("td", { class: "nowrap" }, h("time", { datetime: e.at }, when(e.at))),
      h("td", {}, what), h("td", { class: "num" }, bytes(e.bytes)),
      h("td", { class: "num" }, e.priceKrw != null && e.kind === "TOPUP" ? `${won(e.priceKrw)} ${t("wonUnit")}` : "—"),
      h("td", {}, e.by?.name || `#${e.by?.customerId}`), receipt);
  });
  fill(card, h("h2", { id: "history-h" }, t("historyTitle")),
    h("div", { class: "row" }, pickMonth.wrap, pickWho.wrap),
    h("p", { id: "history-totals" }, t("historyTotals", { bytes: bytes(hist.topUpBytes), price: won(hist.priceKrw), gifts: bytes(hist.giftBytes) })),
    rows.length
      ? table(null, [t("colWhen"), t("colWhat"), [t("colAmount"), "num"], [t("colPrice"), "num"], t("colBy"), t("receipt")], rows)
      : h("p", { class: "muted", id: "history-empty" }, t("historyEmpty")));
}

// Care agents' notes on the family: newest first, each with its author and
// time; body text kept as written (line breaks too), never read as HTML.
// Adding one is open to admins and care agents alike.
async function renderNotes(card, familyId) {
  const list = h("div", { id: "notes-list", "aria-live": "polite" });
  const err = h("p", { class: "error", role: "alert", id: "note-error" });
  const box = field(t("noteNew"), { name: "body", id: "note-body", maxlength: 1000, required: true, rows: 3, class: "prose" }, "textarea");
  const help = h("p", { class: "muted hint", id: "note-help" }, t("noteHelp"));
  box.input.setAttribute("aria-describedby", help.id);
  const form = h("form", { id: "note-form", onsubmit: async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    const body = box.input.value.trim();
    if (!body) { err.textContent = t("noteEmpty"); return; }
    const button = form.querySelector("button");
    button.disabled = true;
    try {
      await api.addNote(familyId, body);
      box.input.value = "";
      say(t("noteAdded"));
      await load();
    } catch (e) {
      err.textContent = errorText(e);
    } finally {
      button.disabled = false;
    }
  } }, box.wrap, help, err, h("button", { type: "submit" }, t("noteAdd")));
  fill(card, h("h2", { id: "notes-h" }, t("notesTitle")), form, list);

  async function load() {
    let notes;
    try {
      notes = (await api.notes(familyId)).notes || [];
    } catch (e) {
      fill(list, h("p", { class: "error" }, t("notesUnavailable", { msg: errorText(e) })));
      return;
    }
    fill(list, notes.length
      ? h("ol", { class: "notes", "aria-label": t("notesList") }, notes.map((n) => h("li", { "data-note": n.id },
        h("p", { class: "note-meta" }, h("strong", {}, n.authorName || `#${n.authorId}`), " · ",
          h("time", { datetime: n.createdAt }, when(n.createdAt))),
        h("p", { class: "note-body" }, n.body))))
      : h("p", { class: "muted", id: "notes-empty" }, t("notesEmpty")));
  }
  await load();
}

// The policy editor: the typed form, and under "Advanced" each key's value
// editable, keys removable, new keys added. Both save with the version they
// were read at, so a concurrent change is a clear 409.
async function renderEditor(card, familyId, customerId, name, reload) {
  let pol = await api.policy(familyId, customerId); // the version edited; a conflict moves it on
  const rules = pol.rules || {};
  card.dataset.version = String(pol.version);
  const rerender = () => renderEditor(card, familyId, customerId, name, reload);
  const conflict = h("div", { class: "conflict", role: "alert", id: "policy-conflict" });

  // submit sends a patch ({set, remove}) of either form at the version read;
  // a 409 shows what changed meanwhile and keeps the agent's edit.
  async function submit(patch) {
    conflict.textContent = "";
    if (!Object.keys(patch.set).length && !patch.remove.length) { say(t("nothingChanged")); return; }
    const save = async (version) => {
      const after = await api.patchPolicy(familyId, customerId, { ...patch, expectedVersion: version || undefined });
      say(t("saved", { name, v: after.version }));
      await reload();
      await rerender();
    };
    try {
      await save(pol.version);
    } catch (e) {
      if (e.status === 409) await showConflict(e, save, new Set([...Object.keys(patch.set), ...patch.remove]));
      else fill(conflict, h("strong", {}, t("notSaved")), errorText(e));
    }
  }

  // showConflict says what the other change was (against the version this
  // editor read), which of the agent's keys it touched too, and keeps the
  // agent's edit: it can be saved on the latest version, or dropped.
  async function showConflict(e, save, mine) {
    let cur;
    try { cur = await api.policy(familyId, customerId); } catch {
      fill(conflict, h("strong", {}, t("conflictShort")));
      return;
    }
    const was = pol.rules || {}, now = cur.rules || {};
    const changed = [...new Set([...Object.keys(was), ...Object.keys(now)])].sort().filter((k) => was[k] !== now[k]);
    const both = changed.filter((k) => mine.has(k));
    fill(conflict, h("strong", {}, t("conflictLong", { from: pol.version, to: cur.version, by: cur.updatedBy ? t("conflictBy", { id: cur.updatedBy }) : "" })),
      changed.length ? h("ul", { id: "policy-other-change" }, changed.map((k) => h("li", { "data-key": k },
        `${keyWords(k)}: ${ruleValue(k, was[k])} → ${ruleValue(k, now[k])}`)))
        : h("p", {}, t("conflictSame")),
      both.length ? h("p", { class: "error" }, t("conflictBoth", { keys: both.map(keyWords).join(", ") })) : null,
      h("div", { class: "toolbar" },
        h("button", { type: "button", id: "policy-keep-mine", "data-write": "",
          onclick: () => busy(async () => {
            try { await save(cur.version); } catch (e2) {
              if (e2.status === 409) { pol = cur; await showConflict(e2, save, mine); } else throw e2;
            }
          }) }, t("keepMine", { v: cur.version })),
        h("button", { type: "button", class: "secondary", id: "policy-reload", onclick: rerender }, t("dropMine"))));
  }

  const typed = policyForm(rules, { readOnly: api.readOnly(), onsubmit: submit });
  const advanced = h("details", { id: "policy-advanced", open: card.dataset.advanced === "open",
    ontoggle: (ev) => { card.dataset.advanced = ev.target.open ? "open" : ""; } },
  h("summary", {}, t("advanced")), rawEditor(pol, submit));
  const usageChart = chartBox(t("memberUsageChart", { name }), true);
  fill(card, h("h2", { id: "policy-h", tabindex: -1 }, t("policiesTitle", { name }), " ", h("span", { class: "muted" }, `#${customerId}`)),
    h("p", {}, t("standingNow"), decisionBadge(pol.standing && pol.standing.decision),
      h("span", { class: "muted" }, " · ", t("policyVersion", { v: pol.version })),
      pol.templateId ? h("span", { class: "muted" }, t("fromTemplate", { id: pol.templateId })) : null,
      pol.updatedAt ? h("span", { class: "muted" }, t("lastChanged", { when: when(pol.updatedAt), by: pol.updatedBy || "?" })) : null),
    typed, advanced, conflict,
    h("div", { class: "toolbar" }, h("button", { type: "button", class: "secondary", onclick: () => { card.hidden = true; } }, t("close"))),
    h("h3", {}, t("memberUsageTitle", { name })), usageChart.box);
  const u = await api.memberUsage(familyId, customerId, "month");
  if (!empty(usageChart, (u.byHour || []).length, t("memberNoUsage", { name }))) chart(usageChart.canvas, {
    type: "bar",
    data: { labels: (u.byHour || []).map((x) => hourLabel(x.hour)),
      datasets: [{ label: t("mbAllowed"), data: (u.byHour || []).map((x) => x.allowedBytes / MB), backgroundColor: PALETTE[0] }] },
    options: { maintainAspectRatio: false, animation: false, plugins: { legend: { display: false } } },
  });
}

// rawEditor is the "Advanced" view: the constraint keys as they are stored.
function rawEditor(pol, submit) {
  const rules = pol.rules || {};
  const keys = Object.keys(rules).sort();
  const inputs = [];
  const rows = keys.map((k) => {
    const v = field(t("valueOf", { key: k }), { value: rules[k], class: "mono", "data-key": k });
    v.wrap.querySelector("label").className = "sr-only";
    const rm = h("input", { type: "checkbox", id: `rm-${k}`, "aria-label": t("removeKey", { key: k }) });
    inputs.push({ k, v: v.input, rm });
    return h("tr", {}, h("th", { scope: "row", class: "mono" }, k), h("td", {}, v.wrap),
      h("td", { class: "muted" }, ruleHint(k, rules[k])), h("td", {}, rm));
  });
  const newKey = field(t("newKey"), { class: "mono", placeholder: "LIMIT:DATA:MONTHLY", list: "policy-keys", id: "new-key" });
  const newVal = field(t("newValue"), { class: "mono", placeholder: "524288000", id: "new-value" });
  const keyList = h("datalist", { id: "policy-keys" },
    ["BLOCK:ACCESS", "LIMIT:DATA:DAILY", "LIMIT:DATA:MONTHLY", "BLOCK:TIME:START", "BLOCK:TIME:END", "THROTTLE:SPEED",
      "BLOCK:CATEGORY:VIDEO", "BLOCK:CATEGORY:GAME", "BLOCK:CATEGORY:SOCIAL", "BLOCK:TIME:night"].map((k) => h("option", { value: k })));
  return h("form", { id: "policy-raw", onsubmit: (ev) => {
    ev.preventDefault();
    const set = {};
    const remove = [];
    for (const { k, v, rm } of inputs) {
      if (rm.checked) remove.push(k);
      else if (v.value !== rules[k]) set[k] = v.value.trim();
    }
    if (newKey.input.value.trim()) set[newKey.input.value.trim()] = newVal.input.value.trim();
    submit({ set, remove });
  } },
  keys.length ? table(t("constraintsCaption", { v: pol.version }), [t("colKey"), t("colValue"), t("colMeans"), t("colRemove")], rows)
    : h("p", { class: "muted" }, t("noConstraints", { v: pol.version })),
  h("h3", { "data-write": "" }, t("addKey")), h("div", { class: "row", "data-write": "" }, newKey.wrap, newVal.wrap), keyList,
  pol.version ? null : h("p", { class: "muted" }, t("firstPolicy")),
  h("div", { class: "toolbar", "data-write": "" }, h("button", { type: "submit" }, t("saveRaw"))));
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
  return Number.isNaN(d.getTime()) ? String(h0) : d.toLocaleString(locale(), { month: "short", day: "numeric", hour: "2-digit", hour12: false });
}

// appNames maps app ids to their names in the agent's language (GET
// /catalog); an app the catalog does not know keeps its id.
async function appNames() {
  try {
    const c = await api.catalog();
    return new Map((c.apps || []).map((a) => [a.id, (lang === "en" ? a.nameEn : a.name) || a.id]));
  } catch {
    return new Map();
  }
}

async function renderUsage(card, familyId, state, dash) {
  const period = field(t("period"), { options: [["month", t("thisMonth")], ["day", t("today")]], value: state.period }, "select");
  const byHour = chartBox(t("usageByHour"));
  const byMember = chartBox(t("usageByMember"), true);
  const byApp = chartBox(t("usageByApp"), true);
  const summary = h("p", { class: "muted" });
  fill(card, h("h2", { id: "usage-h" }, t("usageTitle")),
    h("div", { class: "row" }, period.wrap), summary,
    h("h3", {}, t("byHour")), byHour.box,
    h("div", { class: "grid" }, h("div", {}, h("h3", {}, t("byMember")), byMember.box), h("div", {}, h("h3", {}, t("byApp")), byApp.box)));
  const names = new Map(dash.members.map((m) => [m.customerId, m.name]));
  const apps = appNames();
  async function draw() {
    const u = await api.familyUsage(familyId, period.input.value);
    summary.textContent = t("usageSummary", { bytes: bytes(u.allowedBytes), events: num(u.events), blocked: num(u.blocked), from: when(u.from), to: when(u.to) });
    // A fresh options object per chart: Chart.js writes into the one it is given.
    const opts = () => ({ maintainAspectRatio: false, animation: false, plugins: { legend: { display: false } },
      scales: { y: { beginAtZero: true, title: { display: true, text: "MB" } } } });
    const none = t("noUsage");
    const label = t("mbAllowed");
    if (!empty(byHour, (u.byHour || []).length, none)) chart(byHour.canvas, { type: "bar", options: opts(), data: {
      labels: (u.byHour || []).map((x) => hourLabel(x.hour)),
      datasets: [{ label, data: (u.byHour || []).map((x) => x.allowedBytes / MB), backgroundColor: PALETTE[0] }] } });
    if (!empty(byMember, (u.byMember || []).length, none)) chart(byMember.canvas, { type: "bar", options: opts(), data: {
      labels: (u.byMember || []).map((x) => names.get(x.customerId) || `#${x.customerId}`),
      datasets: [{ label, data: (u.byMember || []).map((x) => x.allowedBytes / MB), backgroundColor: PALETTE.slice(0, (u.byMember || []).length) }] } });
    const top = [...(u.byApp || [])].sort((a, b) => b.allowedBytes - a.allowedBytes).slice(0, 10);
    const appName = await apps;
    if (!empty(byApp, top.length, none)) chart(byApp.canvas, { type: "bar", options: { ...opts(), indexAxis: "y", scales: { x: { beginAtZero: true, title: { display: true, text: "MB" } } } }, data: {
      labels: top.map((x) => appName.get(x.appId) || x.appId), datasets: [{ label, data: top.map((x) => x.allowedBytes / MB), backgroundColor: PALETTE[2] }] } });
  }
  period.input.addEventListener("change", () => busy(draw));
  await draw();
}
