// answer.js: answers a member's request for more data from a Web Push
// notification's buttons (#24), in the service worker (importScripts) —
// and in a page, for the browser tests. A classic script: it defines
// self.dpcsAnswer and nothing else.
//
// The service worker holds no token: it exchanges the refresh cookie for an
// access token as the app does (X-DPCS-Session: cookie), under the same
// lock as every tab of the app ('dpcs-refresh', api.js), since the refresh
// token is single use and two holders presenting it at once would look
// like a theft and end the session.
self.dpcsAnswer = async function dpcsAnswer(req, action) {
  if (!req || !(req.familyId > 0) || !(req.requestId > 0) || (action !== 'approve' && action !== 'decline')) return 'invalid';
  const refresh = async () => {
    const r = await fetch('/auth/refresh', { method: 'POST', credentials: 'same-origin',
      headers: { 'X-DPCS-Session': 'cookie', Accept: 'application/json' } });
    return r.ok ? (await r.json()).accessToken : '';
  };
  let token = '';
  try {
    token = self.navigator.locks ? await self.navigator.locks.request('dpcs-refresh', refresh) : await refresh();
  } catch { return 'offline'; }
  if (!token) return 'signed-out';
  // Approving grants what was asked for: data for today (the inbox's
  // default), or the minutes of a request for time (no grant to name).
  const timed = req.kind === 'TIME' || req.kind === 'APP';
  const body = action === 'approve' && !timed ? { grant: 'DAY' } : {};
  let r;
  try {
    r = await fetch(`/families/${req.familyId}/data-requests/${req.requestId}/${action}`, {
      method: 'POST', credentials: 'same-origin',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify(body),
    });
  } catch { return 'offline'; }
  if (r.ok) return action === 'approve' ? 'approved' : 'declined';
  if (r.status !== 409) return 'failed';
  // 409 is an answer given before (on another phone, say) — or one the
  // request cannot take as it is (a raise for a member with no limit):
  // the request's own state tells which, and the app opens at it then.
  try {
    const q = await fetch(`/families/${req.familyId}/data-requests/${req.requestId}`, {
      credentials: 'same-origin', headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' } });
    if (q.ok && (await q.json()).status !== 'PENDING') return 'answered';
  } catch { return 'offline'; }
  return 'failed';
};
