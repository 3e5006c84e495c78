// settings.js: language, Web Push subscription, account and logout.
import * as api from './api.js';
import { t, lang, setLang } from './i18n.js';
import { h } from './util.js';
import { toast, go } from './ui.js';

function b64url(s) {
  const pad = '='.repeat((4 - (s.length % 4)) % 4);
  const raw = atob((s + pad).replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

async function currentPush() {
  if (!('serviceWorker' in navigator) || !('PushManager' in window)) return undefined;
  const reg = await navigator.serviceWorker.getRegistration(new URL('../', import.meta.url).pathname);
  return reg ? { reg, sub: await reg.pushManager.getSubscription() } : { reg: null, sub: null };
}

export async function settingsView(root) {
  const s = api.currentSession();
  const sel = h('select#lang-select', [['ko', '한국어'], ['en', 'English']].map(([v, l]) => h('option', { value: v, selected: v === lang, lang: v }, l)));
  sel.addEventListener('change', () => { setLang(sel.value); go('#/settings'); });
  const pushBtn = h('button#push-toggle', { type: 'button' });
  const pushMsg = h('p#push-status', { role: 'status' });
  const out = h('button.danger#logout', { type: 'button' }, t('logout'));
  out.addEventListener('click', async () => { await api.logout(); go('#/login'); });
  const me = (await api.dashboard(s.familyId).catch(() => null))?.members?.find((m) => m.customerId === s.memberId);
  root.append(
    h('section.card', h('h2', t('settingsTitle')), h('label', { for: 'lang-select' }, t('language')), sel),
    h('section.card', h('h3', t('pushTitle')), pushBtn, pushMsg),
    h('section.card', h('h3', t('account')), h('p', t('signedInAs', { name: me?.name || s.memberId, role: s.role, family: s.familyId })), out));

  async function renderPush() {
    const p = await currentPush();
    if (!p) { pushBtn.hidden = true; pushMsg.textContent = t('pushUnsupported'); return; }
    pushBtn.textContent = p.sub ? t('pushOff') : t('pushOn');
    pushBtn.setAttribute('aria-pressed', String(!!p.sub));
  }
  pushBtn.addEventListener('click', async () => {
    pushBtn.disabled = true;
    try {
      const p = await currentPush();
      const reg = p.reg || await navigator.serviceWorker.ready;
      if (p.sub) {
        await api.pushUnsubscribe(s.familyId, p.sub.endpoint).catch((e) => { if (e.status !== 404) throw e; });
        await p.sub.unsubscribe();
        pushMsg.textContent = t('pushDisabled');
      } else {
        if ((await Notification.requestPermission()) !== 'granted') throw new Error('permission denied');
        const { publicKey } = await api.vapidPublicKey();
        const sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: b64url(publicKey) });
        // Refused (e.g. 409 over the member's cap): leave no browser subscription behind.
        await api.pushSubscribe(s.familyId, sub.toJSON()).catch(async (e) => { await sub.unsubscribe().catch(() => {}); throw e; });
        pushMsg.textContent = t('pushEnabled');
      }
    } catch (e) {
      pushMsg.textContent = t('pushFailed', { msg: e.message });
      toast(pushMsg.textContent, 'error');
    }
    pushBtn.disabled = false;
    renderPush();
  });
  renderPush();
}
