// app.js: the family app's shell — hash router, navigation, language switch,
// login, settings, live connection state and the service worker.
import * as api from './api.js';
import { t, lang, setLang, locale } from './i18n.js';
import { h, errorText } from './util.js';
import { state, on, startLive, stopLive, refreshDashboard, refreshUnread, refreshRequests } from './store.js';
import { dashboardView, blockView, usageView, inboxView } from './views.js';
import { controlsView } from './controls.js';
import { appBlockView } from './appblock.js';
import { go, leaveScreen } from './ui.js';
import { settingsView } from './settings.js';
import { historyView, receiptView } from './history.js';

const main = document.getElementById('main');

const routes = {
  login: loginView,
  dashboard: dashboardView,
  block: blockView,
  app: appBlockView,
  usage: usageView,
  inbox: inboxView,
  controls: controlsView,
  settings: settingsView,
  history: historyView,
  receipt: receiptView,
};

// A screen that could not load because the server or the network was
// away loads again by itself: after 2 s, doubling to 30 s, and at once
// when the browser is back online.
let retryTimer = 0;
let retryDelay = 2000;

function route() {
  clearTimeout(retryTimer);
  leaveScreen();
  const [name = 'dashboard', ...args] = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean);
  const s = api.currentSession();
  if (!s && name !== 'login') { location.replace('#/login'); return; }
  if (s && name === 'login') { location.replace('#/dashboard'); return; }
  const view = routes[name] || dashboardView;
  renderChrome(name);
  main.replaceChildren();
  main.dataset.screen = name;
  const at = location.hash;
  Promise.resolve(view(main, args)).then(() => { retryDelay = 2000; }, (e) => {
    const again = !e?.status || e.status >= 500;
    main.append(...[h('p.error', { role: 'alert' }, errorText(e)), again ? h('p.muted#retrying', t('retrying')) : null].filter(Boolean));
    if (!again) return;
    retryTimer = setTimeout(() => { if (location.hash === at) route(); }, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 30000);
  });
}

window.addEventListener('online', () => { if (document.getElementById('retrying')) route(); });

function renderChrome(name) {
  const s = api.currentSession();
  document.title = t('appTitle');
  document.getElementById('skip').textContent = t('skip');
  document.getElementById('app-title').textContent = t('appTitle');
  const lb = document.getElementById('lang');
  lb.textContent = t('switchLang');
  lb.setAttribute('lang', lang === 'ko' ? 'en' : 'ko');
  const nav = document.getElementById('nav');
  nav.hidden = !s;
  nav.setAttribute('aria-label', t('navMain'));
  const live = document.getElementById('live');
  live.hidden = !s;
  updateLive();
  if (!s) { nav.replaceChildren(); return; }
  const items = [
    ['dashboard', t('navDashboard'), '#/dashboard'],
    ['usage', t('navUsage'), '#/usage'],
    ['inbox', t('navInbox'), '#/inbox'],
    s.role !== 'MEMBER' ? ['controls', t('navControls'), '#/controls'] : null,
    ['settings', t('navSettings'), '#/settings'],
  ].filter(Boolean);
  nav.replaceChildren(h('ul', items.map(([k, label, href]) => h('li',
    h('a', { href, 'aria-current': k === name || (k === 'dashboard' && ['block', 'app', 'history', 'receipt'].includes(name)) ? 'page' : null, id: `nav-${k}` },
      label, k === 'inbox' ? h('span.badge#unread', { hidden: !state.unread, 'aria-label': t('unreadCount', { n: state.unread }) }, String(state.unread)) : null)))));
}

