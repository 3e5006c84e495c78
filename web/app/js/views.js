// views.js: the family dashboard, the block screen (with "ask for more"),
// usage detail and the notification centre.
import * as api from './api.js';
import { t, appName, locale } from './i18n.js';
import { h, fmtBytes, fmtTime, fmtClock, parseWindow, reasonText, untilText, MB, errorText } from './util.js';
import { chartBox, gauge, shareBars } from './charts.js';
import { state, on, refreshDashboard, refreshRequests, refreshUnread, loadCatalog, emit } from './store.js';
import { toast, go, track } from './ui.js';

const me = () => api.currentSession();
const isOwner = () => me()?.role !== 'MEMBER';
const myCard = (d) => d?.members?.find((m) => m.customerId === me().memberId);

// ---------------------------------------------------------------- dashboard

export async function dashboardView(root) {
  const poolBox = h('section.card.pool#pool', { 'aria-labelledby': 'pool-h' });
  const reqBox = h('section.card#requests', { 'aria-labelledby': 'requests-h', hidden: true });
  const shareBox = h('section.card#share', { 'aria-labelledby': 'share-h' });
  const giftBox = h('section.card#gift', { 'aria-labelledby': 'gift-h', hidden: true });
  const list = h('ul.members#members', { 'aria-labelledby': 'members-h' });
  const stamp = h('p.muted#dash-updated');
  // A member sees what is restricted for it while it is allowed (#24).
  const rulesBox = isOwner() ? null : h('section.card#my-rules', { 'aria-labelledby': 'my-rules-h' });
  // (append writes a null as the text "null": an owner has no rules box.)
  root.append(...[h('h2.sr-only', t('navDashboard')), poolBox, reqBox, rulesBox, giftBox, shareBox,
    h('section.card', h('h3#members-h', t('members')), list, stamp)].filter(Boolean));
  let rulesVersion = -1;
  // nextLine says when the member's next downtime begins; kept across
  // redraws of the rules and updated with every dashboard.
  const nextLine = h('p.muted#next-downtime');

  // renderRules lists the member's own restrictions: time windows, blocked
  // categories and apps, an instant block; read again when its policy
  // version moves.
  async function renderRules(self) {
    if (!rulesBox || !self || self.policyVersion === rulesVersion) return;
    rulesVersion = self.policyVersion;
    let rules;
    let exceptions = [];
    try { ({ rules, exceptions = [] } = await api.policies(me().familyId, me().memberId)); } catch { rulesVersion = -1; return; }
    const catalog = await loadCatalog().catch(() => ({ apps: [] }));
    const appOf = new Map((catalog.apps || []).map((a) => [a.id, a]));
    const items = [];
    const days = (ds) => (ds.length ? ds.map((x) => t(`day.${x}`)).join(' ') : t('everyDay'));
    if (rules['BLOCK:TIME:START'] !== undefined) {
      const st = rules['BLOCK:TIME:START'];
      items.push(t('ruleWindow', { name: t('defaultWindow'), from: fmtClock(st), to: fmtClock(rules['BLOCK:TIME:END'] || st), days: t('everyDay') }));
    }
    for (const [k, v] of Object.entries(rules)) {
      const m = /^BLOCK:TIME:(.+)$/.exec(k);
      const w = m && m[1] !== 'START' && m[1] !== 'END' ? parseWindow(v) : null;
      if (w) items.push(t('ruleWindow', { name: m[1], from: fmtClock(w.start), to: fmtClock(w.end), days: days(w.days) }));
    }
    const cats = Object.keys(rules).filter((k) => k.startsWith('BLOCK:CATEGORY:')).map((k) => t(`cat.${k.slice(15)}`));
    if (cats.length) items.push(t('ruleCategories', { list: cats.join(', ') }));
    const allowed = [...Object.keys(rules).filter((k) => k.startsWith('ALLOW:CATEGORY:')).map((k) => t(`cat.${k.slice(15)}`)),
      ...Object.keys(rules).filter((k) => k.startsWith('ALLOW:APP:')).map((k) => appName(appOf.get(k.slice(10)), k.slice(10)))];
    if (allowed.length) items.push(t('ruleAllowed', { list: allowed.join(', ') }));
    // Each blocked app once: allowed for a while (an approved "30분 더"),
    // or with a way to its own screen to ask for time.
    const appIds = Object.keys(rules).filter((k) => k.startsWith('BLOCK:APP:')).map((k) => k.slice(10));
    const appException = (id) => exceptions.find((x) => x.kind === 'APP' && x.appId === id);
    if (appIds.length) {
      items.push(h('span', t('ruleApps', { list: '' }), h('ul.ask-apps', appIds.map((id) => {
        const name = appName(appOf.get(id), id);
        const x = appException(id);
        if (x) return h('li', { id: `my-app-${safeId(id)}` }, t('exceptionApp', { app: name, time: stampClock(x.until) }));
        const a = h('a.button.small', { href: `#/app/${encodeURIComponent(id)}`, id: `ask-app-${safeId(id)}`, 'aria-label': `${name}: ${t('askAppMore')}` }, t('askAppMore'));
        return h('li', { id: `my-app-${safeId(id)}` }, name, ' ', a);
      }))));
    }
    // Each app's daily data budget, with a way to its own screen (how
    // much is left; asking for more once used up).
    for (const k of Object.keys(rules).filter((x) => x.startsWith('LIMIT:DATA:APP:')).sort()) {
      const id = k.slice(15);
      const name = appName(appOf.get(id), id);
      items.push(h('a', { href: `#/app/${encodeURIComponent(id)}`, id: `my-budget-${safeId(id)}` }, t('myBudget', { app: name, amount: fmtBytes(Number(rules[k])) })));
    }
    // Exceptions end at a time of the service zone, as the windows are set;
    // an app's is said beside the app above.
    const excepted = exceptions.filter((x) => !(x.kind === 'APP' && appIds.includes(x.appId))).map((x) => h('li.exception', { id: `my-exception-${x.kind}` },
      x.kind === 'TIME' ? t('exceptionTime', { time: stampClock(x.until) }) : t('exceptionApp', { app: appName(appOf.get(x.appId), x.appId), time: stampClock(x.until) })));
    rulesBox.replaceChildren(...[h('h3#my-rules-h', t('myRules')),
      items.length ? h('ul#my-rules-list', items.map((x) => h('li', x))) : h('p.muted', t('noRules')),
      excepted.length ? h('ul#my-exceptions', { 'aria-label': t('exceptionsTitle') }, excepted) : null, nextLine].filter(Boolean));
  }

  function render(d) {
    if (!d) return;
    const self = myCard(d);
    if (self && self.status === 'BLOCKED' && me().role === 'MEMBER' && !state.offline) { go('#/block'); return; }
    const p = d.pool;
    const remPct = p.totalBytes > 0 ? (100 * p.remainingBytes) / p.totalBytes : 0;
    poolBox.replaceChildren(...[
      h('h3#pool-h', t('poolRemaining')),
      d.provisioned ? gauge(remPct, t('poolRemaining'), fmtBytes(p.remainingBytes))
        : h('p.error', t('noPool')),
      h('p.pool-detail', h('span#pool-remaining', { 'data-bytes': String(p.remainingBytes) }, t('poolOf', { remaining: fmtBytes(p.remainingBytes), total: fmtBytes(p.totalBytes) })),
        ' · ', t('usedPct', { pct: p.usedPercent.toFixed(1) }),
        p.topUpBytes ? ` · ${t('topUps', { bytes: fmtBytes(p.topUpBytes) })}` : ''),
      p.reservedBytes > 0 ? h('p#pool-reserved.muted', { 'data-bytes': String(p.reservedBytes) }, t('poolReserved', { bytes: fmtBytes(p.reservedBytes) })) : null,
      lowPool(d, remPct),
      h('p', h('a#pool-history', { href: '#/history' }, t('historyLink'))),
    ].filter(Boolean));
    // Each member's share as bars: no chart library on the first screen.
    shareBox.replaceChildren(h('h3#share-h.sr-only', t('shareTitle')),
      shareBars(t('shareTitle'), d.members.map((m) => m.name), d.members.map((m) => m.monthlyUsedBytes)));
    list.replaceChildren(...d.members.map((m) => memberCard(m)));
    renderGift(d);
    stamp.textContent = t('updatedAt', { time: clockOf(state.dashAt) });
    renderRules(self).catch(() => {});
    const next = self?.nextDowntime;
    nextLine.hidden = !next;
    if (next) {
      const name = next.rule === 'BLOCK:TIME:START' ? t('defaultWindow') : next.rule.slice('BLOCK:TIME:'.length);
      // The service zone's weekday and time, as the windows are set.
      const l = next.local;
      const wd = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'][new Date(Date.UTC(+l.slice(0, 4), +l.slice(4, 6) - 1, +l.slice(6, 8))).getUTCDay()];
      const when = `${t(`day.${wd}`)} ${stampClock(l)}`;
      nextLine.textContent = t('nextDowntime', { name, time: when });
    }
    // The first render after the page loaded: measured by the browser tests.
    if (!performance.getEntriesByName('dpcs-dashboard').length) performance.mark('dpcs-dashboard');
  }

  function memberCard(m) {
    const blocked = m.status === 'BLOCKED';
    const mine = m.customerId === me().memberId;
    return h(`li.member${blocked ? '.is-blocked' : ''}`, { id: `member-${m.customerId}`, 'data-status': m.status, 'data-decision': m.decision },
      h('div.member-head',
        h('strong', m.name, mine ? ` (${t('you')})` : ''),
        h('span.role', m.role === 'OWNER' ? t('owner') : t('member')),
        h(`span.badge-status.${blocked ? 'st-blocked' : 'st-ok'}`, blocked ? t('blocked') : t('allowed'))),
      blocked ? h('p.reason', { id: `reason-${m.customerId}` }, reasonText(m, state.catalog)) : null,
      h('p.muted', `${t('thisMonth', { bytes: fmtBytes(m.monthlyUsedBytes) })} · ${t('today', { bytes: fmtBytes(m.dailyUsedBytes) })} · ${m.sharePercent.toFixed(1)}%`),
      m.reservedBytes > 0 ? h('p.muted.reserved', { id: `reserved-${m.customerId}` }, t('memberReserved', { bytes: fmtBytes(m.reservedBytes) })) : null,
      limitsLine(m),
      h('p.links',
        (isOwner() || mine) ? h('a', { href: `#/usage/${m.customerId}` }, t('navUsage')) : null,
        isOwner() ? h('a', { href: `#/controls/${m.customerId}`, id: `controls-link-${m.customerId}` }, t('navControls')) : null,
        mine && blocked ? h('a', { href: '#/block' }, t('askMore')) : null));
  }

  // limitsLine says what is left of the member's limits: "오늘 32 MB 남음 /
  // 50 MB" — never more than the family pool has (todayLeftBytes is the
  // smallest of the limits' and the pool's) — and an extra approved for
  // today apart from the month's figure.
  function limitsLine(m) {
    const parts = [];
    const pool = Math.max(0, state.dash?.pool?.remainingBytes ?? Infinity);
    const today = m.todayLeftBytes ?? Math.min(pool, Math.max(0, (m.dailyLimitBytes ?? Infinity) - m.dailyUsedBytes));
    if (m.dailyLimitBytes != null) parts.push(t('leftToday', { left: fmtBytes(today), limit: fmtBytes(m.dailyLimitBytes) }));
    else if (m.todayExtraBytes) parts.push(t('leftTodayOnly', { left: fmtBytes(today) }));
    if (m.monthlyLimitBytes != null) {
      parts.push(t('leftMonth', { left: fmtBytes(Math.min(pool, Math.max(0, m.monthlyLimitBytes - m.monthlyUsedBytes))), limit: fmtBytes(m.monthlyLimitBytes) }));
    }
    if (m.todayExtraBytes) parts.push(t('todayExtra', { bytes: fmtBytes(m.todayExtraBytes) }));
    return parts.length ? h('p.limits', { id: `limits-${m.customerId}` }, parts.join(' · ')) : null;
  }

  // renderGift is "데이터 선물하기": a member with a monthly limit gives part
  // of what it has left this month to another member with a limit; an
  // owner gives any such member's. The operator's rules (GET /catalog
  // giftRules: steps, the most per gift, what the giver keeps, minors only
  // receive) shape the amounts offered, and a refusal says its rule in the
  // viewer's words. Drawn once per family shape, so a live update does not
  // wipe what is being typed.
  let giftKey = '';
  let giftLeft = null; // says what the chosen giver can give; again with every dashboard
  function renderGift(d) {
    const rules = state.catalog?.giftRules || null;
    const minorsOnly = rules && !rules.minorsGive;
    const mine = myCard(d);
    const givers = d.members.filter((m) => m.monthlyLimitBytes != null && (isOwner() || m.customerId === me().memberId) && !(minorsOnly && m.minor));
    const receivers = d.members.filter((m) => m.monthlyLimitBytes != null);
    const key = JSON.stringify([givers.map((m) => m.customerId), receivers.map((m) => m.customerId), !!rules]);
    if (minorsOnly && mine?.minor && !isOwner()) {
      // A minor is told why it has no way to give, instead of no card.
      if (giftKey !== 'minor') {
        giftKey = 'minor';
        giftBox.hidden = false;
        giftBox.replaceChildren(h('h3#gift-h', t('giftTitle')), h('p.muted#gift-minor', t('giftMinorNote')));
      }
      return;
    }
    if (!givers.length || receivers.length < 2) { giftBox.hidden = true; giftKey = ''; return; }
    if (key === giftKey) { giftLeft?.(); return; }
    giftKey = key;
    giftBox.hidden = false;
    // What the giver can give: what it has left this month less what it
    // keeps, at most one gift's worth (the server judges; this shapes the
    // choices).
    const canGive = (id) => {
      const m = state.dash?.members.find((x) => x.customerId === id);
      if (!m) return 0;
      const left = Math.max(0, m.monthlyLimitBytes - m.monthlyUsedBytes - (rules?.giverFloorBytes || 0));
      return rules?.maxBytes ? Math.min(left, rules.maxBytes) : left;
    };
    const from = h('select#gift-from', { disabled: givers.length === 1 }, givers.map((m) => h('option', { value: String(m.customerId) }, m.name)));
    const to = h('select#gift-to');
    const fillTo = () => to.replaceChildren(...receivers.filter((m) => String(m.customerId) !== from.value)
      .map((m) => h('option', { value: String(m.customerId) }, m.name)));
    fillTo();
    // The amounts: every step up to the most a gift moves (and that most
    // itself, e.g. 100 MB … 1,000 MB and 1 GB), else a few round ones.
    const step = rules?.stepBytes || 0;
    const most = rules?.maxBytes || 0;
    let amounts = [50, 100, 200, 500, 1024].map((mb) => mb * MB);
    if (step && most) {
      amounts = [];
      for (let b = step; b <= most && amounts.length < 20; b += step) amounts.push(b);
      if (!amounts.includes(most)) amounts.push(most);
    }
    const amount = h('select#gift-amount', amounts.map((b) => h('option', { value: String(b) }, fmtBytes(b))));
    amount.value = String(amounts[0]);
    const hint = h('p.muted#gift-left');
    const ruleHint = rules && step && most
      ? h('p.muted.gift-hint#gift-rules', t('giftRulesHint', { step: fmtBytes(step), max: fmtBytes(most), floor: fmtBytes(rules.giverFloorBytes || 0) }))
      : null;
    const showLeft = () => {
      const can = canGive(Number(from.value));
      hint.textContent = can > 0 ? t('giftCanGive', { bytes: fmtBytes(can) }) : t('giftNoneLeft');
      for (const o of amount.options) o.disabled = Number(o.value) > can;
    };
    giftLeft = showLeft;
    showLeft();
    from.addEventListener('change', () => { fillTo(); showLeft(); });
    const out = h('p.card-note#gift-note', { role: 'status' });
    const send = h('button.primary#gift-send', { type: 'button' }, t('giftSend'));
    send.addEventListener('click', () => {
      const name = (sel) => sel.options[sel.selectedIndex]?.textContent || '';
      const what = { to: name(to), from: name(from), bytes: fmtBytes(Number(amount.value)) };
      // Whose limit it comes out of: mine, or (an owner giving for a
      // child) the giver's, named (#38).
      const question = Number(from.value) === me().memberId ? t('giftConfirm', what) : t('giftConfirmFrom', what);
      giftBox.querySelector('.confirm')?.remove();
      const yes = h('button.primary.confirm-yes', { type: 'button' }, t('giftYes'));
      const no = h('button.confirm-no', { type: 'button' }, t('cancel'));
      const q = h('div.confirm', { role: 'alertdialog', 'aria-label': question }, h('p', question), yes, no);
      no.addEventListener('click', () => q.remove());
      yes.addEventListener('click', async () => {
        q.remove();
        send.disabled = true;
        try {
          const g = await api.giveData(me().familyId, Number(from.value), Number(to.value), Number(amount.value));
          out.className = 'card-note';
          out.replaceChildren(t('giftDone', { ...what, left: fmtBytes(g.giverLeftBytes) }),
            g.giftsLeft >= 0 ? ` · ${t('giftTimesLeft', { n: g.giftsLeft })}` : '');
          out.dataset.rule = '';
          refreshDashboard().catch(() => {});
        } catch (e) {
          out.className = 'card-note error';
          out.dataset.rule = e.problem?.rule || '';
          out.textContent = giftErrorText(e, rules);
        }
        send.disabled = false;
      });
      giftBox.append(q);
      yes.focus();
    });
    giftBox.replaceChildren(...[h('h3#gift-h', t('giftTitle')),
      h('div.row', h('label', { for: 'gift-from' }, t('giftFrom')), from),
      h('div.row', h('label', { for: 'gift-to' }, t('giftTo')), to),
      h('div.row', h('label', { for: 'gift-amount' }, t('giftAmount')), amount), hint, ruleHint, send, out,
      h('p', h('a#gift-history', { href: '#/history' }, t('historyLink')))].filter(Boolean));
  }

  function renderRequests(items) {
    if (!isOwner() || !items || !items.length) { reqBox.hidden = true; reqBox.replaceChildren(); return; }
    reqBox.hidden = false;
    const names = new Map((state.dash?.members || []).map((m) => [m.customerId, m.name]));
    reqBox.replaceChildren(h('h3#requests-h', t('requestsTitle')),
      h('ul.requests', items.map((r) => requestItem(r, names.get(r.customerId) || String(r.customerId)))));
  }

  function requestItem(r, name) {
    return h('li.request', { id: `request-${r.id}`, 'data-customer': String(r.customerId), 'data-kind': r.kind || 'DATA' },
      h('p', h('strong', t('requestFrom', { name, bytes: requestWhat(r) })), r.message ? h('q', r.message) : null,
        h('span.muted', ` ${fmtTime(r.createdAt)}`)),
      requestActions(r));
  }


  track(on('dashboard', render));
  track(on('requests', renderRequests));
  if (state.dash) render(state.dash);
  else poolBox.append(h('p', t('loading')));
  renderRequests(state.requests);
  // Requests for an app's time name the app: the catalog says how.
  // The catalog names requests' apps, prices top-ups and says the gift rules.
  loadCatalog().then(() => { renderRequests(state.requests); if (state.dash) render(state.dash); }).catch(() => {});
  await refreshDashboard();
  if (isOwner()) refreshRequests().catch(() => {});
}

