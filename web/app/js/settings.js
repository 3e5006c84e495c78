// settings.js: language, Web Push subscription, account, my password and
// logout.
import * as api from './api.js';
import { t, lang, setLang } from './i18n.js';
import { h, errorText } from './util.js';
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
    passwordBox(s),
    h('section.card', h('h3', t('account')), h('p', t('signedInAs', { name: me?.name || s.memberId, role: s.role === 'OWNER' ? t('owner') : s.role === 'MEMBER' ? t('member') : s.role, family: s.familyId })), out));

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
      pushMsg.textContent = t('pushFailed', { msg: errorText(e) });
      toast(pushMsg.textContent, 'error');
    }
    pushBtn.disabled = false;
    renderPush();
  });
  renderPush();
}

/** passwordText says in the viewer's language why the API refused a password (never the server's text). */
export function passwordText(e) {
  if (e.status === 429) return t('pw.locked', { min: Math.max(1, Math.ceil((e.retryAfter || 60) / 60)) });
  const d = (e.problem?.errors || []).find((x) => /password/i.test(x.location || '')) || {};
  if (/currentPassword$/.test(d.location || '')) return t('pw.wrongCurrent');
  const msg = d.message || '';
  if (msg.startsWith('must be at least')) return t('pw.short');
  if (msg.startsWith('must be at most')) return t('pw.long');
  if (msg.startsWith('must not be')) return t('pw.context');
  if (msg.startsWith('is too common')) return t('pw.common');
  return errorText(e);
}

// passwordBox changes the member's own password (POST /me/password): the
// other devices are logged out, this one goes on.
function passwordBox(s) {
  const cur = h('input#pw-current', { type: 'password', autocomplete: 'current-password', required: true, maxLength: 128 });
  const next = h('input#pw-new', { type: 'password', autocomplete: 'new-password', required: true, minLength: 8, maxLength: 128, 'aria-describedby': 'pw-hint' });
  const again = h('input#pw-again', { type: 'password', autocomplete: 'new-password', required: true, minLength: 8, maxLength: 128 });
  const msg = h('p#pw-status', { role: 'status' });
  const btn = h('button.primary#pw-submit', { type: 'submit' }, t('pwChange'));
  const form = h('form.card#password-form',
    h('h3', t('pwTitle')),
    s.passwordWeak ? h('p.error#pw-weak', { role: 'alert' }, t('pwWeak')) : null,
    h('label', { for: 'pw-current' }, t('pwCurrent')), cur,
    h('label', { for: 'pw-new' }, t('pwNew')), next,
    h('label', { for: 'pw-again' }, t('pwAgain')), again,
    h('p.muted#pw-hint', t('pwHint')), btn, msg);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    msg.textContent = ''; msg.className = '';
    if (next.value !== again.value) { msg.textContent = t('pwMismatch'); msg.className = 'error'; again.focus(); return; }
    btn.disabled = true;
    try {
      await api.changePassword(cur.value, next.value);
      cur.value = ''; next.value = ''; again.value = '';
      msg.textContent = t('pwChanged');
      form.querySelector('#pw-weak')?.remove();
    } catch (err) {
      msg.textContent = passwordText(err); msg.className = 'error';
    }
    btn.disabled = false;
  });
  return form;
}
