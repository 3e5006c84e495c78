// sw.js: the family app's service worker (scope /app/). It keeps the app
// shell cached so the app opens offline (the last known dashboard comes from
// localStorage), never caches API answers, and shows Web Push notifications.
// Logging out deletes every cache (api.js, forget): the shell is fetched
// again on the next visit.
const CACHE = 'dpcs-app-v6';
const SHELL = [
  './', 'index.html', 'app.css', 'manifest.webmanifest', 'icons/icon.svg', 'icons/icon-192.png', 'icons/icon-512.png',
  'js/app.js', 'js/api.js', 'js/store.js', 'js/views.js', 'js/appblock.js', 'js/controls.js', 'js/history.js', 'js/settings.js', 'js/ui.js',
  'js/util.js', 'js/i18n.js', 'js/charts.js', 'js/answer.js', 'vendor/chart.umd.min.js',
];
importScripts('js/answer.js'); // self.dpcsAnswer: a data request answered from its notification
const base = new URL('./', self.location).href;

self.addEventListener('install', (e) => {
  e.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (e) => {
  e.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k !== CACHE).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

// Network first for the shell (a new release is picked up at once: the server
// revalidates with ETags), the cache when offline. Anything outside the app
// (the API) goes straight to the network.
self.addEventListener('fetch', (e) => {
  const req = e.request;
  if (req.method !== 'GET' || !req.url.startsWith(base)) return;
  e.respondWith(fetch(req).then((res) => {
    if (res.ok) {
      const copy = res.clone();
      caches.open(CACHE).then((c) => c.put(req, copy));
    }
    return res;
  }).catch(async () => (await caches.match(req, { ignoreSearch: true })) || (await caches.match('index.html')) || Response.error()));
});

// Web Push: the payload is the server's PushMessage ({title, body, tag, url,
// kind, eventId, familyId, memberId?, lang}); the tag makes a redelivery
// replace the notification instead of adding a second.
self.addEventListener('push', (e) => {
  let n = {};
  try { n = e.data ? e.data.json() : {}; } catch { n = { body: e.data ? e.data.text() : '' }; }
  const kind = n.kind || '';
  const hash = kind.startsWith('DATA_REQUEST') || kind === 'CUSTOMER_BLOCKED' ? '#/dashboard' : '#/inbox';
  let url = base + hash;
  try { if (n.url && new URL(n.url, base).href.startsWith(base)) url = new URL(n.url, base).href; } catch { /* keep ours */ }
  const ko = (n.lang || 'ko') === 'ko';
  // A request for more data is answered from the notification itself.
  const ask = kind === 'DATA_REQUESTED' && n.requestId > 0 && n.familyId > 0;
  e.waitUntil(self.registration.showNotification(n.title || 'DPCS', {
    body: n.body || '', tag: n.tag || n.eventId || undefined, icon: 'icons/icon-192.png', badge: 'icons/icon-192.png',
    lang: n.lang || 'ko', data: { url, ko, request: ask ? { familyId: n.familyId, requestId: n.requestId, kind: n.requestKind || 'DATA' } : null },
    // An owner's low-data alert tops up from the notification: it opens the offers.
    actions: ask ? [{ action: 'approve', title: approveTitle(n, ko) }, { action: 'decline', title: ko ? '거절' : 'Decline' }]
      : n.topUp ? [{ action: 'topup', title: ko ? '충전하기' : 'Top up' }] : [],
  }));
});

// approveTitle is the approve button's words: data for today, or the
// minutes a request for time asked for ("30분 허락").
function approveTitle(n, ko) {
  if ((n.requestKind === 'TIME' || n.requestKind === 'APP') && n.minutes > 0) return ko ? `${n.minutes}분 허락` : `Allow ${n.minutes} min`;
  return ko ? '오늘 쓸 만큼 승인' : 'Approve for today';
}

// The answer's outcome, shown as a notification of its own; anything but a
// done answer opens the app at the request instead.
const outcome = {
  approved: ['요청을 승인했어요', 'Request approved'],
  declined: ['요청을 거절했어요', 'Request declined'],
  answered: ['이미 답한 요청이에요', 'This request was already answered'],
};

async function answer(data, action) {
  const res = await self.dpcsAnswer(data.request, action);
  const text = outcome[res];
  if (!text) return open(data.url || base);
  return self.registration.showNotification(text[data.ko ? 0 : 1], {
    tag: `answer-${data.request.requestId}`, icon: 'icons/icon-192.png', badge: 'icons/icon-192.png',
    lang: data.ko ? 'ko' : 'en', data: { url: data.url || base },
  });
}

self.addEventListener('notificationclick', (e) => {
  e.notification.close();
  const data = e.notification.data || {};
  if ((e.action === 'approve' || e.action === 'decline') && data.request) {
    e.waitUntil(answer(data, e.action));
    return;
  }
  if (e.action === 'topup') {
    e.waitUntil(open(`${base}#/controls/0/topup`));
    return;
  }
  e.waitUntil(open(data.url || base));
});

function open(url) {
  return self.clients.matchAll({ type: 'window', includeUncontrolled: true }).then((list) => {
    for (const c of list) {
      if (c.url.startsWith(base) && 'focus' in c) { c.navigate?.(url); return c.focus(); }
    }
    return self.clients.openWindow(url);
  });
}