// lowPool is the pool card's line once an alert level was passed this
// month (or 10 % is left): owners get a way to top up, members are told to
// ask one (only owners can top up).
function lowPool(d, remPct) {
  const fired = d.pool.fired || [];
  if (!d.provisioned || (!fired.length && remPct > 10)) return null;
  const pct = fired.length ? Math.min(...fired) : 10;
  if (!isOwner()) return h('p.low-pool#pool-low', t('thresholdMember', { pct }));
  return h('p.low-pool#pool-low', t('poolLow', { pct }), ' ', h('a.button.small.primary#pool-topup', { href: '#/controls/0/topup' }, t('topupNow')));
}

// giftErrorText says why a gift was refused: the rule the server names
// (a GiftProblem's rule and the bound it leaves), in the viewer's words.
function giftErrorText(e, rules) {
  const rule = e?.problem?.rule;
  if (!rule) return errorText(e);
  const limit = e.problem.limit || 0;
  const counted = rule === 'GIVEN_PER_MONTH' || rule === 'RECEIVED_PER_MONTH';
  return t(`giftRule.${rule}`, { limit: counted ? String(limit) : fmtBytes(limit), pct: rules?.maxSharePercent ?? 50 });
}

// topUpOffer is the offer a TOPUP approval buys for a request of bytes:
// the smallest that covers it, else the largest.
function topUpOffer(bytes) {
  const offers = [...(state.catalog?.topUpOffers || [])].sort((a, b) => a.bytes - b.bytes);
  return offers.find((o) => o.bytes >= bytes) || offers[offers.length - 1] || null;
}

