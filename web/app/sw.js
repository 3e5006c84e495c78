// sw.js: the family app's service worker (scope /app/). It keeps the app
// shell cached so the app opens offline (the last known dashboard comes from
// localStorage), never caches API answers, and shows Web Push notifications.
// Logging out deletes every cache (api.js, forget): the shell is fetched
// again on the next visit.
const CACHE = 'dpcs-app-v3';
const SHELL = [
  './', 'index.html', 'app.css', 'manifest.webmanifest', 'icons/icon.svg', 'icons/icon-192.png', 'icons/icon-512.png',
  'js/app.js', 'js/api.js', 'js/store.js', 'js/views.js', 'js/controls.js', 'js/settings.js', 'js/ui.js',
  'js/util.js', 'js/i18n.js', 'js/charts.js', 'vendor/chart.umd.min.js',
];
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
  e.waitUntil(self.registration.showNotification(n.title || 'DPCS', {
    body: n.body || '', tag: n.tag || n.eventId || undefined, icon: 'icons/icon-192.png', badge: 'icons/icon-192.png',
    lang: n.lang || 'ko', data: { url },
  }));
});

self.addEventListener('notificationclick', (e) => {
  e.notification.close();
  const url = e.notification.data?.url || base;
  e.waitUntil(self.clients.matchAll({ type: 'window', includeUncontrolled: true }).then((list) => {
    for (const c of list) {
      if (c.url.startsWith(base) && 'focus' in c) { c.navigate?.(url); return c.focus(); }
    }
    return self.clients.openWindow(url);
  }));
});
