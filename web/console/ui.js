// Small DOM helpers shared by the screens (no framework), and the words
// the screens share: amounts, times, decisions, constraint keys, refusals.
import { readOnly } from "./api.js";
import { t, has, locale, lang } from "./i18n.js";

/** h builds an element: h("td", {class: "num"}, "12"). Attributes starting with "on" are listeners. */
export function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "value") e.value = v;
    else if (k === "checked") e.checked = !!v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  append(e, children);
  return e;
}

function append(e, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** fill replaces the children of an element. */
export function fill(e, ...children) {
  e.replaceChildren();
  append(e, children);
  return e;
}

let uid = 0;
/** field is a labelled input: field("Plan (MB)", {type: "number", name: "plan"}). */
export function field(label, attrs = {}, tag = "input") {
  const id = attrs.id || `f${++uid}`;
  const input = tag === "select"
    ? h("select", { ...attrs, id, options: undefined }, (attrs.options || []).map(([v, t]) => h("option", { value: v }, t)))
    : h(tag, { ...attrs, id });
  if (tag === "select" && attrs.value !== undefined) input.value = attrs.value;
  return { wrap: h("div", {}, h("label", { for: id }, label), input), input };
}

/** table builds an accessible table with column headers. */
export function table(caption, headers, rows, opts = {}) {
  return h("table", { class: opts.class },
    caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((c) => {
      const [text, cls] = Array.isArray(c) ? c : [c, undefined];
      return h("th", { scope: "col", class: cls }, text);
    }))),
    h("tbody", {}, rows));
}

const statusEl = () => document.getElementById("status");
let statusTimer = null;
/** say shows a message in the live status region (bad: an error). */
export function say(msg, bad = false) {
  const s = statusEl();
  clearTimeout(statusTimer);
  s.classList.toggle("bad", bad);
  s.textContent = msg;
  if (msg && !bad) statusTimer = setTimeout(() => { s.textContent = ""; }, 6000);
}

/**
 * ask asks inside the page, beside the control clicked (never the
 * browser's own dialog, #38): the question, a button that runs yes, and
 * one that cancels. One question is open at a time.
 */
export function ask(near, question, yesText, yes, kind = "danger") {
  for (const e of document.querySelectorAll(".ask")) e.remove();
  const no = h("button", { type: "button", class: "secondary ask-no" }, t("cancel"));
  const box = h("div", { class: "ask", role: "alertdialog", "aria-label": question },
    h("p", {}, question),
    h("button", { type: "button", class: `${kind} ask-yes`, onclick: () => { box.remove(); yes(); } }, yesText), " ", no);
  no.addEventListener("click", () => { box.remove(); near.focus(); });
  (near.closest("td, li, .toolbar, .card") || near.parentElement).append(box);
  no.focus();
}

/** busy runs fn, reporting its error in the status region; returns fn's result or undefined. */
export async function busy(fn, okMsg) {
  try {
    const r = await fn();
    if (okMsg) say(typeof okMsg === "function" ? okMsg(r) : okMsg);
    return r;
  } catch (e) {
    say(errorText(e), true);
    return undefined;
  }
}

/**
 * errorText says in the agent's language why something failed: a refusal
 * of the API by its status (and, for a 422, the field its problem names),
 * never the server's own text; a call that never reached the server says
 * so; the console's own errors (a bad KEY=value line) are already words.
 */
export function errorText(e) {
  if (!e || typeof e.status !== "number") return (e && e.message) || String(e);
  const s = e.status;
  if (s === 0) return t("err.network");
  if (s === 400 || s === 422) return fieldText(e.problem);
  if (s === 401) return t("err.session");
  if (s === 403) return readOnly() ? t("err.readOnly") : t("err.forbidden");
  if (s === 404) return t("err.notFound");
  if (s === 409) {
    const loc = ((e.problem && e.problem.errors) || [])[0]?.location;
    return loc ? t("err.conflictField", { field: fieldName(loc) }) : t("err.conflict");
  }
  if (s === 413) return t("err.tooLarge");
  if (s === 429) return t("err.tooMany", { wait: waitText(e.retryAfter) });
  if (s === 502 || s === 503 || s === 504) return t("err.unavailable");
  return t("err.server");
}

// waitText is a Retry-After in words: "30초", "2분".
function waitText(sec) {
  sec = Math.max(1, Math.ceil(Number(sec) || 30));
  return sec < 90 ? t("err.seconds", { n: sec }) : t("err.minutes", { n: Math.ceil(sec / 60) });
}