// requestActions answers a pending data request: how to grant it, approve,
// decline. The dashboard and the inbox item of the request both show it
// (ids prefixed by where).
function requestActions(r, prefix = '') {
  // A TIME or APP request is granted as asked: no choice of grant.
  const timed = r.kind === 'TIME' || r.kind === 'APP';
  // A top-up buys one of the operator's offers, named with its price.
  const offer = timed ? null : topUpOffer(r.amountBytes || 0);
  const grants = ['DAY', 'MONTH', ...(offer ? ['TOPUP'] : [])];
  const sel = timed ? null : h('select', { id: `${prefix}grant-${r.id}` }, grants.map((g) => h('option', { value: g },
    g === 'TOPUP' ? t('grant.TOPUP.offer', { bytes: fmtBytes(offer.bytes), price: offer.priceKrw.toLocaleString(locale()) }) : t(`grant.${g}`))));
  const approve = h('button.primary', { type: 'button', id: `${prefix}approve-${r.id}` }, t('approve'));
  const decline = h('button', { type: 'button', id: `${prefix}decline-${r.id}` }, t('decline'));
  const fam = me().familyId;
  approve.addEventListener('click', async () => {
    approve.disabled = decline.disabled = true;
    try {
      // The amount (or the minutes) asked for; a top-up buys the offer.
      await api.approveDataRequest(fam, r.id, sel?.value, 0, sel?.value === 'TOPUP' ? offer.id : undefined);
      toast(t('approved'));
    } catch (e) { toast(errorText(e), 'error'); approve.disabled = decline.disabled = false; }
    refreshRequests().catch(() => {}); refreshDashboard().catch(() => {});
  });
  decline.addEventListener('click', async () => {
    approve.disabled = decline.disabled = true;
    try { await api.declineDataRequest(fam, r.id); toast(t('declined')); } catch (e) { toast(errorText(e), 'error'); }
    refreshRequests().catch(() => {});
  });
  return h('div.row', sel ? h('label', { for: `${prefix}grant-${r.id}` }, t('grant')) : null, sel, approve, decline);
}