function updateLive() {
  const el = document.getElementById('live');
  const at = new Date(state.dashAt).toLocaleTimeString(locale(), { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
  el.textContent = state.offline ? t('offline', { time: at }) : state.live ? t('liveOn') : t('liveOff');
  el.title = state.offline ? t('offlineLong', { time: at }) : '';
  el.className = state.offline ? 'live live-off' : state.live ? 'live live-on' : 'live live-off';
}

on('live', updateLive);
on('dashboard', updateLive);
on('unread', (n) => {
  const b = document.getElementById('unread');
  if (!b) return;
  b.textContent = String(n);
  b.hidden = !n;
  b.setAttribute('aria-label', t('unreadCount', { n }));
});

async function loginView(root) {
  const id = h('input#login-id', { name: 'login', autocomplete: 'username', required: true, inputMode: 'tel' });
  const pw = h('input#login-password', { name: 'password', type: 'password', autocomplete: 'current-password', required: true });
  const msg = h('p.error#login-error', { role: 'alert' });
  // Who cannot log in is told who can help (#38): a parent resets a
  // child's password, the carrier's service centre a parent's.
  const help = h('p.muted#login-help');
  const btn = h('button.primary#login-submit', { type: 'submit' }, t('loginBtn'));
  // A session that ended says why, instead of a blank login (#38).
  const why = endedNote;
  endedNote = '';
  const form = h('form.card.login', { novalidate: false },
    h('h2', t('loginTitle')),
    why ? h('p.notice#login-ended', { role: 'status' }, t(`ended.${why}`)) : null,
    h('label', { for: 'login-id' }, t('loginId')), id,
    h('label', { for: 'login-password' }, t('password')), pw,
    btn, msg, help);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    msg.textContent = '';
    btn.disabled = true; btn.textContent = t('loggingIn');
    try {
      const s = await api.login(id.value.trim(), pw.value);
      started();
      go(s.passwordWeak ? '#/settings' : afterLogin(s));
    } catch (err) {
      msg.textContent = loginError(err);
      const left = err.problem?.attemptsLeft;
      help.textContent = err.status === 429 || (typeof left === 'number' && left <= 3) ? t('lockedHelp') : '';
      btn.disabled = false; btn.textContent = t('loginBtn');
    }
  });
  root.append(form);
  id.focus();
}

// loginError says why a login was refused in the viewer's language, with
// the attempts left before the login is locked (the API's attemptsLeft).
function loginError(err) {
  const min = Math.max(1, Math.ceil((err.retryAfter || 60) / 60));
  const left = err.problem?.attemptsLeft;
  if (err.status === 429) return t('loginLocked', { min });
  if (err.status === 401 && left === 0) return t('loginNowLocked', { min });
  if (err.status === 401 && typeof left === 'number') return t('loginBad', { n: left });
  return t('loginFailed', { msg: errorText(err) });
}

function started() {
  startLive();
  refreshDashboard().catch(() => {});
  refreshUnread().catch(() => {});
  if (api.currentSession()) refreshRequests().catch(() => {});
}

// returnTo is the page a session ended on (expired, revoked), kept in
// memory only (nothing of the family stays in storage), to go back to when
// the same member logs in again; a logout forgets it.
let returnTo = null;
// endedNote is why the last session ended, said once on the login screen.
let endedNote = '';
let member = api.currentSession()?.memberId ?? null;

let role = api.currentSession()?.role ?? null;

api.onSession((s) => {
  if (s) member = s.memberId;
  // A parent changed this member's role (its new token says so): the
  // navigation and the screen follow it.
  if (s && role && s.role !== role) { role = s.role; route(); return; }
  role = s?.role ?? null;
  if (!s) {
    const why = api.endedWhy();
    endedNote = !api.endedByLogout() && why ? (['EXPIRED', 'PASSWORD', 'REMOVED', 'REVOKED'].includes(why) ? why : 'SESSION') : '';
    returnTo = !api.endedByLogout() && location.hash.startsWith('#/') && location.hash !== '#/login'
      ? { hash: location.hash, memberId: member } : null;
    stopLive(); state.dash = null; state.unread = 0; state.requests = null;
    if (location.hash !== '#/login') location.hash = '#/login';
  }
});

// afterLogin is where a login goes: the page the session ended on when the
// same member logs in again, else the dashboard.
function afterLogin(s) {
  const back = returnTo && (returnTo.memberId == null || returnTo.memberId === s.memberId) ? returnTo.hash : null;
  returnTo = null;
  return back || '#/dashboard';
}

document.getElementById('lang').addEventListener('click', () => {
  setLang(lang === 'ko' ? 'en' : 'ko');
  route();
});

window.addEventListener('hashchange', route);
setLang(lang);
if (api.currentSession()) started();
route();

if ('serviceWorker' in navigator) {
  navigator.serviceWorker.register(new URL('../sw.js', import.meta.url).href, { scope: new URL('../', import.meta.url).pathname })
    .catch(() => { /* the app works without it */ });
}
