// appblock.js: one blocked app, as the child sees it (#/app/<appId>) —
// whether it can be used now and until when, why not (its block, or its
// daily data budget used up: "유튜브 하루 500 MB 다 썼어요"), whom to ask,
// and a request for more minutes on it with a message ("30분 더", kind APP).
// Reached from the child's list of blocked apps and from a block screen
// that names an app; live: an approval shows at once.
import * as api from './api.js';
import { t, appName } from './i18n.js';
import { h, fmtTime, fmtBytes, errorText } from './util.js';
import { state, on, refreshDashboard, refreshRequests, loadCatalog } from './store.js';
import { track } from './ui.js';

const stampClock = (s) => (s && s.length === 12 ? `${s.slice(8, 10)}:${s.slice(10, 12)}` : '');

export async function appBlockView(root, [raw]) {
  const s = api.currentSession();
  const id = decodeURIComponent(raw || '');
  const catalog = await loadCatalog().catch(() => ({ apps: [] }));
  const app = (catalog.apps || []).find((a) => a.id === id);
  const name = appName(app, id);
  const head = h('h2#app-block-h');
  const facts = h('dl.facts#app-block-facts');
  const box = h('section.card.block#app-block', { 'aria-labelledby': 'app-block-h' }, head, facts, h('p.muted', t('appOthersWork')),
    h('p', h('a', { href: '#/dashboard' }, t('backHome'))));

  const minutes = h('select#app-ask-minutes', [15, 30, 60].map((n) => h('option', { value: String(n) }, t('minutes', { n }))));
  minutes.value = '30';
  const msg = h('textarea#app-ask-message', { maxLength: 200, rows: 2 });
  const status = h('p#app-ask-status', { role: 'status' });
  const pending = h('ul.requests#app-requests');
  const send = h('button.primary#app-ask-send', { type: 'submit' }, t('appAskSend'));
  const form = h('form.card#app-ask', { 'aria-labelledby': 'app-ask-h' },
    h('h3#app-ask-h', t('appAskTitle', { app: name })),
    h('label', { for: 'app-ask-minutes' }, t('timeAskMinutes')), minutes,
    h('label', { for: 'app-ask-message' }, t('askMessage')), msg, send, status,
    h('h4', t('askPending')), pending);
  root.append(box, form);

  let pol = { rules: {}, exceptions: [], version: -1 };
  // used is today's allowed use of the app and of its category (GET
  // …/usage?period=day), for their daily budgets.
  let used = { app: 0, cat: 0 };
  async function readPolicy() {
    try { pol = await api.policies(s.familyId, s.memberId); } catch { /* the dashboard still says whom to ask */ }
    const cat = app?.category;
    if (pol.rules[`LIMIT:DATA:APP:${id}`] === undefined && (!cat || pol.rules[`LIMIT:DATA:CATEGORY:${cat}`] === undefined)) return;
    try {
      const u = await api.usage(s.familyId, s.memberId, 'day');
      const catOf = new Map((catalog.apps || []).map((a) => [a.id, a.category]));
      used = { app: 0, cat: 0 };
      for (const a of u.byApp || []) {
        if (a.appId === id) used.app += a.allowedBytes;
        if (cat && catOf.get(a.appId) === cat) used.cat += a.allowedBytes;
      }
    } catch { /* the budget is still said */ }
  }

  function render() {
    const d = state.dash;
    const owners = (d?.members || []).filter((m) => m.role === 'OWNER').map((m) => m.name);
    const byApp = pol.rules[`BLOCK:APP:${id}`] === '1';
    const cat = app?.category;
    const byCat = !!cat && pol.rules[`BLOCK:CATEGORY:${cat}`] === '1';
    const x = (pol.exceptions || []).find((e) => e.kind === 'APP' && e.appId === id);
    // A daily budget (the app's, else its category's): used up, the app
    // is blocked until midnight and more time may be asked for.
    const ab = pol.rules[`LIMIT:DATA:APP:${id}`];
    const cb = cat ? pol.rules[`LIMIT:DATA:CATEGORY:${cat}`] : undefined;
    const budget = ab !== undefined ? { amount: Number(ab), used: used.app } : cb !== undefined ? { amount: Number(cb), used: used.cat, cat } : null;
    const usedUp = !!budget && budget.used >= budget.amount;
    const blocked = byApp || byCat || usedUp;
    form.hidden = !(blocked || budget) || !!x;
    if (x) head.textContent = t('appAllowedNow', { app: name, time: stampClock(x.until) });
    else if (byApp || byCat) head.textContent = t('appBlockTitle', { app: name });
    else if (usedUp) head.textContent = t('appBudgetUsedUp', { app: name, amount: fmtBytes(budget.amount) });
    else if (budget) head.textContent = t('appBudgetLeft', { app: name, amount: fmtBytes(budget.amount) });
    else head.textContent = t('appNotBlocked', { app: name });
    const why = byApp ? t('appWhyApp') : byCat ? t('appWhyCategory', { cat: t(`cat.${cat}`) })
      : budget?.cat ? t('appWhyCatBudget', { cat: t(`cat.${cat}`), amount: fmtBytes(budget.amount), used: fmtBytes(budget.used) })
        : budget ? t('appWhyBudget', { amount: fmtBytes(budget.amount), used: fmtBytes(budget.used) }) : '';
    const until = x ? t('appUntil', { time: stampClock(x.until) }) : byApp || byCat ? t('until.owner') : t('appBudgetUntil');
    facts.replaceChildren(...(blocked || budget ? [
      h('dt', t('why')), h('dd#app-block-why', { 'data-budget': budget ? String(budget.amount) : null }, why),
      ...(blocked ? [h('dt', t('until')), h('dd', until), h('dt', t('whoToAsk')), h('dd', owners.join(', '))] : []),
    ] : []));
  }

  let key = api.uuid(); // one key per request the child means to send
  let sent = null;
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    send.disabled = true;
    try {
      const r = await api.createTimeRequest(s.familyId, 'APP', Number(minutes.value), id, msg.value.trim(), key);
      key = api.uuid();
      sent = r?.id ?? null;
      status.textContent = t('askSent');
      msg.value = '';
      refreshRequests().catch(() => {});
    } catch (err) {
      status.textContent = t('askFailed', { msg: errorText(err) });
    } finally { send.disabled = false; }
  });

  const renderMine = (items) => {
    if (!Array.isArray(items)) return;
    const mine = items.filter((r) => r.customerId === s.memberId && r.kind === 'APP' && r.appId === id);
    if (sent != null && !mine.some((r) => r.id === sent)) {
      const rid = sent;
      sent = null;
      api.dataRequest(s.familyId, rid).then((r) => {
        status.textContent = r.status === 'APPROVED' && r.until ? t('timeApproved', { time: stampClock(r.until) })
          : r.status === 'DECLINED' ? t('askDeclined') : status.textContent;
      }).catch(() => {});
    }
    pending.replaceChildren(...(mine.length
      ? mine.map((r) => h('li', { id: `app-request-${r.id}` }, `${t('reqApp', { app: name, n: r.minutes })} · ${fmtTime(r.createdAt)}`, r.message ? h('q', r.message) : null))
      : [h('li.muted', t('noRequests'))]));
  };

  // A parent's answer or change arrives live: the policy is read again
  // when its version moves.
  track(on('dashboard', (d) => {
    const self = d?.members?.find((m) => m.customerId === s.memberId);
    if (self && self.policyVersion !== pol.version) readPolicy().then(render);
    else render();
  }));
  track(on('requests', renderMine));
  await readPolicy();
  render();
  renderMine(state.requests);
  refreshRequests().catch(() => {});
  await refreshDashboard();
}