// requestWhat says what a request asks for: "데이터 100 MB", "쉬는 시간에 30분 더", "유튜브 30분 더".
function requestWhat(r) {
  if (r.kind === 'TIME') return t('reqTime', { n: r.minutes });
  if (r.kind === 'APP') {
    const app = state.catalog?.apps?.find((a) => a.id === r.appId);
    return t('reqApp', { app: appName(app, r.appId), n: r.minutes });
  }
  return t('reqData', { bytes: fmtBytes(r.amountBytes) });
}

// clockOf is an instant's time of day for the viewer: "22:41".
function clockOf(at) {
  return new Date(at).toLocaleTimeString(locale(), { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
}

// safeId is an app id as a part of an element id ("com_youtube_app").
const safeId = (id) => id.replace(/[^\w-]/g, '_');

// stampClock is a local time YYYYMMDDHHMM's time of day: "22:41".
const stampClock = (s) => (s && s.length === 12 ? `${s.slice(8, 10)}:${s.slice(10, 12)}` : '');

// ---------------------------------------------------------------- block screen

export async function blockView(root) {
  const s = me();
  const body = h('div');
  // More data lifts only a data block; for a time window, an app block or
  // a parent's block the child is told to ask in person (#24: it asked for
  // data during a night window, was granted it and stayed blocked).
  // A downtime is asked about in minutes ("30분 더"), a data block in bytes.
  const notData = h('section.card#ask-not-data', { hidden: true }, h('p', t('askNotData')));
  const ask = askBox('DATA');
  const askTime = askBox('TIME');
  root.append(h('section.card.block#block', { 'aria-labelledby': 'block-h' }, h('h2#block-h', t('blockTitle')), body), ask, askTime, notData);
  let rules = null;
  let left = false;
  try { rules = (await api.policies(s.familyId, s.memberId)).rules; } catch { /* the reason is enough */ }
  await loadCatalog().catch(() => null);

  // stillWorks lists what a downtime leaves allowed: categories
  // (ALLOW:CATEGORY) and apps (ALLOW:APP), by name.
  function stillWorks() {
    const r = rules || {};
    const cats = Object.keys(r).filter((k) => k.startsWith('ALLOW:CATEGORY:')).map((k) => t(`cat.${k.slice(15)}`));
    const apps = Object.keys(r).filter((k) => k.startsWith('ALLOW:APP:'))
      .map((k) => appName(state.catalog?.apps?.find((a) => a.id === k.slice(10))));
    const all = [...cats, ...apps];
    return all.length ? t('stillWorks', { list: all.join(', ') }) : t('stillWorksNone');
  }

  function render(d) {
    const self = myCard(d);
    if (!self) return;
    // Said once: a live update and the 3 s poll may both bring the unblock.
    if (self.status !== 'BLOCKED') { if (!left) { left = true; toast(t('allowed')); go('#/dashboard'); } return; }
    const owners = d.members.filter((m) => m.role === 'OWNER').map((m) => m.name);
    const dataHelps = ['BLOCKED_LIMIT_DAILY', 'BLOCKED_LIMIT_MONTHLY', 'BLOCKED_FAMILY_QUOTA'].includes(self.decision);
    const timeHelps = self.decision === 'BLOCKED_TIME';
    ask.hidden = !dataHelps;
    askTime.hidden = !timeHelps;
    notData.hidden = dataHelps || timeHelps;
    // A downtime says what still works (the categories and apps allowed in
    // it); an app's block leads to that app's own screen.
    const app = self.decision === 'BLOCKED_APP' ? /^BLOCK:APP:(.+)$/.exec(self.rule || '')?.[1] : null;
    body.replaceChildren(h('dl.facts',
      h('dt', t('why')), h('dd#block-reason', { 'data-decision': self.decision }, reasonText(self, state.catalog)),
      h('dt', t('until')), h('dd#block-until', untilText(self, rules)),
      h('dt', t('whoToAsk')), h('dd#block-owners', owners.join(', '))),
      timeHelps ? h('p#block-still-works', stillWorks()) : null,
      app ? h('p', h('a.button#block-app-link', { href: `#/app/${encodeURIComponent(app)}` }, t('askAppMore'))) : null);
  }

  // askBox asks the owners for data (kind DATA: ids ask-…) or for minutes
  // in a downtime (TIME: ids ask-time-…).
  function askBox(kind) {
    const p = kind === 'TIME' ? 'ask-time' : 'ask';
    const amount = kind === 'TIME'
      ? h(`select#${p}-minutes`, [15, 30, 60].map((n) => h('option', { value: String(n) }, t('minutes', { n }))))
      : h('select#ask-amount', [50, 100, 200, 500, 1024].map((mb) => h('option', { value: String(mb * MB) }, fmtBytes(mb * MB))));
    amount.value = kind === 'TIME' ? '30' : String(100 * MB);
    const msg = h(`textarea#${p}-message`, { maxLength: 200, rows: 2 });
    const status = h(`p#${p}-status`, { role: 'status' });
    const pending = h(`ul.requests#${kind === 'TIME' ? 'my-time-requests' : 'my-requests'}`);
    const send = h(`button.primary#${p}-send`, { type: 'submit' }, kind === 'TIME' ? t('timeAskSend') : t('askSend'));
    const form = h(`form.card#${p}`, { 'aria-labelledby': `${p}-h`, hidden: true },
      h(`h3#${p}-h`, kind === 'TIME' ? t('timeAskTitle') : t('askMore')),
      h('label', { for: amount.id }, kind === 'TIME' ? t('timeAskMinutes') : t('askAmount')), amount,
      h('label', { for: `${p}-message` }, t('askMessage')), msg, send, status,
      h('h4', t('askPending')), pending);
    let key = api.uuid(); // one key per request the member means to send: a retry is not a second request
    let sent = null; // the request sent from this screen, until it is answered
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      send.disabled = true;
      try {
        const r = kind === 'TIME' ? await api.createTimeRequest(s.familyId, 'TIME', Number(amount.value), '', msg.value.trim(), key)
          : await api.createDataRequest(s.familyId, Number(amount.value), msg.value.trim(), key);
        key = api.uuid();
        sent = r?.id ?? null;
        status.textContent = t('askSent');
        msg.value = '';
        refreshRequests().catch(() => {});
      } catch (err) {
        status.textContent = err.status === 404 ? t('askUnavailable') : t('askFailed', { msg: errorText(err) });
      } finally { send.disabled = false; }
    });
    const renderMine = (items) => {
      if (items === false) { status.textContent = t('askUnavailable'); pending.replaceChildren(); return; }
      // Each form lists its own kind: data, or time (in a downtime, on an app).
      const mine = (items || []).filter((r) => r.customerId === s.memberId && ((r.kind || 'DATA') === 'DATA') === (kind !== 'TIME'));
      // The request sent from here is no longer pending: say how it was answered.
      if (sent != null && items && !mine.some((r) => r.id === sent)) {
        const id = sent;
        sent = null;
        api.dataRequest(s.familyId, id).then((r) => {
          status.textContent = r.status === 'APPROVED' && r.until ? t('timeApproved', { time: stampClock(r.until) })
            : r.status === 'APPROVED' ? t('askApproved', { bytes: fmtBytes(r.grantedBytes || r.amountBytes) })
            : r.status === 'DECLINED' ? t('askDeclined') : status.textContent;
        }).catch(() => {});
      }
      pending.replaceChildren(...(mine.length ? mine.map((r) => h('li', { id: `${p}-request-${r.id}` }, `${requestWhat(r)} · ${fmtTime(r.createdAt)}`, r.message ? h('q', r.message) : null))
        : [h('li.muted', t('noRequests'))]));
    };
    track(on('requests', renderMine));
    renderMine(state.requests);
    refreshRequests().catch(() => {});
    return form;
  }

  track(on('dashboard', render));
  // An owner's unblock arrives live (FAMILY_CHANGED); a block that ends by
  // itself (a window's end, midnight) does not: while the block screen is
  // shown, look again every 3 s.
  const poll = setInterval(() => refreshDashboard().catch(() => {}), 3000);
  track(() => clearInterval(poll));
  if (state.dash) render(state.dash);
  await refreshDashboard();
}

