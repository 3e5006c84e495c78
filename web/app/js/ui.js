// ui.js: helpers the screens share with the shell — toasts, navigation and
// per-screen cleanup.
import { h } from './util.js';

let cleanup = [];

/** toast shows a short message in the polite live region. */
export function toast(msg, kind = 'info') {
  const box = document.getElementById('toast');
  const el = h(`div.toast.toast-${kind}`, msg);
  box.append(el);
  setTimeout(() => el.remove(), 4000);
}

/** go navigates to a hash route (re-rendering when it is the current one). */
export function go(hash) {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent('hashchange'));
  else location.hash = hash;
}

/** track registers a function run when the screen is left (unsubscribe, timers). */
export function track(f) { cleanup.push(f); }

export function leaveScreen() {
  for (const f of cleanup.splice(0)) try { f(); } catch { /* ignore */ }
}
