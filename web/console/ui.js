// Small DOM helpers shared by the screens (no framework).

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

/** busy runs fn, reporting its error in the status region; returns fn's result or undefined. */
export async function busy(fn, okMsg) {
  try {
    const r = await fn();
    if (okMsg) say(typeof okMsg === "function" ? okMsg(r) : okMsg);
    return r;
  } catch (e) {
    say(e.message || String(e), true);
    return undefined;
  }
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

export function when(t) {
  if (!t) return "—";
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? String(t) : d.toLocaleString("en-GB", { hour12: false });
}

export function num(n, digits = 0) {
  return Number(n || 0).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

/** decisionBadge renders ALLOWED / BLOCKED_… as a coloured badge with words. */
export function decisionBadge(decision) {
  const words = {
    ALLOWED: "Allowed", BLOCKED_ACCESS: "Blocked: manual block", BLOCKED_APP: "Blocked: app",
    BLOCKED_TIME: "Blocked: time window", BLOCKED_LIMIT_DAILY: "Blocked: daily limit",
    BLOCKED_LIMIT_MONTHLY: "Blocked: monthly limit", BLOCKED_FAMILY_QUOTA: "Blocked: family pool",
    BLOCKED_NOT_MEMBER: "Blocked: not a member",
  };
  const d = decision || "UNKNOWN";
  return h("span", { class: `badge ${d === "ALLOWED" ? "ok" : d.startsWith("BLOCKED") ? "bad" : "neutral"}` }, words[d] || d);
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
    if (at <= 0) throw new Error(`Line ${i + 1}: expected KEY=value, got "${l}"`);
    out[l.slice(0, at).trim()] = l.slice(at + 1).trim();
  }
  return out;
}

/** ruleHint explains a constraint value in words (limits in MB/GB). */
export function ruleHint(key, value) {
  if (key.startsWith("LIMIT:DATA:") && /^\d+$/.test(value)) return bytes(Number(value));
  if (key === "THROTTLE:SPEED") return `${value} kbps`;
  if (key === "BLOCK:TIME:START" || key === "BLOCK:TIME:END") return value.replace(/^(\d\d)(\d\d)$/, "$1:$2");
  return "";
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