// ---------------------------------------------------------------- usage

export async function usageView(root, [cid]) {
  const s = me();
  const id = Number(cid) || s.memberId;
  if (s.role === 'MEMBER' && id !== s.memberId) { go('#/usage'); return; }
  const d = state.dash || await refreshDashboard();
  const pick = h('select#usage-member', { disabled: s.role === 'MEMBER' },
    d.members.filter((m) => s.role !== 'MEMBER' || m.customerId === s.memberId)
      .map((m) => h('option', { value: String(m.customerId), selected: m.customerId === id }, m.name)));
  pick.addEventListener('change', () => go(`#/usage/${pick.value}`));
  const body = h('div.charts#usage-charts', h('p', t('loading')));
  root.append(h('section.card', h('h2', t('usageTitle')), h('label', { for: 'usage-member' }, t('whose')), pick), body);
  const [u, cat] = await Promise.all([api.usage(s.familyId, id, 'month'), loadCatalog().catch(() => null)]);
  const hours = new Array(24).fill(0);
  const now = new Date();
  const daysInMonth = new Date(now.getFullYear(), now.getMonth() + 1, 0).getDate();
  const days = new Array(daysInMonth).fill(0);
  for (const b of u.byHour || []) {
    const at = new Date(b.hour);
    if (at.getMonth() === now.getMonth()) days[at.getDate() - 1] += b.allowedBytes;
    if (at.toDateString() === now.toDateString()) hours[at.getHours()] += b.allowedBytes;
  }
  const catOf = new Map((cat?.apps || []).map((a) => [a.id, a.category]));
  const appOf = new Map((cat?.apps || []).map((a) => [a.id, a]));
  // Apps the catalog does not know are one bar, "알 수 없는 앱": never a
  // package id.
  const known = new Map();
  for (const a of u.byApp || []) {
    const k = appOf.has(a.appId) ? a.appId : '';
    known.set(k, { appId: k, allowedBytes: (known.get(k)?.allowedBytes || 0) + a.allowedBytes });
  }
  const apps = [...known.values()].sort((a, b) => b.allowedBytes - a.allowedBytes);
  const label = (id) => appName(appOf.get(id));
  const byCat = new Map();
  for (const a of apps) {
    const c = catOf.get(a.appId) || 'OTHER';
    byCat.set(c, (byCat.get(c) || 0) + a.allowedBytes);
  }
  body.replaceChildren(
    h('p#usage-total', t('totalMonth', { bytes: fmtBytes(u.monthlyUsedBytes), n: u.blocked })),
    chartBox(t('byHour'), 'bar', hours.map((_, i) => `${i}`), hours, { id: 'chart-hour' }),
    apps.length ? chartBox(t('byApp'), 'bar', apps.slice(0, 10).map((a) => label(a.appId)), apps.slice(0, 10).map((a) => a.allowedBytes), { id: 'chart-app' })
      : h('p.muted', t('noUsage')),
    byCat.size ? chartBox(t('byCategory'), 'doughnut', [...byCat.keys()].map((c) => t(`cat.${c}`)), [...byCat.values()], { id: 'chart-category' }) : null,
    chartBox(t('byDay'), 'bar', days.map((_, i) => `${i + 1}`), days, { id: 'chart-day' }),
  );
}