/** fieldName names the field of a problem's location: a constraint key in words ("body.set.LIMIT:DATA:MONTHLY" → 월 한도). */
export function fieldName(loc) {
  const path = String(loc || "").replace(/^body\./, "");
  const m = /^(?:set|replace|rules|defaultRules)\.(.+)$/.exec(path);
  if (m) return keyWords(m[1]);
  const seg = path.split(".").pop().replace(/\[\d+\]/g, "");
  if (has(`field.${seg}`)) return t(`field.${seg}`);
  if (/^[A-Z]+:/.test(seg)) return keyWords(seg);
  return seg || t("field.value");
}

// fieldText names the field a 422 is about and what is wrong with it, read
// from the problem's first error (huma's wording of JSON Schema checks).
function fieldText(p) {
  const d = ((p && p.errors) || [])[0] || {};
  const field = fieldName(d.location);
  const msg = String(d.message || "");
  let m;
  if ((m = /^expected number <=? ?(-?[\d.e+]+)/.exec(msg))) return t("err.max", { field, max: num(Number(m[1])) });
  if ((m = /^expected number >=? ?(-?[\d.e+]+)/.exec(msg))) return t("err.min", { field, min: num(Number(m[1])) });
  if ((m = /^expected (?:string )?length <= (\d+)/.exec(msg))) return t("err.long", { field, n: m[1] });
  if (/^expected (?:string )?length >=/.test(msg) || /required/.test(msg)) return t("err.required", { field });
  return t("err.invalid", { field });
}

const UNITS = ["B", "KB", "MB", "GB", "TB"];
/** bytes formats a byte count (1024 steps, as the plans are sold). */
export function bytes(n) {
  if (n === undefined || n === null || Number.isNaN(Number(n))) return "—";
  let v = Number(n);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
  return `${v >= 100 || i === 0 ? Math.round(v) : v.toFixed(1)} ${UNITS[i]}`;
}
export const MB = 1024 * 1024;

/** when is a time in the agent's locale (24-hour clock). */
export function when(v) {
  if (!v) return "—";
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? String(v) : d.toLocaleString(locale(), { dateStyle: "medium", timeStyle: "medium", hourCycle: "h23" });
}

