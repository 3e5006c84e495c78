// api.js: every call the family app makes to the public DPCS API, the
// session and the live notification stream. Route shapes follow
// /openapi.json; the ask-for-more and Web Push routes are built against
// their agreed contract and kept here so a rename at merge is a one-line
// change.
//
// The session (doc/security.md, "The refresh cookie"): the app logs in with
// X-DPCS-Session: cookie, so the refresh token lives in an HttpOnly cookie
// no script can read; the access token lives in this module's memory only
// (a reload refreshes once). localStorage keeps only who is logged in
// (member, family, role: what the app needs to open offline), never a
// token. Logging out — or the session ending — clears the app's storage and
// the service worker's caches: nothing of the family stays on the device.

const SESSION = 'dpcs.session';
const COOKIE = { 'X-DPCS-Session': 'cookie' };

export class APIError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

let session = load();
let refreshTimer = 0;
let refreshing = null;
const listeners = new Set();

// load reads who is logged in. A session kept by an older version of the
// app (a refresh token in localStorage) is revoked and forgotten: its owner
// logs in again and gets a cookie.
function load() {
  let s = null;
  try { s = JSON.parse(localStorage.getItem(SESSION)) || null; } catch { s = null; }
  if (s && (s.refreshToken || s.accessToken)) {
    const rt = s.refreshToken;
    localStorage.removeItem(SESSION);
    if (rt) fetch('/auth/logout', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ refreshToken: rt }) }).catch(() => {});
    return null;
  }
  return s && s.memberId ? { ...s, accessToken: '', expiresAt: 0 } : null;
}

function save(s) {
  session = s;
  if (s) {
    const { memberId, familyId, role, refreshExpiresAt, passwordWeak } = s;
    localStorage.setItem(SESSION, JSON.stringify({ memberId, familyId, role, refreshExpiresAt, passwordWeak }));
  } else {
    forget();
  }
  schedule();
  for (const f of listeners) f(s);
}

// forget clears what the app kept of the family: its storage (the language
// choice stays) and every cache of the service worker; the app shell is
// fetched again when next needed.
function forget() {
  try {
    for (const k of Object.keys(localStorage)) if (k.startsWith('dpcs.') && k !== 'dpcs.lang') localStorage.removeItem(k);
    sessionStorage.clear();
  } catch { /* storage unavailable */ }
  if (self.caches) caches.keys().then((ks) => Promise.all(ks.map((k) => caches.delete(k)))).catch(() => {});
}

// Another tab logged out (or in as someone else): follow it.
window.addEventListener('storage', (e) => {
  if (e.key !== SESSION && e.key !== null) return;
  const next = load();
  if (!next && session) { session = null; schedule(); for (const f of listeners) f(null); }
  else if (next && (!session || next.memberId !== session.memberId)) { session = next; schedule(); for (const f of listeners) f(next); }
});

/** The current session: {accessToken, expiresAt (ms), memberId, familyId, role, passwordWeak} or null. */
export function currentSession() { return session; }
/** onSession(f) calls f(session) whenever the session changes (login, refresh, logout). */
export function onSession(f) { listeners.add(f); return () => listeners.delete(f); }

function fromTokens(tk, prev) {
  return {
    accessToken: tk.accessToken, expiresAt: Date.now() + tk.expiresIn * 1000, refreshExpiresAt: Date.parse(tk.refreshExpiresAt),
    memberId: tk.memberId, familyId: tk.familyId, role: tk.role, passwordWeak: tk.passwordWeak ?? prev?.passwordWeak ?? false,
  };
}

// schedule refreshes the access token a minute before it expires.
function schedule() {
  clearTimeout(refreshTimer);
  if (!session || !session.accessToken) return;
  const wait = Math.max(1000, session.expiresAt - Date.now() - 60_000);
  refreshTimer = setTimeout(() => refresh().catch(() => {}), Math.min(wait, 2 ** 31 - 1));
}