// ---------------------------------------------------------------- inbox

// weekTable is a weekly summary's members: use and blocks, most used first.
function weekTable(w) {
  return h('table.week', h('caption.sr-only', t('weekCaption', { from: w.from, to: w.to })),
    h('thead', h('tr', h('th', { scope: 'col' }, t('name')), h('th', { scope: 'col' }, t('weekUsed')), h('th', { scope: 'col' }, t('weekBlocked')))),
    h('tbody', w.members.map((m) => h('tr', h('th', { scope: 'row' }, m.name), h('td', fmtBytes(m.usedBytes)), h('td', String(m.blocked || 0))))));
}

export async function inboxView(root) {
  const s = me();
  // A request's top-up is priced from the catalog's offers.
  if (isOwner()) await loadCatalog().catch(() => null);
  const list = h('ul.notes#notes', { 'aria-live': 'polite' });
  const allBtn = h('button#mark-all', { type: 'button' }, t('markAllRead'));
  const more = h('button#more', { type: 'button', hidden: true }, t('loadMore'));
  root.append(h('section.card', h('div.row.spread', h('h2', t('inboxTitle')), allBtn), list, more));
  let next = 0;
  const seen = new Set();

  function item(n) {
    seen.add(n.id);
    const read = h('button.small', { type: 'button', hidden: !!n.readAt, 'aria-label': `${t('markRead')}: ${n.title}` }, t('markRead'));
    const answer = h('div.note-answer');
    // A threshold alert: owners can top up from it; members are told to
    // ask a parent (the stored text is the owners').
    const alert = n.kind === 'THRESHOLD_ALERT' ? n.payload?.thresholdPercent : null;
    const body = alert && !isOwner() ? t('thresholdMember', { pct: alert }) : n.body;
    if (alert && isOwner()) answer.append(h('a.button.small.primary', { href: '#/controls/0/topup', id: `note-topup-${n.id}` }, t('topupNow')));
    // A weekly summary: each member's week as a table.
    if (n.kind === 'WEEKLY_SUMMARY' && Array.isArray(n.payload?.members)) answer.append(weekTable(n.payload));
    const li = h(`li.note${n.readAt ? '' : '.unread'}`, { id: `note-${n.id}`, 'data-kind': n.kind },
      h('div.note-head', h('strong', n.title), n.readAt ? null : h('span.badge-status.st-new', t('unread'))),
      h('p', body), answer, h('p.muted', fmtTime(n.createdAt)), read);
    // A request for more data is answered from its inbox item too (#24).
    const rid = n.kind === 'DATA_REQUESTED' && isOwner() ? n.payload?.requestId : null;
    if (rid) {
      const show = (items) => {
        if (!Array.isArray(items)) return;
        const r = items.find((x) => x.id === rid);
        answer.replaceChildren(r ? requestActions(r, 'inbox-') : h('p.muted', t('requestAnswered')));
      };
      track(on('requests', show));
      show(state.requests);
    }
    read.addEventListener('click', async () => {
      try {
        await api.markRead(s.familyId, n.id);
        n.readAt = new Date().toISOString();
        li.classList.remove('unread'); read.hidden = true; li.querySelector('.st-new')?.remove();
        state.unread = Math.max(0, state.unread - 1); emit('unread', state.unread);
      } catch (e) { toast(errorText(e), 'error'); }
    });
    li.markRead = () => read.click();
    return li;
  }

  async function page() {
    const p = await api.inbox(s.familyId, { before: next || undefined });
    for (const n of p.items || []) if (!seen.has(n.id)) list.append(item(n));
    next = p.nextBefore || 0;
    more.hidden = !next;
    if (!list.children.length) list.append(h('li.muted#no-notes', t('noNotes')));
  }
  more.addEventListener('click', () => page().catch((e) => toast(errorText(e), 'error')));
  allBtn.addEventListener('click', () => { for (const li of list.querySelectorAll('li.unread')) li.markRead(); });
  track(on('note', (n) => {
    if (seen.has(n.id)) return;
    list.querySelector('#no-notes')?.remove();
    list.prepend(item(n));
  }));
  await page();
  refreshUnread().catch(() => {});
  if (isOwner()) refreshRequests().catch(() => {});
}