export function num(n, digits = 0) {
  return Number(n || 0).toLocaleString(locale(), { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

/** decisionBadge renders ALLOWED / BLOCKED_… as a coloured badge with words. */
export function decisionBadge(decision) {
  const d = decision || "UNKNOWN";
  return h("span", { class: `badge ${d === "ALLOWED" ? "ok" : d.startsWith("BLOCKED") ? "bad" : "neutral"}` }, decisionWords(d));
}

/** decisionWords is a decision code in words (the code itself when unknown). */
export function decisionWords(code) {
  return has(`decision.${code}`) ? t(`decision.${code}`) : code;
}

/** roleWords is a role (ADMIN, AGENT, OWNER, MEMBER) in words. */
export function roleWords(role) {
  return has(`role.${role}`) ? t(`role.${role}`) : role || "";
}

/** catName is a category (VIDEO, GAME, …) in words. */
export function catName(c) {
  return has(`cat.${c}`) ? t(`cat.${c}`) : c;
}

/** rulesToText / textToRules convert a constraint map to "KEY=value" lines and back. */
export function rulesToText(rules) {
  return Object.keys(rules || {}).sort().map((k) => `${k}=${rules[k]}`).join("\n");
}
export function textToRules(text) {
  const out = {};
  for (const [i, line] of text.split("\n").entries()) {
    const l = line.trim();
    if (!l || l.startsWith("#")) continue;
    const at = l.indexOf("=");
    if (at <= 0) throw new Error(t("err.line", { n: i + 1, text: l }));
    out[l.slice(0, at).trim()] = l.slice(at + 1).trim();
  }
  return out;
}

const period = (p) => p.replace(/^(\d{4})(\d\d)(\d\d)?$/, (m, y, mo, d) => (d ? `${y}-${mo}-${d}` : `${y}-${mo}`));
const hhmm = (v) => v.replace(/(^|\D)(\d\d)(\d\d)(?=\D|$)/g, "$1$2:$3");

let apps = new Map();
/** setApps gives the screens the app catalog's names (GET /catalog's apps). */
export function setApps(list) { apps = new Map((list || []).map((a) => [a.id, a])); }

/** appWords is an app by its name in the agent's language: never its package id (an app the catalog does not know is "알 수 없는 앱"). */
export function appWords(id) {
  const a = apps.get(id);
  return a ? ((lang === "en" ? a.nameEn : a.name) || a.name) : t("unknownApp");
}

/**
 * keyWords is a constraint key in words ("LIMIT:DATA:MONTHLY" → "월 한도"):
 * outside the raw editor the console shows no keys.
 */
export function keyWords(k) {
  if (has(`key.${k}`)) return t(`key.${k}`);
  let m;
  if ((m = /^BLOCK:CATEGORY:(.+)$/.exec(k))) return t("key.blockCategory", { cat: catName(m[1]) });
  if ((m = /^ALLOW:CATEGORY:(.+)$/.exec(k))) return t("key.allowCategory", { cat: catName(m[1]) });
  if ((m = /^BLOCK:APP:(.+)$/.exec(k))) return t("key.blockApp", { app: appWords(m[1]) });
  if ((m = /^ALLOW:APP:(.+)$/.exec(k))) return t("key.allowApp", { app: appWords(m[1]) });
  if ((m = /^EXCEPT:APP:(.+)$/.exec(k))) return t("key.exceptApp", { app: appWords(m[1]) });
  if ((m = /^LIMIT:DATA:APP:(.+)$/.exec(k))) return t("key.budgetApp", { app: appWords(m[1]) });
  if ((m = /^LIMIT:DATA:CATEGORY:(.+)$/.exec(k))) return t("key.budgetCategory", { cat: catName(m[1]) });
  if ((m = /^LIMIT:DATA:EXTRA:(\d+)$/.exec(k))) return t("key.extra", { period: period(m[1]) });
  if ((m = /^LIMIT:DATA:GIFT:(\d+)$/.exec(k))) return t("key.gift", { period: period(m[1]) });
  if ((m = /^BLOCK:TIME:(.+)$/.exec(k))) return t("key.window", { name: m[1] });
  return k;
}

/** ruleValue is a constraint's value in words (limits in MB/GB, times as HH:MM). */
export function ruleValue(k, v) {
  if (v === undefined || v === null) return t("absent");
  v = String(v);
  // A gift is given (below 0) or received: said so, never a signed count.
  if (k.startsWith("LIMIT:DATA:GIFT:") && /^-?\d+$/.test(v)) {
    const n = Number(v);
    return n < 0 ? t("val.giftGiven", { bytes: bytes(-n) }) : t("val.giftReceived", { bytes: bytes(n) });
  }
  if (k.startsWith("LIMIT:DATA:") && /^\d+$/.test(v)) return bytes(Number(v));
  if (k === "THROTTLE:SPEED" && /^\d+$/.test(v)) return `${num(Number(v))} kbps`;
  if (k.startsWith("EXCEPT:") && /^\d{12}$/.test(v)) {
    return t("val.until", { time: `${v.slice(0, 4)}-${v.slice(4, 6)}-${v.slice(6, 8)} ${v.slice(8, 10)}:${v.slice(10)}` });
  }
  const w = /^(\d{4})-(\d{4})(?:@(.+))?$/.exec(v); // a named window: HHMM-HHMM[@DAYS]
  if (k.startsWith("BLOCK:TIME:") && w) {
    const span = `${hhmm(w[1])}–${hhmm(w[2])}`;
    return w[3] ? `${span} (${w[3].replace(/[A-Z]{3}/g, (d) => (has(`day.${d}`) ? t(`day.${d}`) : d)).replace(/-/g, "–")})` : span;
  }
  if (k.startsWith("BLOCK:TIME:")) return hhmm(v);
  if (v === "1" && /^(BLOCK|ALLOW):/.test(k)) return t("on");
  return v;
}

/** ruleWords is a constraint and its value in words ("월 한도: 50.0 MB", "게임 차단"). */
export function ruleWords(key, value) {
  const w = keyWords(key);
  return String(value) === "1" && /^(BLOCK|ALLOW):/.test(key) ? w : `${w}: ${ruleValue(key, value)}`;
}

/** ruleHint explains a constraint in words beside its raw value (the raw editor's "Means"); "" when there are none. */
export function ruleHint(key, value) {
  return keyWords(key) === key && ruleValue(key, value) === value ? "" : ruleWords(key, value);
}

/** chart makes (or replaces) a Chart.js chart on a canvas; charts are kept per canvas. */
export function chart(canvas, config) {
  const C = window.Chart;
  if (!C) return null;
  const old = C.getChart(canvas);
  if (old) old.destroy();
  C.defaults.font.family = getComputedStyle(document.documentElement).fontFamily;
  C.defaults.color = "#333";
  return new C(canvas, config);
}

/** chartBox is a labelled canvas container (role img, label for screen readers). */
export function chartBox(label, small = false) {
  const canvas = h("canvas", { role: "img", "aria-label": label });
  return { box: h("div", { class: small ? "chart-box small" : "chart-box" }, canvas), canvas };
}

export const PALETTE = ["#0b57d0", "#b3261e", "#1b6b35", "#8a4b00", "#6b2fa0", "#00696f", "#a1286a", "#5f6368", "#c26401"];
