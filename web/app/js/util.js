// util.js: a tiny DOM builder (text is always set as text, never parsed as
// HTML) and formatting helpers.
import { t, locale, appName } from './i18n.js';

/** h('div.card#x', {attr: v, onclick: f}, ...children) */
export function h(tag, attrs, ...kids) {
  const m = /^([a-z0-9]+)((?:[.#][\w-]+)*)$/i.exec(tag);
  const el = document.createElement(m ? m[1] : tag);
  if (m) for (const p of m[2].match(/[.#][\w-]+/g) || []) {
    if (p[0] === '.') el.classList.add(p.slice(1)); else el.id = p.slice(1);
  }
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) { kids.unshift(attrs); attrs = null; }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  add(el, kids);
  return el;
}

function add(el, kids) {
  for (const k of kids) {
    if (k == null || k === false) continue;
    if (Array.isArray(k)) add(el, k);
    else el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
}

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];
export function fmtBytes(n) {
  n = Number(n) || 0;
  let i = 0;
  let v = Math.abs(n);
  while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
  const digits = v >= 100 || i === 0 ? 0 : v >= 10 ? 1 : 2;
  return `${n < 0 ? '-' : ''}${v.toFixed(digits)} ${UNITS[i]}`;
}

export const MB = 1024 * 1024;

export function fmtTime(d) {
  return new Date(d).toLocaleString(locale(), { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
}

export function fmtClock(hhmm) { return `${hhmm.slice(0, 2)}:${hhmm.slice(2, 4)}`; }

/**
 * reasonText says why a member is blocked, in words, from a Standing
 * {decision, rule}; catalog (GET /catalog) names a blocked app (never its
 * package id).
 */
export function reasonText(st, catalog) {
  const d = st?.decision || 'ALLOWED';
  if (d === 'BLOCKED_TIME') return t('reason.BLOCKED_TIME', { name: windowName(st.rule) });
  if (d === 'BLOCKED_APP' && st.rule) {
    const m = /^BLOCK:(APP|CATEGORY):(.+)$/.exec(st.rule);
    if (m) return `${t('reason.BLOCKED_APP')} (${m[1] === 'CATEGORY' ? t(`cat.${m[2]}`) : appName(catalog?.apps?.find((a) => a.id === m[2]))})`;
  }
  return t(`reason.${d}`);
}

function windowName(rule) {
  if (!rule) return t('defaultWindow');
  const m = /^BLOCK:TIME:(.+)$/.exec(rule);
  if (!m || m[1] === 'START' || m[1] === 'END') return t('defaultWindow');
  return m[1];
}

/**
 * untilText says until when a block lasts: the window's end, midnight, the
 * next month, or until an owner acts. rules is the member's constraint map
 * (may be null when unknown).
 */
export function untilText(st, rules) {
  switch (st?.decision) {
    case 'BLOCKED_TIME': {
      const end = windowEnd(st.rule, rules);
      return end ? t('until.window', { time: fmtClock(end) }) : t('until.unknown');
    }
    case 'BLOCKED_LIMIT_DAILY': return t('until.tomorrow');
    case 'BLOCKED_LIMIT_MONTHLY': return t('until.nextMonth');
    case 'BLOCKED_FAMILY_QUOTA': return t('until.topup');
    case 'BLOCKED_ACCESS': case 'BLOCKED_APP': return t('until.owner');
    default: return t('until.unknown');
  }
}

function windowEnd(rule, rules) {
  if (!rules) return '';
  if (!rule || rule === 'BLOCK:TIME:START' || rule === 'BLOCK:TIME:END') return rules['BLOCK:TIME:END'] || '';
  const w = parseWindow(rules[rule] || '');
  return w ? w.end : '';
}

export const DAYS = ['MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT', 'SUN'];

/** parseWindow parses "HHMM-HHMM[@DAYS]" into {start, end, days: ['MON',…]} (days empty: every day). */
export function parseWindow(v) {
  const m = /^(\d{4})-(\d{4})(?:@(.+))?$/.exec(v);
  if (!m) return null;
  return { start: m[1], end: m[2], days: m[3] ? expandDays(m[3]) : [] };
}

function expandDays(s) {
  const out = new Set();
  for (const item of s.split(',')) {
    const [a, b] = item.trim().toUpperCase().split('-');
    const i = DAYS.indexOf(a);
    if (i < 0) continue;
    if (!b) { out.add(a); continue; }
    const j = DAYS.indexOf(b);
    for (let k = i; ; k = (k + 1) % 7) { out.add(DAYS[k]); if (k === j || j < 0) break; }
  }
  return DAYS.filter((d) => out.has(d));
}

export function formatWindow(start, end, days) {
  const v = `${start}-${end}`;
  return days.length && days.length < 7 ? `${v}@${days.join(',')}` : v;
}

/** debounce returns f delayed by ms after the last call. */
export function debounce(f, ms) {
  let id = 0;
  return (...a) => { clearTimeout(id); id = setTimeout(() => f(...a), ms); };
}

// Fields the API may name in a 422 (the last segment of its location), and
// those that hold bytes (their bounds are shown as amounts).
const FIELDS = ['bytes', 'amountBytes', 'name', 'message', 'reason', 'thresholds', 'start', 'end', 'days', 'role', 'phone', 'offerId', 'value'];
const BYTE_FIELDS = new Set(['bytes', 'amountBytes']);

/**
 * errorText says in the viewer's language why a call failed: by the API's
 * status and the field its problem names, never the server's own text; a
 * request that never reached the server (offline, server down) says so.
 */
export function errorText(e) {
  const s = typeof e?.status === 'number' ? e.status : 0;
  if (!s) return t('err.network');
  if (s === 400 || s === 422) return fieldText(e.problem);
  if (s === 401) return t('err.session');
  if (s === 403) return t('err.forbidden');
  if (s === 404) return t('err.notFound');
  if (s === 409) return t('err.conflict');
  if (s === 413) return t('err.tooLarge');
  if (s === 429) return t('err.tooMany', { wait: waitText(e.retryAfter) });
  if (s === 503) return t('err.unavailable');
  return t('err.server');
}

// waitText is a Retry-After in words: "30초", "2분".
function waitText(sec) {
  sec = Math.max(1, Math.ceil(Number(sec) || 30));
  return sec < 90 ? t('err.seconds', { n: sec }) : t('err.minutes', { n: Math.ceil(sec / 60) });
}

// fieldText names the field a 422 is about and what is wrong with it, read
// from the problem's first error (huma's wording of JSON Schema checks).
function fieldText(p) {
  const d = (p?.errors || [])[0] || {};
  const seg = String(d.location || '').split('.').pop().replace(/\[\d+\]/g, '');
  const key = FIELDS.includes(seg) ? seg : 'value';
  if (key === 'thresholds') return t('err.thresholds');
  if (key === 'offerId') return t('err.offer');
  const field = t(`field.${key}`);
  const msg = String(d.message || '');
  let m;
  if ((m = /^expected number <=? ?(-?[\d.e+]+)/.exec(msg))) {
    const n = Number(m[1]);
    return t('err.max', { field, max: BYTE_FIELDS.has(key) ? fmtBytes(n) : n.toLocaleString(locale()) });
  }
  if ((m = /^expected number >=? ?(-?[\d.e+]+)/.exec(msg))) {
    const n = Number(m[1]);
    return t('err.min', { field, min: BYTE_FIELDS.has(key) ? fmtBytes(n) : n.toLocaleString(locale()) });
  }
  if ((m = /^expected (?:string )?length <= (\d+)/.exec(msg))) return t('err.long', { field, n: m[1] });
  if (/^expected (?:string )?length >=/.test(msg) || /required/.test(msg)) return t('err.required', { field });
  if (/pattern|character/.test(msg)) return t('err.chars', { field });
  return t('err.invalid', { field });
}