async function raw(method, path, body, headers = {}, token = session?.accessToken) {
  const h = { Accept: 'application/json', ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (!res.ok) {
    const err = new APIError(res.status, data);
    err.retryAfter = Number(res.headers.get('Retry-After')) || 0;
    throw err;
  }
  return data;
}

// exclusive runs f while no other tab of the app refreshes: the cookie is
// shared, and two tabs presenting the same refresh token would look like a
// theft and end the session.
function exclusive(f) {
  return navigator.locks ? navigator.locks.request('dpcs-refresh', f) : f();
}

/** refresh exchanges the refresh cookie (single use) for a new access token; one at a time. */
export function refresh() {
  if (!session) return Promise.reject(new APIError(401, { detail: 'not logged in' }));
  if (!refreshing) {
    refreshing = exclusive(() => raw('POST', '/auth/refresh', undefined, COOKIE, null))
      .then((tk) => { save(fromTokens(tk, session)); return session; })
      .catch((e) => {
        if (e.status === 401 || e.status === 400 || e.status === 403) { ended = e.problem?.ended || 'SESSION'; save(null); }
        throw e;
      })
      .finally(() => { refreshing = null; });
  }
  return refreshing;
}

/** call is an authenticated request; a 401 refreshes the session once and retries. */
export async function call(method, path, body, headers) {
  if (session && session.expiresAt - Date.now() < 5000) await refresh();
  try {
    return await raw(method, path, body, headers);
  } catch (e) {
    if (e.status !== 401 || !session) throw e;
    await refresh();
    return raw(method, path, body, headers);
  }
}

/** login starts a session; a refusal is an APIError whose problem.attemptsLeft (401) or retryAfter (429) the screen shows. */
export async function login(loginId, password) {
  const tk = await raw('POST', '/auth/token', { login: loginId, password }, COOKIE, null);
  ended = '';
  save(fromTokens(tk));
  return session;
}

/** logout stops this browser's pushes, ends the session on the server and forgets the family on this device. */
export async function logout() {
  const s = session;
  if (s) {
    await unsubscribePush(s.familyId).catch(() => {});
    await raw('POST', '/auth/logout', undefined, COOKIE, null).catch(() => {});
  }
  loggedOut = true;
  ended = '';
  save(null);
  loggedOut = false;
}

let loggedOut = false;
let ended = '';

/** endedByLogout reports, inside an onSession(null) callback, whether this tab's member logged out (not an ended session). */
export function endedByLogout() { return loggedOut; }

/**
 * endedWhy says why the last session ended, once (then ''): the refresh's
 * SessionProblem.ended (EXPIRED, PASSWORD, REMOVED, REVOKED), SESSION when
 * it did not say, '' after a logout.
 */
export function endedWhy() { const e = ended; ended = ''; return e; }

// unsubscribePush stops this browser's Web Push subscription, here and on
// the server, so no notification about the family arrives after logout.
async function unsubscribePush(familyId) {
  if (!('serviceWorker' in navigator)) return;
  const reg = await navigator.serviceWorker.getRegistration(new URL('../', import.meta.url).pathname);
  const sub = reg && await reg.pushManager?.getSubscription();
  if (!sub) return;
  await call('DELETE', `${fam(familyId)}/push-subscriptions?endpoint=${encodeURIComponent(sub.endpoint)}`).catch(() => {});
  await sub.unsubscribe();
}

/** changePassword sets the caller's password; its other sessions end. */
export async function changePassword(currentPassword, newPassword) {
  await call('POST', '/me/password', { currentPassword, newPassword });
  if (session) save({ ...session, passwordWeak: false });
}
/** resetPassword sets a member's password (owners: a MEMBER's); every session of the member ends. */
export const resetPassword = (f, c, password) => call('POST', `${mem(f, c)}/password`, { password });

export function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const fam = (f) => `/families/${encodeURIComponent(f)}`;
const mem = (f, c) => `${fam(f)}/members/${encodeURIComponent(c)}`;

// Family and members.
export const dashboard = (f) => call('GET', fam(f));
export const members = (f) => call('GET', `${fam(f)}/members`);
export const addMember = (f, m) => call('POST', `${fam(f)}/members`, m);
export const removeMember = (f, c) => call('DELETE', mem(f, c));
export const setRole = (f, c, role) => call('PUT', `${mem(f, c)}/role`, { role });
/** setMinor marks a member as under 19 (it then only receives gifts) or not. */
export const setMinor = (f, c, minor) => call('PUT', `${mem(f, c)}/minor`, { minor });
export const usage = (f, c, period = 'month') => call('GET', `${mem(f, c)}/usage?period=${period}`);
export const policies = (f, c) => call('GET', `${mem(f, c)}/policies`);
/** patchPolicies: {set?, remove?} with the version check (409 when another owner changed it). */
export const patchPolicies = (f, c, version, change) =>
  call('PATCH', `${mem(f, c)}/policies`, { expectedVersion: version, ...change });
export const setAlerts = (f, thresholds) => call('PUT', `${fam(f)}/alerts`, { thresholds });
/** topUp buys one of the operator's offers (catalog topUpOffers[].id), billed to the phone bill. */
export const topUp = (f, offerId) => call('POST', `${fam(f)}/topups`, { offerId }, { 'Idempotency-Key': uuid() });
/** receipt is a top-up's receipt (owners). */
export const receipt = (f, id) => call('GET', `${fam(f)}/topups/${encodeURIComponent(id)}`);
/** history is a month's top-ups and gifts (YYYYMM; '' this month), one member's when member is set. */
export function history(f, month, member) {
  const q = new URLSearchParams();
  if (month) q.set('month', month);
  if (member) q.set('member', String(member));
  return call('GET', `${fam(f)}/history${q.size ? `?${q}` : ''}`);
}
export const catalog = () => call('GET', '/catalog');

// Inbox.
export function inbox(f, { before, unread, limit = 30 } = {}) {
  const q = new URLSearchParams({ limit: String(limit) });
  if (before) q.set('before', String(before));
  if (unread) q.set('unread', 'true');
  return call('GET', `${fam(f)}/notifications?${q}`);
}
export const markRead = (f, id) => call('POST', `${fam(f)}/notifications/${encodeURIComponent(id)}/read`);

// Ask for more (data requests).
export const createDataRequest = (f, amountBytes, message, key = uuid()) =>
  call('POST', `${fam(f)}/data-requests`, message ? { amountBytes, message } : { amountBytes }, { 'Idempotency-Key': key });
/** dataRequests lists the family's requests in a state (an owner sees all, a member its own), as an array. */
export async function dataRequests(f, status = 'PENDING') {
  const r = await call('GET', `${fam(f)}/data-requests?status=${status}`);
  return r?.items || r?.requests || [];
}
/** dataRequest is one request (a member reads its own). */
export const dataRequest = (f, id) => call('GET', `${fam(f)}/data-requests/${encodeURIComponent(id)}`);
/** createTimeRequest asks for minutes more: in a downtime (kind TIME) or on a blocked app (APP, appId). */
export const createTimeRequest = (f, kind, minutes, appId, message, key = uuid()) =>
  call('POST', `${fam(f)}/data-requests`, { kind, minutes, ...(appId ? { appId } : {}), ...(message ? { message } : {}) }, { 'Idempotency-Key': key });
/**
 * approveDataRequest approves with a grant (DAY, MONTH, TOPUP for data; none
 * for a TIME or APP request); a TOPUP buys the offer offerId.
 */
export const approveDataRequest = (f, id, grant, amountBytes, offerId) =>
  call('POST', `${fam(f)}/data-requests/${encodeURIComponent(id)}/approve`,
    { ...(grant ? { grant } : {}), ...(amountBytes ? { amountBytes } : {}), ...(offerId ? { offerId } : {}) },
    { 'Idempotency-Key': uuid() });
/** giveData moves bytes of this month's allowance from one member to another ("데이터 선물하기"). */
export const giveData = (f, fromCustomerId, toCustomerId, amountBytes) =>
  call('POST', `${fam(f)}/gifts`, { fromCustomerId, toCustomerId, amountBytes });
/** grantException lifts a member's downtime (TIME) or an app's block (APP, appId) for minutes. */
export const grantException = (f, cid, kind, minutes, appId) =>
  call('POST', `${fam(f)}/members/${encodeURIComponent(cid)}/exceptions`, { kind, minutes, ...(appId ? { appId } : {}) });
export const declineDataRequest = (f, id, reason) =>
  call('POST', `${fam(f)}/data-requests/${encodeURIComponent(id)}/decline`, reason ? { reason } : {}, { 'Idempotency-Key': uuid() });

// Web Push.
export const vapidPublicKey = () => call('GET', '/push/vapid-public-key');
export const pushSubscribe = (f, sub) => call('POST', `${fam(f)}/push-subscriptions`, sub);
export const pushUnsubscribe = (f, endpoint) => call('DELETE', `${fam(f)}/push-subscriptions?endpoint=${encodeURIComponent(endpoint)}`);

/**
 * openStream reads GET /families/{f}/notifications/stream with fetch (EventSource
 * cannot send the Authorization header), parses the SSE frames and calls
 * onMessage({id, event, data}) for each; onState(true|false) says whether it is
 * connected. It reconnects with Last-Event-ID (backoff 1 s … 15 s) until
 * close() is called.
 */
export function openStream(f, { onMessage, onState, lastEventId = '' }) {
  let closed = false;
  let ctrl = null;
  let delay = 1000;
  let upAt = 0;
  let quick = 0; // streams in a row that ended within 2 s of opening
  let lastId = lastEventId;
  async function run() {
    while (!closed) {
      ctrl = new AbortController();
      try {
        if (session && session.expiresAt - Date.now() < 5000) await refresh();
        const h = { Accept: 'text/event-stream', Authorization: `Bearer ${session?.accessToken}` };
        if (lastId) h['Last-Event-ID'] = lastId;
        const res = await fetch(`${fam(f)}/notifications/stream`, { headers: h, signal: ctrl.signal, cache: 'no-store' });
        if (res.status === 401) { await refresh(); continue; }
        if (!res.ok || !res.body) throw new APIError(res.status, null);
        onState?.(true);
        delay = 1000;
        upAt = Date.now();
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        let frame = { data: [] };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let nl;
          while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
            const line = buf.slice(0, nl);
            buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
            if (line === '') {
              if (frame.data.length) {
                if (frame.id) lastId = frame.id;
                let data = frame.data.join('\n');
                try { data = JSON.parse(data); } catch { /* keep text */ }
                try { onMessage({ id: frame.id, event: frame.event || 'message', data }); } catch (e) { console.error(e); }
              }
              frame = { data: [] };
              continue;
            }
            if (line.startsWith(':')) continue;
            const c = line.indexOf(':');
            const field = c < 0 ? line : line.slice(0, c);
            const val = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
            if (field === 'data') frame.data.push(val);
            else if (field === 'event') frame.event = val;
            else if (field === 'id') frame.id = val;
            else if (field === 'retry' && /^\d+$/.test(val)) delay = Number(val);
          }
        }
      } catch (e) {
        if (closed) return;
        if (e.status === 401 || e.status === 400) { closed = true; onState?.(false); return; }
      }
      if (closed) return;
      onState?.(false);
      // A stream that was up and ended (the server re-checked its access
      // after a role change, or restarted) is opened again at once — twice
      // in a row even when it had been up only briefly (two role changes a
      // moment apart); one that keeps ending at once, or keeps failing,
      // waits longer each time.
      const brief = upAt && Date.now() - upAt <= 2000;
      quick = brief ? quick + 1 : 0;
      const wait = upAt && quick <= 2 ? 100 : delay;
      upAt = 0;
      await new Promise((r) => setTimeout(r, wait));
      if (wait === delay) delay = Math.min(delay * 2, 15000);
    }
  }
  run();
  return { close() { closed = true; ctrl?.abort(); }, get lastEventId() { return lastId; } };
}
