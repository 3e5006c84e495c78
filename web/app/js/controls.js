// controls.js: owner controls, each applied at once — per member: limits
// (sliders), instant block, time windows, app and category blocks, a
// password reset; per family: alert thresholds, top-ups, members and roles.
import * as api from './api.js';
import { t, appName, locale } from './i18n.js';
import { h, fmtBytes, reasonText, parseWindow, formatWindow, fmtClock, DAYS, MB, errorText } from './util.js';
import { state, on, refreshDashboard, loadCatalog } from './store.js';
import { toast, go, track } from './ui.js';
import { passwordText } from './settings.js';

// WINDOW_PRESETS are the usual downtimes: school hours on weekdays, school
// nights (the evening before a school day, past midnight), weekend nights.
// MAX_BYTES is the largest limit the engine takes (policy.MaxBytes, 2^46).
const MAX_BYTES = 2 ** 46;

const WINDOW_PRESETS = [
  { key: 'school', start: '09:00', end: '15:00', days: ['MON', 'TUE', 'WED', 'THU', 'FRI'] },
  { key: 'schoolNight', start: '22:00', end: '07:00', days: ['SUN', 'MON', 'TUE', 'WED', 'THU'] },
  { key: 'weekendNight', start: '23:30', end: '08:00', days: ['FRI', 'SAT'] },
];

