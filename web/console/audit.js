// Audit log, filterable by family, actor, action and time, with before/after as a diff.
import * as api from "./api.js";
import { h, fill, field, table, when, busy, keyWords, ruleValue, roleWords, appWords, bytes, num, catName } from "./ui.js";
import { t, has } from "./i18n.js";

export async function auditScreen(root, { query }) {
  const get = (k) => query.get(k) || "";
  const fam = field(t("familyId"), { type: "number", min: 1, name: "familyId", value: get("familyId") });
  const actor = field(t("actorId"), { type: "number", min: 0, name: "actorId", value: get("actorId") });
  const action = field(t("action"), { name: "action", value: get("action"), placeholder: "policy.update", list: "audit-actions" });
  const since = field(t("since"), { type: "datetime-local", name: "since", value: get("since") });
  const until = field(t("until"), { type: "datetime-local", name: "until", value: get("until") });
  const actions = h("datalist", { id: "audit-actions" }, ["policy.update", "policy.apply_template", "member.add", "member.remove", "member.role",
    "template.create", "template.update", "template.delete", "family.plan", "family.topup", "deadletter.replay"].map((a) => h("option", { value: a })));
  const out = h("div");
  fill(root, h("h1", {}, t("auditTitle")),
    h("section", { class: "card" }, h("form", { class: "row", "aria-label": t("auditFilters"), onsubmit: (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      for (const f of [fam, actor, action, since, until]) if (f.input.value) p.set(f.input.name, f.input.value.trim());
      location.hash = `#/audit?${p}`;
    } }, fam.wrap, actor.wrap, action.wrap, actions, since.wrap, until.wrap,
    h("div", {}, h("button", { type: "submit" }, t("filter"))),
    h("div", {}, h("button", { type: "button", class: "secondary", onclick: () => { location.hash = "#/audit"; } }, t("clear"))))),
    out);

  const filters = {
    familyId: get("familyId"), actorId: get("actorId"), action: get("action"),
    since: get("since") ? new Date(get("since")).toISOString() : "", until: get("until") ? new Date(get("until")).toISOString() : "",
    limit: 50,
  };
  const tbody = h("tbody");
  const more = h("div");
  // Wide diffs scroll inside the card; the page keeps the window's width.
  fill(out, h("section", { class: "card table-scroll" }, h("table", {},
    h("caption", {}, t("auditCaption")),
    h("thead", {}, h("tr", {}, [t("colWhen"), t("colActor"), t("colAction"), t("colTarget"), t("colFamily"), t("colBeforeAfter")].map((c) => h("th", { scope: "col" }, c)))),
    tbody), more));

  async function page(before) {
    const p = await api.auditLog({ ...filters, before });
    const entries = p.entries || [];
    if (!entries.length && !before) tbody.append(h("tr", {}, h("td", { colspan: 6 }, t("auditNone"))));
    for (const e of entries) {
      tbody.append(h("tr", { "data-audit": e.id },
        h("td", {}, when(e.at)),
        h("td", {}, e.actorRole === "SYSTEM" ? t("actorSystem") : e.actorName ? `${e.actorName} #${e.actorId}` : `#${e.actorId}`,
          e.actorRole === "SYSTEM" ? null : h("div", { class: "muted" }, roleWords(e.actorRole))),
        // The action in words (its code, what the filter takes, only as the
        // cell's title: no code is read as words, #38).
        h("td", { title: e.action, "data-action": e.action }, actionWords(e.action)),
        h("td", {}, targetWords(e.target, e.targetName)),
        h("td", {}, e.familyId ? h("a", { href: `#/family/${e.familyId}` }, `#${e.familyId}`) : "—"),
        h("td", {}, auditDiff(e.before, e.after))));
    }
    fill(more, p.nextBefore ? h("button", { type: "button", class: "secondary", onclick: () => busy(() => page(p.nextBefore)) }, t("olderEntries")) : null);
  }
  await page();
}

/** actionWords is an audit action in words; an action this console does not know yet is "그 밖의 변경". */
function actionWords(a) {
  return has(`action.${a}`) ? t(`action.${a}`) : t("action.other");
}

