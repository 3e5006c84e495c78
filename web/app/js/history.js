// history.js: the family's 충전/선물 내역 (top-ups and gifts of a month,
// per member) and a top-up's receipt (영수증), as a carrier's app shows
// them: the offer, its price with the VAT in it, how it is billed.
import * as api from './api.js';
import { t, locale } from './i18n.js';
import { h, fmtBytes, fmtTime } from './util.js';
import { state, refreshDashboard } from './store.js';
import { go } from './ui.js';

const won = (n) => Number(n || 0).toLocaleString(locale());

// months are this month and the five before it, YYYYMM, in the service zone
// the dashboard reports (its month).
function months(current) {
  const out = [];
  let y = Number(current.slice(0, 4));
  let m = Number(current.slice(4, 6));
  for (let i = 0; i < 6; i++) {
    out.push(`${y}${String(m).padStart(2, '0')}`);
    if (--m === 0) { m = 12; y--; }
  }
  return out;
}

const monthText = (p) => t('receiptMonthValue', { y: p.slice(0, 4), m: String(Number(p.slice(4, 6))) });

/** historyView is #/history[/<YYYYMM>[/<member>]]. */
export async function historyView(root, [month, who]) {
  const s = api.currentSession();
  const owner = s.role !== 'MEMBER';
  const d = state.dash || await refreshDashboard();
  const member = owner ? Number(who) || 0 : 0;
  const h0 = await api.history(s.familyId, month || '', member);
  const pickMonth = h('select#history-month', months(d.month).map((p) => h('option', { value: p, selected: p === h0.month }, monthText(p))));
  const pickWho = owner ? h('select#history-member', [h('option', { value: '0' }, t('historyEveryone')),
    ...d.members.map((m) => h('option', { value: String(m.customerId), selected: m.customerId === member }, m.name))]) : null;
  const reload = () => go(`#/history/${pickMonth.value}${pickWho && pickWho.value !== '0' ? `/${pickWho.value}` : ''}`);
  pickMonth.addEventListener('change', reload);
  pickWho?.addEventListener('change', reload);

  const items = h0.entries.map((e) => {
    if (e.kind === 'TOPUP') {
      const what = e.offerId ? t('histTopup', { bytes: fmtBytes(e.bytes) }) : t('histTopupFree', { bytes: fmtBytes(e.bytes) });
      const price = e.priceKrw != null && e.offerId ? h('span.price', t('histPrice', { price: won(e.priceKrw) })) : null;
      const rcpt = owner ? h('a.button.small', { href: `#/receipt/${e.id}`, id: `receipt-link-${e.id}` }, t('seeReceipt')) : null;
      return h('li.history-item.topup', { id: `history-topup-${e.id}`, 'data-kind': 'TOPUP' },
        h('div.history-head', h('strong', what), price),
        h('p.muted', `${t('histBy', { name: e.by.name || '' })} · ${fmtTime(e.at)}`), rcpt);
    }
    return h('li.history-item.gift', { id: `history-gift-${e.id}`, 'data-kind': 'GIFT' },
      h('div.history-head', h('strong', t('histGift', { from: e.from?.name || '', to: e.to?.name || '', bytes: fmtBytes(e.bytes) }))),
      h('p.muted', `${t('histBy', { name: e.by.name || '' })} · ${fmtTime(e.at)}`));
  });
  const totals = h0.priceKrw != null
    ? t('historyTotals', { bytes: fmtBytes(h0.topUpBytes), price: won(h0.priceKrw), gifts: fmtBytes(h0.giftBytes) })
    : t('historyTotalsMember', { bytes: fmtBytes(h0.topUpBytes), gifts: fmtBytes(h0.giftBytes) });
  root.append(h('section.card#history', { 'aria-labelledby': 'history-h' },
    h('h2#history-h', t('historyTitle')),
    h('div.row', h('label', { for: 'history-month' }, t('historyMonth')), pickMonth,
      pickWho ? h('label', { for: 'history-member' }, t('historyWho')) : null, pickWho),
    h('p#history-totals', totals),
    items.length ? h('ul.history#history-list', items) : h('p.muted#history-empty', t('historyEmpty'))));
}

/** receiptView is #/receipt/<topUpId>: what a top-up bought and cost. */
export async function receiptView(root, [id]) {
  const s = api.currentSession();
  const r = await api.receipt(s.familyId, id);
  const row = (label, value, key) => h('div.receipt-row', { id: key ? `receipt-${key}` : null }, h('dt', label), h('dd', value));
  root.append(h('section.card.receipt#receipt', { 'aria-labelledby': 'receipt-h', 'data-id': String(r.id) },
    h('h2#receipt-h', t('receiptTitle')),
    h('dl',
      row(t('receiptFamily'), r.familyName),
      row(t('receiptOffer'), r.offerId ? fmtBytes(r.bytes) : t('histTopupFree', { bytes: fmtBytes(r.bytes) }), 'offer'),
      row(t('receiptMonth'), monthText(r.month)),
      row(t('receiptSupply'), t('histPrice', { price: won(r.supplyKrw) }), 'supply'),
      row(t('receiptVat', { rate: r.vatRate }), t('histPrice', { price: won(r.vatKrw) }), 'vat'),
      row(t('receiptTotal'), h('strong', t('histPrice', { price: won(r.priceKrw) })), 'total'),
      row(t('receiptBilling'), t(`billing.${r.billing}`), 'billing'),
      row(t('receiptBuyer'), r.boughtBy?.name || ''),
      row(t('receiptAt'), new Date(r.createdAt).toLocaleString(locale(), { dateStyle: 'medium', timeStyle: 'short' }))),
    h('p', h('a.button#receipt-back', { href: `#/history/${r.month}` }, t('receiptBack')))));
}