export async function controlsView(root, [cid, focus]) {
  const s = api.currentSession();
  if (s.role === 'MEMBER') { root.append(h('p.error', { role: 'alert' }, t('ownersOnly'))); return; }
  const d = state.dash || await refreshDashboard();
  const id = Number(cid) || d.members.find((m) => m.role === 'MEMBER')?.customerId || d.members[0].customerId;
  const fam = s.familyId;
  let pol = await api.policies(fam, id);
  const catalog = await loadCatalog().catch(() => ({ categories: [], apps: [] }));

  const pick = h('select#controls-member', d.members.map((m) => h('option', { value: String(m.customerId), selected: m.customerId === id }, m.name)));
  pick.addEventListener('change', () => go(`#/controls/${pick.value}`));
  const status = h('p#controls-status', { role: 'status' });
  const memberBox = h('div#member-controls');
  root.append(
    h('section.card', h('h2', t('controlsTitle')), h('label', { for: 'controls-member' }, t('memberPick')), pick, status),
    memberBox,
    thresholdsBox(), topupBox(), membersBox());

  function renderStatus(dash) {
    const m = dash?.members.find((x) => x.customerId === id);
    if (!m) return;
    status.dataset.status = m.status;
    status.className = m.status === 'BLOCKED' ? 'status st-blocked-text' : 'status';
    status.textContent = `${m.name}: ${m.status === 'BLOCKED' ? `${t('blocked')} — ${reasonText(m, catalog)}` : t('allowed')} · ${t('thisMonth', { bytes: fmtBytes(m.monthlyUsedBytes) })}`;
    // Another owner (or an approved request) changed the policies: show theirs.
    if (m.policyVersion > pol.version) {
      api.policies(fam, id).then((p) => { if (p.version > pol.version) { pol = p; renderMember(); } }).catch(() => {});
    }
  }
  track(on('dashboard', renderStatus));
  renderStatus(d);

  const who = d.members.find((m) => m.customerId === id)?.name || '';
  // note is the outcome of the last change, shown in the card changed (a
  // toast would cover the control just used).
  let note = null;
  // drafts are amounts typed in a limit card and not (yet) applied: a
  // re-render (a refusal, a live update) keeps them.
  const drafts = {};
  let focusNext = null;

  // apply sends one change with the version check and re-renders from the
  // answer; where names the card that says how it went. Changes go one
  // after another, each with the version the one before left: a parent
  // ticking two boxes quickly is not told another owner changed it first.
  let queue = Promise.resolve();
  function apply(change, where) {
    queue = queue.then(() => applyNow(change, where), () => applyNow(change, where));
    return queue;
  }
  async function applyNow(change, where) {
    try {
      pol = await api.patchPolicies(fam, id, pol.version, change);
      note = { where, text: t('applied'), error: false };
      delete drafts[where];
    } catch (e) {
      if (e.status === 409) { pol = await api.policies(fam, id); note = { where, text: t('conflict'), error: true }; }
      else if (e.status === 422 && (where === 'daily' || where === 'monthly')) note = { where, text: t('limitMax', { max: fmtBytes(MAX_BYTES) }), error: true };
      else note = { where, text: errorText(e), error: true };
    }
    renderMember();
    refreshDashboard().catch(() => {});
  }

  // cardNote is the card's line saying how its last change went.
  function cardNote(where) {
    const n = note && note.where === where ? note : null;
    return h(`p.card-note${n?.error ? '.error' : ''}`, { id: `${where}-note`, role: 'status' }, n ? n.text : '');
  }

  // confirmed asks, inside the card, before a change that cuts the member
  // off (a limit of 0, an instant block); yes runs the change.
  function confirmed(box, question, yesText, yes, kind = 'danger') {
    const q = h('div.confirm', { role: 'alertdialog', 'aria-label': question },
      h('p', question),
      h('button', { type: 'button', class: `${kind} confirm-yes` }, yesText),
      h('button', { type: 'button', class: 'confirm-no' }, t('cancel')));
    q.querySelector('.confirm-yes').addEventListener('click', () => { q.remove(); yes(); });
    q.querySelector('.confirm-no').addEventListener('click', () => { q.remove(); renderMember(); });
    box.querySelector('.confirm')?.remove();
    box.append(q);
    q.querySelector('.confirm-no').focus();
  }

  function renderMember() {
    const focused = focusNext || document.activeElement?.id;
    focusNext = null;
    memberBox.replaceChildren(...[accessBox(), limitBox('LIMIT:DATA:MONTHLY', 'monthly', t('monthlyLimit')),
      limitBox('LIMIT:DATA:DAILY', 'daily', t('dailyLimit')), windowsBox(), appsBox(), budgetsBox(), resetBox()].filter(Boolean));
    if (focused) document.getElementById(focused)?.focus();
  }

  function accessBox() {
    const on_ = pol.rules['BLOCK:ACCESS'] === '1';
    const btn = h(`button#access-toggle${on_ ? '' : '.danger'}`, { type: 'button', 'aria-pressed': String(on_) }, on_ ? t('unblockNow') : t('blockNow'));
    const box = h('section.card#access-card', h('h3', t('accessTitle')), h('p', on_ ? t('accessOn') : t('accessOff')), btn, cardNote('access'));
    btn.addEventListener('click', () => {
      if (on_) apply({ remove: ['BLOCK:ACCESS'] }, 'access');
      else confirmed(box, t('confirmBlock', { name: who }), t('blockNow'), () => apply({ set: { 'BLOCK:ACCESS': '1' } }, 'access'));
    });
    return box;
  }

  // limitBox is a data limit: a slider scaled to the family's plan, the
  // amount typed with its unit, presets, a way to remove it, and the
  // member's approved extras. Nothing gates the controls: a limit is set
  // by choosing an amount (#38: the amount box was disabled until a
  // checkbox was ticked). A limit of 0, or one at or below what the member
  // already used (it blocks at once), is asked about first; an amount past
  // what a limit can be says the bound and keeps what was typed.
  function limitBox(key, name, title) {
    const cur = pol.rules[key];
    const on_ = cur !== undefined;
    const pool = state.dash?.pool.totalBytes || 0;
    const max = Math.max(pool || 1024 * MB, Number(cur) || 0);
    const step = Math.max(1, Math.round(max / 400));
    const start = on_ ? Number(cur) : Math.round(max / (name === 'daily' ? 30 : 2));
    const draft = drafts[name];
    const gb = draft ? Number(draft.unit) === 1024 * MB : on_ && start >= 1024 * MB;
    const slider = h(`input#${name}-slider`, { type: 'range', min: '0', max: String(max), step: String(step), value: String(start) });
    const amount = h(`input#${name}-amount`, { type: 'number', min: '0', step: 'any', inputMode: 'decimal',
      value: draft ? draft.amount : on_ ? String(+(start / (gb ? 1024 * MB : MB)).toFixed(2)) : '', 'aria-label': `${title}: ${t('amount')}` });
    const unit = h(`select#${name}-unit`, { 'aria-label': `${title}: ${t('unit')}` },
      h('option', { value: String(MB), selected: !gb }, 'MB'), h('option', { value: String(1024 * MB), selected: gb }, 'GB'));
    const out = h(`output#${name}-value`, { for: `${name}-slider` }, on_ ? fmtBytes(start) : t('noLimit'));
    slider.setAttribute('aria-valuetext', out.textContent);
    const presets = [100 * MB, 500 * MB, 1024 * MB, 3 * 1024 * MB].filter((b) => b < max).map((b) =>
      h('button.small', { type: 'button', id: `${name}-preset-${b / MB}`, onclick: () => want(b) }, fmtBytes(b)));
    const clear = on_ ? h('button.small', { type: 'button', id: `${name}-clear`, onclick: () => apply({ remove: [key] }, name) }, t('clearLimit')) : null;
    const box = h('section.card', { id: `${name}-card` }, h('h3', { id: `${name}-h` }, title),
      h('label', { for: `${name}-slider` }, `${title}: `, out), slider,
      h('div.row.amount', amount, unit, h('button.small', { type: 'button', id: `${name}-set`, onclick: () => typed() }, t('setAmount'))),
      presets.length ? h('div.row.presets', presets) : null, clear,
      extrasList(name), cardNote(name));
    function want(bytes) {
      if (bytes > MAX_BYTES) {
        note = { where: name, text: t('limitMax', { max: fmtBytes(MAX_BYTES) }), error: true };
        renderMember();
        return;
      }
      const m = state.dash?.members.find((x) => x.customerId === id);
      const used = (name === 'daily' ? m?.dailyUsedBytes : m?.monthlyUsedBytes) || 0;
      const go = () => apply({ set: { [key]: String(bytes) } }, name);
      if (bytes === 0) confirmed(box, t('confirmZero', { name: who, limit: title }), t('setZero'), go);
      else if (used > 0 && bytes <= used && (!on_ || bytes < Number(cur))) {
        confirmed(box, t('confirmBelowUse', { name: who, limit: title, used: fmtBytes(used), bytes: fmtBytes(bytes) }), t('applyAnyway'), go);
      } else go();
    }
    function typed() {
      const v = Number(amount.value);
      drafts[name] = { amount: amount.value, unit: unit.value };
      if (amount.value.trim() === '' || !Number.isFinite(v) || v < 0) { note = { where: name, text: t('amountInvalid'), error: true }; renderMember(); return; }
      want(Math.round(v * Number(unit.value)));
    }
    amount.addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); typed(); } });
    slider.addEventListener('input', () => { out.textContent = fmtBytes(Number(slider.value)); slider.setAttribute('aria-valuetext', out.textContent); });
    slider.addEventListener('change', () => { delete drafts[name]; want(Math.round(Number(slider.value))); });
    return box;
  }

  // extrasList shows the member's approved extras for the limit (granted on
  // request: a day's for the daily limit, a month's for the monthly one),
  // each revocable.
  function extrasList(name) {
    const digits = name === 'daily' ? 8 : 6;
    const items = Object.entries(pol.rules).filter(([k]) => k.startsWith('LIMIT:DATA:EXTRA:') && k.length === 'LIMIT:DATA:EXTRA:'.length + digits);
    if (!items.length) return null;
    return h('ul.extras', { id: `${name}-extras` }, items.map(([k, v]) => {
      const p = k.slice('LIMIT:DATA:EXTRA:'.length);
      const when = digits === 8 ? `${p.slice(4, 6)}/${p.slice(6, 8)}` : `${p.slice(0, 4)}-${p.slice(4, 6)}`;
      const del = h('button.small', { type: 'button', 'aria-label': `${t('revokeExtra')}: ${when}`, onclick: () => apply({ remove: [k] }, name) }, t('revokeExtra'));
      return h('li', t('extraLine', { when, bytes: fmtBytes(Number(v)) }), ' ', del);
    }));
  }

  // grant lifts the member's downtime (TIME) or an app's block (APP) for
  // 30 minutes ("30분 더"), or extends what is in effect.
  function grant(kind, where, appId) {
    queue = queue.then(() => grantNow(kind, where, appId), () => grantNow(kind, where, appId));
    return queue;
  }
  async function grantNow(kind, where, appId) {
    try {
      pol = await api.grantException(fam, id, kind, 30, appId);
      note = { where, text: t('applied'), error: false };
    } catch (e) { note = { where, text: errorText(e), error: true }; }
    renderMember();
    refreshDashboard().catch(() => {});
  }

  // exceptionsList shows the exceptions in effect, each with a way to end it.
  function exceptionsList(kind, where) {
    const xs = (pol.exceptions || []).filter((x) => x.kind === kind);
    if (!xs.length) return null;
    // The service zone's time of day, as the windows are set.
    const clock = (x) => `${x.until.slice(8, 10)}:${x.until.slice(10, 12)}`;
    return h('ul.exceptions', { id: `${where}-exceptions`, 'aria-label': t('exceptionsTitle') }, xs.map((x) => {
      const app = catalog.apps.find((a) => a.id === x.appId);
      const text = kind === 'TIME' ? t('exceptionTime', { time: clock(x) }) : t('exceptionApp', { app: appName(app, x.appId), time: clock(x) });
      const end = h('button.small', { type: 'button', 'aria-label': `${t('endException')}: ${text}`, onclick: () => apply({ remove: [x.key] }, where) }, t('endException'));
      return h('li', text, ' ', end);
    }));
  }

  // allowedBox picks what stays allowed during downtime: categories
  // (ALLOW:CATEGORY:<c>: messaging to reach the family, maps) and single
  // apps by name from the catalog (ALLOW:APP:<appId>: a school app), as
  // Screen Time's "always allowed".
  function allowedBox() {
    const cats = h('div.row.wrap', catalog.categories.map((c) => {
      const key = `ALLOW:CATEGORY:${c}`;
      const box = h('input', { type: 'checkbox', id: `allow-cat-${c}`, checked: pol.rules[key] === '1' });
      box.addEventListener('change', () => apply(box.checked ? { set: { [key]: '1' } } : { remove: [key] }, 'windows'));
      return h('label.day', box, t(`cat.${c}`));
    }));
    const apps = catalog.categories.map((c) => {
      const list = catalog.apps.filter((a) => a.category === c).map((a) => {
        const key = `ALLOW:APP:${a.id}`;
        const idAttr = `allow-app-${a.id.replace(/[^\w-]/g, '_')}`;
        const box = h('input', { type: 'checkbox', id: idAttr, checked: pol.rules[key] === '1' });
        box.addEventListener('change', () => apply(box.checked ? { set: { [key]: '1' } } : { remove: [key] }, 'windows'));
        return h('li', box, h('label', { for: idAttr, title: a.id }, a.icon ? h('span.app-icon', { 'aria-hidden': 'true' }, a.icon) : null, appName(a, a.id)));
      });
      if (!list.length) return null;
      return h('details', { open: list.some((li) => li.firstChild.checked) },
        h('summary', t('appsIn', { cat: t(`cat.${c}`), n: list.length })), h('ul.applist', list));
    }).filter(Boolean);
    // An allowed app the catalog no longer names still shows, by its id.
    const stray = Object.keys(pol.rules).filter((k) => k.startsWith('ALLOW:APP:') && !catalog.apps.some((a) => `ALLOW:APP:${a.id}` === k))
      .map((k) => h('li', h('span', k.slice('ALLOW:APP:'.length)), ' ',
        h('button.small', { type: 'button', onclick: () => apply({ remove: [k] }, 'windows') }, t('remove'))));
    return h('fieldset.allowed#always-allowed', h('legend', t('alwaysAllowedTitle')), h('p.muted', t('alwaysAllowedHelp')), cats,
      h('fieldset.allowed#always-allowed-apps', h('legend', t('alwaysAllowedApps')), h('p.muted', t('alwaysAllowedAppsHelp')),
        apps, stray.length ? h('ul.applist', stray) : null));
  }

  function windowsBox() {
    const rows = [];
    if (pol.rules['BLOCK:TIME:START'] !== undefined) {
      const st = pol.rules['BLOCK:TIME:START'];
      const en = pol.rules['BLOCK:TIME:END'] || st;
      rows.push(windowRow(t('defaultWindow'), st, en, [], ['BLOCK:TIME:START', 'BLOCK:TIME:END']));
    }
    for (const [k, v] of Object.entries(pol.rules)) {
      const m = /^BLOCK:TIME:(.+)$/.exec(k);
      if (!m || m[1] === 'START' || m[1] === 'END') continue;
      const w = parseWindow(v);
      if (w) rows.push(windowRow(m[1], w.start, w.end, w.days, [k]));
    }
    // Named in the family's language ("밤"): letters and digits of any script.
    const name = h('input#window-name', { required: true, value: t('windowDefaultName'), maxLength: 32 });
    const start = h('input#window-start', { type: 'time', required: true, value: '22:00' });
    const end = h('input#window-end', { type: 'time', required: true, value: '07:00' });
    const days = DAYS.map((dd) => h('label.day', h('input', { type: 'checkbox', value: dd, id: `window-day-${dd}` }), t(`day.${dd}`)));
    // Presets like the anchors' schedules: a tap fills the form, which the
    // parent can still change before adding it.
    const presets = WINDOW_PRESETS.map((p) => {
      const b = h('button.small', { type: 'button', id: `preset-${p.key}` }, t(`preset.${p.key}`));
      b.addEventListener('click', () => {
        name.value = t(`preset.${p.key}.name`);
        start.value = p.start;
        end.value = p.end;
        for (const l of days) l.firstChild.checked = p.days.includes(l.firstChild.value);
        name.focus();
      });
      return b;
    });
    const form = h('form.window-form#window-form',
      h('div.row.presets', { role: 'group', 'aria-label': t('windowPresets') }, h('span.muted', t('windowPresets')), presets),
      h('div.row', h('label', { for: 'window-name' }, t('windowName')), name),
      h('div.row', h('label', { for: 'window-start' }, t('windowStart')), start, h('label', { for: 'window-end' }, t('windowEnd')), end),
      h('fieldset.days', h('legend', `${t('windowDays')} (${t('noDaysEveryDay')})`), days),
      h('button.primary#window-add', { type: 'submit' }, t('addWindow')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!form.reportValidity()) return;
      const hhmm = (v) => v.replace(':', '').slice(0, 4);
      const sel = days.map((l) => l.firstChild).filter((c) => c.checked).map((c) => c.value);
      apply({ set: { [`BLOCK:TIME:${name.value}`]: formatWindow(hhmm(start.value), hhmm(end.value), sel) } }, 'windows');
    });
    // One tap, one grant: disabled until the card is drawn again.
    const now30 = rows.length ? h('button#grant-time', { type: 'button', onclick: (e) => { e.currentTarget.disabled = true; grant('TIME', 'windows'); } }, t('grantTimeNow')) : null;
    return h('section.card#windows', h('h3', t('windowsTitle')), h('ul.windows', rows), now30, exceptionsList('TIME', 'windows'),
      cardNote('windows'), form, allowedBox());
  }

  function windowRow(name, start, end, days, keys) {
    const del = h('button.small', { type: 'button', 'aria-label': `${t('remove')}: ${name}` }, t('remove'));
    del.addEventListener('click', () => apply({ remove: keys }, 'windows'));
    const crosses = start > end;
    return h('li', { id: `window-${name}` }, h('strong', name), ` ${fmtClock(start)}–${fmtClock(end)} `,
      days.length ? days.map((x) => t(`day.${x}`)).join(' ') : t('everyDay'),
      crosses ? h('span.muted', ` (${t('crossesMidnight')})`) : null, ' ', del);
  }

  function appsBox() {
    const groups = catalog.categories.map((c) => {
      const ckey = `BLOCK:CATEGORY:${c}`;
      const cbox = h('input', { type: 'checkbox', id: `block-cat-${c}`, checked: pol.rules[ckey] === '1' });
      cbox.addEventListener('change', () => apply(cbox.checked ? { set: { [ckey]: '1' } } : { remove: [ckey] }, 'apps'));
      const apps = catalog.apps.filter((a) => a.category === c).map((a) => {
        const key = `BLOCK:APP:${a.id}`;
        const idAttr = `block-app-${a.id.replace(/[^\w-]/g, '_')}`;
        const box = h('input', { type: 'checkbox', id: idAttr, checked: pol.rules[key] === '1' });
        box.addEventListener('change', () => apply(box.checked ? { set: { [key]: '1' } } : { remove: [key] }, 'apps'));
        // A blocked app (its own block or its category's) can be allowed for 30 minutes.
        const blocked = pol.rules[key] === '1' || pol.rules[ckey] === '1';
        const allow = blocked ? h('button.small', { type: 'button', id: `allow-${idAttr}`, 'aria-label': `${appName(a, a.id)}: ${t('allowAppNow')}`,
          onclick: (e) => { e.currentTarget.disabled = true; grant('APP', 'apps', a.id); } }, t('allowAppNow')) : null;
        return h('li', box, h('label', { for: idAttr }, a.icon ? h('span.app-icon', { 'aria-hidden': 'true' }, a.icon) : null, appName(a, a.id)), allow ? ' ' : null, allow);
      });
      return h('fieldset.apps', h('legend', t(`cat.${c}`)),
        h('div.row', cbox, h('label', { for: `block-cat-${c}` }, t('blockCategory', { cat: t(`cat.${c}`) }))),
        h('details', { open: apps.some((li) => li.firstChild.checked) },
          h('summary', t('appsIn', { cat: t(`cat.${c}`), n: apps.length })), h('ul.applist', apps)));
    });
    return h('section.card#apps', h('h3', t('appsTitle')), exceptionsList('APP', 'apps'), cardNote('apps'), groups);
  }

  // budgetsBox is the apps' daily data budgets ("유튜브 하루 500 MB",
  // LIMIT:DATA:APP:<appId>): each by the app's name from the catalog, with
  // a way to remove it; a new one is chosen by name and amount.
  function budgetsBox() {
    const prefix = 'LIMIT:DATA:APP:';
    const slug = (id) => id.replace(/[^\w-]/g, '_');
    const rows = Object.keys(pol.rules).filter((k) => k.startsWith(prefix)).sort().map((k) => {
      const appId = k.slice(prefix.length);
      const name = appName(catalog.apps.find((a) => a.id === appId));
      const del = h('button.small', { type: 'button', id: `budget-remove-${slug(appId)}`, 'aria-label': `${t('remove')}: ${name}` }, t('remove'));
      del.addEventListener('click', () => apply({ remove: [k] }, 'budgets'));
      return h('li', { id: `budget-${slug(appId)}` }, t('budgetRow', { app: name, amount: fmtBytes(Number(pol.rules[k])) }), ' ', del);
    });
    const app = h('select#budget-app', catalog.apps.map((a) => h('option', { value: a.id }, appName(a))));
    const amount = h('select#budget-amount', [100, 200, 500, 1024, 2048].map((mb) => h('option', { value: String(mb * MB) }, fmtBytes(mb * MB))));
    amount.value = String(500 * MB);
    const form = h('form.row.wrap#budget-form', h('label', { for: 'budget-app' }, t('budgetApp')), app,
      h('label', { for: 'budget-amount' }, t('budgetAmount')), amount, h('button.primary#budget-set', { type: 'submit' }, t('budgetSet')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      apply({ set: { [prefix + app.value]: amount.value } }, 'budgets');
    });
    return h('section.card#budgets', h('h3', t('budgetsTitle')), h('p.muted', t('budgetsHint')),
      rows.length ? h('ul#budget-list', rows) : h('p.muted#budget-list', t('budgetsNone')), cardNote('budgets'), form);
  }

  // resetBox sets a child's forgotten password (owners reset MEMBERs'; an
  // owner's is reset by the back office); the child's sessions all end.
  function resetBox() {
    const m = (state.dash || d).members.find((x) => x.customerId === id);
    if (!m || m.role !== 'MEMBER' || id === s.memberId) return null;
    const pw = h('input#reset-password', { type: 'password', autocomplete: 'new-password', required: true, minLength: 8, maxLength: 128, 'aria-describedby': 'reset-hint' });
    const msg = h('p#reset-status', { role: 'status' });
    const btn = h('button.primary#reset-submit', { type: 'submit' }, t('resetBtn'));
    const form = h('form.card#reset-form', h('h3', t('resetTitle')),
      h('label', { for: 'reset-password' }, t('resetFor', { name: m.name })), pw, h('p.muted#reset-hint', t('pwHint')), btn, msg);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      msg.textContent = ''; msg.className = '';
      btn.disabled = true;
      try {
        await api.resetPassword(fam, id, pw.value);
        pw.value = '';
        msg.textContent = t('resetDone', { name: m.name });
      } catch (err) {
        msg.textContent = passwordText(err); msg.className = 'error';
      }
      btn.disabled = false;
    });
    return form;
  }

  function thresholdsBox() {
    const input = h('input#thresholds', { value: (d.pool.thresholds || []).join(','), inputMode: 'numeric', 'aria-describedby': 'thresholds-hint' });
    // Checked in the app's own words, not the browser's bubble (#38).
    const form = h('form.card#thresholds-form', { novalidate: true }, h('h3', t('thresholdsTitle')),
      h('label', { for: 'thresholds' }, t('thresholdsTitle')), input, h('p.muted#thresholds-hint', t('thresholdsHint')),
      h('button.primary', { type: 'submit' }, t('save')));
    // Another parent's new alert levels, unless this parent changed the box.
    let stored = input.value;
    track(on('dashboard', (dd) => {
      const now = (dd?.pool?.thresholds || []).join(',');
      if (now === stored) return;
      if (input.value === stored && document.activeElement !== input) input.value = now;
      stored = now;
    }));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const parts = input.value.split(',').map((x) => x.trim()).filter(Boolean);
      if (parts.some((x) => !/^\d{1,2}$/.test(x) || Number(x) < 1)) { toast(t('err.thresholds'), 'error'); input.focus(); return; }
      const list = parts.map(Number);
      try { await api.setAlerts(fam, list); toast(t('applied')); refreshDashboard().catch(() => {}); } catch (err) { toast(errorText(err), 'error'); }
    });
    return form;
  }

  // topupBox offers the operator's top-ups with their prices (VAT
  // included, billed to the phone bill) and asks before it buys one (a
  // carrier app's "데이터 충전"); what was bought has a receipt, and the
  // month's top-ups and gifts are a tap away.
  function topupBox() {
    const offers = catalog.topUpOffers || [];
    const won = (n) => n.toLocaleString(locale());
    const done = h('p.card-note#topup-note', { role: 'status' });
    const box = h('section.card#topup', h('h3', t('topupTitle')));
    const btns = offers.map((o) => {
      const what = { bytes: fmtBytes(o.bytes), price: won(o.priceKrw) };
      const b = h('button', { type: 'button', id: `topup-${Math.round(o.bytes / MB)}`, 'data-offer': o.id },
        h('strong', fmtBytes(o.bytes)), h('span.price', o.priceKrw ? t('priceWon', what) : t('free')),
        o.vatKrw ? h('span.price.muted', t('topupVat', { vat: won(o.vatKrw) })) : null);
      b.addEventListener('click', () => confirmed(box, t('topupConfirm', what), t('topupYes'), async () => {
        try {
          const tu = await api.topUp(fam, o.id);
          done.className = 'card-note';
          done.replaceChildren(t('toppedUpPaid', what), ' ', h('a#topup-receipt', { href: `#/receipt/${tu.id}` }, t('seeReceipt')));
          refreshDashboard().catch(() => {});
        } catch (e) { done.className = 'card-note error'; done.textContent = errorText(e); }
      }, 'primary'));
      return b;
    });
    box.append(btns.length ? h('div.row.offers', btns) : h('p.muted', t('noOffers')), done,
      h('p', h('a#topup-history', { href: '#/history' }, t('historyLink'))));
    return box;
  }

  function membersBox() {
    const list = h('ul.memberlist#member-admin');
    const box = h('section.card#members-admin', h('h3', t('membersTitle')), list);
    async function load() {
      const ms = (await api.members(fam)).members || [];
      list.replaceChildren(...ms.map((m) => {
        const role = h('select', { id: `role-${m.customerId}`, 'aria-label': `${t('role')}: ${m.name}` },
          ['MEMBER', 'OWNER'].map((r) => h('option', { value: r, selected: m.role === r }, r === 'OWNER' ? t('owner') : t('member'))));
        role.addEventListener('change', async () => {
          try { await api.setRole(fam, m.customerId, role.value); toast(t('applied')); } catch (e) { toast(errorText(e), 'error'); }
          load(); refreshDashboard().catch(() => {});
        });
        const del = h('button.small.danger', { type: 'button', id: `remove-${m.customerId}`, 'aria-label': `${t('remove')}: ${m.name}` }, t('remove'));
        // Asked inside the card, not with the browser's dialog (#38).
        del.addEventListener('click', () => confirmed(box, t('removeConfirm', { name: m.name }), t('remove'), async () => {
          try { await api.removeMember(fam, m.customerId); added.textContent = t('memberRemoved', { name: m.name }); } catch (e) { toast(errorText(e), 'error'); }
          load(); refreshDashboard().catch(() => {});
        }));
        // Under 19: under the carriers' gift rules a minor only receives.
        const minorId = `minor-${m.customerId}`;
        const minor = m.role === 'MEMBER' ? h('input', { type: 'checkbox', id: minorId, checked: !!m.minor }) : null;
        minor?.addEventListener('change', async () => {
          try { await api.setMinor(fam, m.customerId, minor.checked); toast(t('applied')); } catch (e) { toast(errorText(e), 'error'); }
          load(); refreshDashboard().catch(() => {});
        });
        return h('li', h('span', m.name), role, minor ? h('label.minor', { for: minorId }, minor, t('minorLabel')) : null,
          m.customerId === s.memberId ? null : del);
      }));
    }
    const name = h('input#new-name', { required: true, maxLength: 100, autocomplete: 'off' });
    const pw = h('input#new-password', { type: 'password', maxLength: 128, autocomplete: 'new-password' });
    const role = h('select#new-role', ['MEMBER', 'OWNER'].map((r) => h('option', { value: r }, r === 'OWNER' ? t('owner') : t('member'))));
    // The new member's login number is said where it was added (#38: it was
    // shown nowhere): owners cannot set phones, so the number is the login.
    const added = h('p.card-note#add-member-note', { role: 'status' });
    const form = h('form#add-member', h('h4', t('addMember')),
      h('label', { for: 'new-name' }, t('name')), name,
      h('label', { for: 'new-password' }, t('password')), pw, h('p.muted#new-password-hint', t('newPasswordHint')),
      h('label', { for: 'new-role' }, t('role')), role, h('button.primary', { type: 'submit' }, t('add')), added);
    pw.setAttribute('aria-describedby', 'new-password-hint');
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      added.className = 'card-note';
      try {
        const m = await api.addMember(fam, { name: name.value.trim(), password: pw.value || undefined, role: role.value });
        added.textContent = t(pw.value ? 'memberAdded' : 'memberAddedNoPassword', { name: m.name, id: m.customerId });
        added.dataset.login = String(m.customerId);
        name.value = ''; pw.value = '';
      } catch (err) { added.className = 'card-note error'; added.textContent = err.status === 422 && err.problem?.errors?.[0]?.location === 'body.password' ? passwordText(err) : errorText(err); }
      load(); refreshDashboard().catch(() => {});
    });
    box.append(form);
    load().catch((e) => list.append(h('li.error', errorText(e))));
    // Another parent added, removed or promoted a member: list them again.
    track(on('family', (c) => { if (['MEMBER', 'REMOVED', 'ROLE'].includes(c.change)) load().catch(() => {}); }));
    return box;
  }

  renderMember();
  // Opened to top up (a low-data alert's button): the offers, in view.
  if (focus === 'topup') {
    const box = document.getElementById('topup');
    box?.scrollIntoView({ block: 'start' });
    box?.querySelector('button')?.focus({ preventScroll: true });
  }
}