/** targetWords is an audit row's target in words: "구성원 자녀1 #1002", "가족 #100", an app by its name. */
function targetWords(target, name) {
  const m = /^([a-z-]+):(.+)$/.exec(target || "");
  if (!m) return has(`target.${target}`) ? t(`target.${target}`) : t("target.other");
  if (m[1] === "app") return t("target.app", { app: appWords(m[2]) });
  if (m[1] === "member") return name ? t("target.memberNamed", { name, id: m[2] }) : t("target.member", { id: m[2] });
  return has(`target.${m[1]}`) ? t(`target.${m[1]}`, { id: m[2] }) : t("target.other");
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d/;

/** valueWords is one audited value in words: amounts of bytes, times, yes/no, lists; never JSON. */
function valueWords(path, raw) {
  if (raw === undefined) return "";
  let v;
  try { v = JSON.parse(raw); } catch { return raw; }
  // Fields as the API writes them (appId) or as Go names them (AppID).
  const leaf = path.split(".").pop();
  const lk = leaf[0].toLowerCase() + leaf.slice(1);
  if (v === null) return t("absent");
  if (typeof v === "boolean") return v ? t("yes") : t("no");
  if (typeof v === "number" && /bytes$|^monthTotal$/i.test(leaf)) return bytes(v);
  if (typeof v === "string" && ISO.test(v)) return when(v);
  if (typeof v === "string" && /role$/i.test(leaf)) return roleWords(v);
  if (typeof v === "string" && (/^app_?id$/i.test(leaf) || leaf === "ID")) return appWords(v);
  if (typeof v === "string" && /^category$/i.test(leaf)) return catName(v);
  if (typeof v === "string" && has(`val.${lk}.${v}`)) return t(`val.${lk}.${v}`);
  if (Array.isArray(v)) return v.map((x) => (typeof x === "object" ? t("aList") : String(x))).join(", ");
  if (typeof v === "number") return num(v, Number.isInteger(v) ? 0 : 2);
  return String(v);
}

/** pathWords is an audited field in words ("sessionsEnded" → "끝난 로그인 수"); a field without words keeps its name. */
function pathWords(path) {
  // Fields as the API writes them (appId) or as Go names them (AppID).
  const words = (p) => {
    for (const k of [p, p[0].toLowerCase() + p.slice(1), (p[0].toLowerCase() + p.slice(1)).replace(/ID$/, "Id")]) if (has(`field.${k}`)) return t(`field.${k}`);
    return p;
  };
  return path.split(".").map(words).join(" · ");
}

/** flatten turns nested JSON into path → scalar text ("rules.LIMIT:DATA:MONTHLY" → "524288000"). */
function flatten(v, prefix = "", out = new Map()) {
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    const keys = Object.keys(v);
    if (!keys.length && prefix) out.set(prefix, "{}");
    for (const k of keys) flatten(v[k], prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix || v !== undefined) {
    out.set(prefix || "(value)", v === undefined ? undefined : JSON.stringify(v));
  }
  return out;
}

/** auditDiff renders the keys that differ between before and after (added, removed, changed). */
export function auditDiff(before, after) {
  const b = before === undefined || before === null ? new Map() : flatten(before);
  const a = after === undefined || after === null ? new Map() : flatten(after);
  const keys = [...new Set([...b.keys(), ...a.keys()])].sort();
  const rows = [];
  let same = 0;
  for (const k of keys) {
    const x = b.get(k);
    const y = a.get(k);
    if (x === y) { same++; continue; }
    const change = x === undefined ? "added" : y === undefined ? "removed" : "changed";
    // A policy's constraint (rules.<KEY>, defaultRules.<KEY>) in words, its value too.
    const rule = /^(?:rules|defaultRules|Rules|DefaultRules)\.([A-Z]+:.+)$/.exec(k);
    const shown = (v) => (rule && v !== undefined ? ruleValue(rule[1], JSON.parse(v)) : valueWords(k, v));
    rows.push(h("tr", { class: change, "data-key": k },
      rule ? h("td", {}, t("rulesPath", { key: keyWords(rule[1]) })) : h("td", { class: "k" }, pathWords(k)),
      h("td", {}, x === undefined ? "" : h("del", { "data-value": x }, shown(x))),
      h("td", {}, y === undefined ? "" : h("ins", { "data-value": y }, shown(y)))));
  }
  if (!rows.length) return h("span", { class: "muted" }, before === undefined && after === undefined ? "—" : t("noChange"));
  return h("div", {}, table(null, [t("colKey"), t("colBefore"), t("colAfter")], rows, { class: "diff" }),
    same ? h("div", { class: "muted" }, t("unchangedKeys", { n: same })) : null);
}
