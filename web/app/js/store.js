// store.js: the app's shared state — the dashboard kept fresh from the live
// stream (debounced re-fetch), the unread count, pending data requests — and
// a tiny event bus the screens subscribe to.
import * as api from './api.js';

const LAST = 'dpcs.lastDashboard';
const bus = new EventTarget();

export const state = {
  dash: null, dashAt: 0, offline: false, live: false, unread: 0,
  requests: null, // null: unknown; false: the server has no data-request routes; []: list
  catalog: null,
  changedAt: 0, // performance.now() of the last family change told live (the browser tests read it)
};

export function on(name, f) {
  const g = (e) => f(e.detail);
  bus.addEventListener(name, g);
  return () => bus.removeEventListener(name, g);
}
export function emit(name, detail) { bus.dispatchEvent(new CustomEvent(name, { detail })); }

let inflight = null;
let again = false;

/** refreshDashboard re-fetches GET /families/{id}; concurrent calls coalesce into one more fetch. */
export function refreshDashboard() {
  if (inflight) { again = true; return inflight; }
  const s = api.currentSession();
  if (!s) return Promise.resolve(null);
  inflight = (async () => {
    try {
      const d = await api.dashboard(s.familyId);
      state.dash = d; state.dashAt = Date.now(); state.offline = false;
      // A parent changed this member's role: a new token carries it (the
      // screens follow the session's role).
      const mine = d.members?.find((x) => x.customerId === s.memberId);
      if (mine && mine.role !== s.role && mine.role !== 'ADMIN') api.refresh().catch(() => {});
      try { localStorage.setItem(LAST, JSON.stringify({ at: state.dashAt, familyId: s.familyId, data: d })); } catch { /* full */ }
      emit('dashboard', d);
      return d;
    } catch (e) {
      if (e instanceof TypeError) { // network: show the last known dashboard
        const last = lastDashboard(s.familyId);
        if (last) { state.dash = last.data; state.dashAt = last.at; state.offline = true; emit('dashboard', last.data); return last.data; }
      }
      throw e;
    } finally {
      inflight = null;
      if (again) { again = false; refreshDashboard().catch(() => {}); }
    }
  })();
  return inflight;
}

export function lastDashboard(familyId) {
  try {
    const v = JSON.parse(localStorage.getItem(LAST));
    return v && v.familyId === familyId ? v : null;
  } catch { return null; }
}

let soon = 0;
/** dashboardSoon re-fetches after a short quiet time, so a burst of events costs one fetch. */
export function dashboardSoon(ms = 120) {
  clearTimeout(soon);
  soon = setTimeout(() => refreshDashboard().catch(() => {}), ms);
}

/** refreshRequests loads the pending data requests (false when the route does not exist). */
export async function refreshRequests() {
  const s = api.currentSession();
  if (!s) return;
  try {
    state.requests = await api.dataRequests(s.familyId, 'PENDING');
  } catch (e) {
    if (e.status === 404 || e.status === 405) state.requests = false; else throw e;
  }
  emit('requests', state.requests);
}

export async function refreshUnread() {
  const s = api.currentSession();
  if (!s) return;
  const page = await api.inbox(s.familyId, { unread: true, limit: 100 });
  state.unread = (page.items || []).filter((n) => !n.readAt).length;
  emit('unread', state.unread);
}

export async function loadCatalog() {
  if (!state.catalog) state.catalog = await api.catalog();
  return state.catalog;
}

// The live stream: every notification can change the dashboard (usage,
// blocks, policy changes, answered requests), so each one schedules a
// debounced re-fetch; inbox rows (those with an id) are passed to the inbox.
// FAMILY_CHANGED (live only) says that a parent or an agent changed the
// family: the dashboard is read at once, and the 'family' event tells the
// screens that show more (the controls, the members).
let stream = null;
let poll = 0;
const LIVE_ONLY = new Set(['QUOTA_UPDATED']);

export function startLive() {
  stopLive();
  const s = api.currentSession();
  if (!s || !s.familyId) return;
  stream = api.openStream(s.familyId, {
    lastEventId: sessionStorage.getItem('dpcs.lastEventId') || '',
    onState(up) {
      state.live = up; emit('live', up);
      if (up) { dashboardSoon(0); refreshUnread().catch(() => {}); }
      // A stream that ended may have ended because this member's role
      // changed: the dashboard (read at once) says so, and a new token
      // carries it.
      else dashboardSoon(0);
    },
    onMessage(m) {
      if (m.event === 'ping') return;
      if (m.id) sessionStorage.setItem('dpcs.lastEventId', m.id);
      const n = m.data || {};
      const kind = n.kind || n.subType || '';
      // A parent's or an agent's change (doc/frontends.md, "Live"): read
      // again at once what it changed; screens that show more listen.
      if (kind === 'FAMILY_CHANGED') {
        const c = n.payload || {};
        state.changedAt = performance.now();
        dashboardSoon(0);
        if (c.change === 'REQUEST') refreshRequests().catch(() => {});
        emit('family', c);
        return;
      }
      dashboardSoon(kind === 'CUSTOMER_BLOCKED' || kind.startsWith('DATA_REQUEST') ? 0 : 120);
      if (kind.startsWith('DATA_REQUEST')) refreshRequests().catch(() => {});
      if (m.id && !LIVE_ONLY.has(kind)) {
        if (!n.readAt) { state.unread++; emit('unread', state.unread); }
        emit('note', n);
      }
    },
  });
  // A safety net for a live message missed (while reconnecting).
  poll = setInterval(() => { if (document.visibilityState === 'visible') refreshDashboard().catch(() => {}); }, 30000);
}

export function stopLive() {
  stream?.close(); stream = null;
  clearInterval(poll);
  state.live = false;
}
