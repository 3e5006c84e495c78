// charts.js: loads the vendored Chart.js (vendor/chart.umd.min.js: web/vendor,
// one copy for both front-ends) on first use and draws the app's charts with
// accessible fallbacks (a role="img" canvas with a label and a data table for
// screen readers).
import { h, fmtBytes } from './util.js';
import { t } from './i18n.js';

let loading = null;
export function loadChart() {
  if (window.Chart) return Promise.resolve(window.Chart);
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      const s = document.createElement('script');
      s.src = new URL('../vendor/chart.umd.min.js', import.meta.url).href;
      s.onload = () => resolve(window.Chart);
      s.onerror = () => reject(new Error('chart.js failed to load'));
      document.head.append(s);
    });
  }
  return loading;
}

export const PALETTE = ['#1d5fbf', '#c2410c', '#047857', '#7c3aed', '#b91c1c', '#0e7490', '#a16207', '#be185d', '#4d7c0f', '#475569'];

/**
 * chartBox returns a figure with a canvas and a visually hidden table of the
 * values, and draws the chart once Chart.js is there.
 * kind: 'bar' | 'doughnut'; labels: []; values: [] (bytes).
 */
export function chartBox(title, kind, labels, values, { format = fmtBytes, id } = {}) {
  // Nothing to draw says so in words: an empty ring or flat bars say nothing.
  if (!values.some((v) => v > 0)) {
    const fig = h('figure.chart.chart-empty', { id }, h('figcaption', title), h('p.muted.empty', t('noUsage')));
    fig.empty = true;
    return fig;
  }
  const canvas = h('canvas', { role: 'img', 'aria-label': title });
  // The table is inside a visually hidden box: a table is never narrower
  // than its content, and a long name in it widened the phone's page
  // (#38: 730 px).
  const table = h('div.sr-only', h('table', h('caption', title),
    h('tbody', labels.map((l, i) => h('tr', h('th', { scope: 'row' }, l), h('td', format(values[i])))))));
  const fig = h('figure.chart', { id }, h('figcaption', title), h('div.chart-canvas', canvas), table);
  loadChart().then((Chart) => {
    const ch = new Chart(canvas, {
      type: kind,
      data: { labels, datasets: [{ label: title, data: values, backgroundColor: kind === 'bar' ? PALETTE[0] : PALETTE, borderWidth: kind === 'bar' ? 0 : 1 }] },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        plugins: {
          legend: { display: kind !== 'bar', position: 'bottom' },
          tooltip: { callbacks: { label: (c) => `${c.label}: ${format(c.raw)}` } },
        },
        scales: kind === 'bar' ? { y: { beginAtZero: true, ticks: { callback: (v) => format(v) } } } : undefined,
      },
    });
    fig.chart = ch;
  }).catch(() => fig.classList.add('chart-failed'));
  return fig;
}

/**
 * shareBars draws each member's share of the month as a labelled bar (SVG,
 * no library: the dashboard loads no chart library, doc/frontends.md
 * "Budgets"); the names and numbers are text, the bars decoration.
 */
export function shareBars(title, labels, values, { format = fmtBytes, id } = {}) {
  const total = values.reduce((a, b) => a + Math.max(0, b), 0);
  if (!(total > 0)) {
    const fig = h('figure.chart.chart-empty', { id }, h('figcaption', title), h('p.muted.empty', t('noUsage')));
    fig.empty = true;
    return fig;
  }
  const NS = 'http://www.w3.org/2000/svg';
  const rows = labels.map((l, i) => {
    const pct = (100 * Math.max(0, values[i])) / total;
    const svg = document.createElementNS(NS, 'svg');
    for (const [k, v] of Object.entries({ viewBox: '0 0 100 6', preserveAspectRatio: 'none', 'aria-hidden': 'true', class: 'share-bar' })) svg.setAttribute(k, v);
    for (const [w, cls, fill] of [[100, 'share-bg', null], [pct, 'share-fg', PALETTE[i % PALETTE.length]]]) {
      const r = document.createElementNS(NS, 'rect');
      for (const [k, v] of Object.entries({ x: 0, y: 0, width: w, height: 6, class: cls })) r.setAttribute(k, v);
      if (fill) r.setAttribute('fill', fill);
      svg.append(r);
    }
    return h('li.share-row', h('span.share-name', l), h('span.share-value', `${format(values[i])} · ${pct.toFixed(1)}%`), svg);
  });
  return h('figure.chart.share', { id }, h('figcaption', title), h('ul.share-list', rows));
}

/** gauge draws the pool's remaining share as an SVG ring (no library needed, no inline style). */
export function gauge(remainingPct, label, sub) {
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', '0 0 120 120');
  svg.setAttribute('aria-hidden', 'true');
  svg.classList.add('gauge-svg');
  const r = 52;
  const c = 2 * Math.PI * r;
  const bg = document.createElementNS(NS, 'circle');
  for (const [k, v] of Object.entries({ cx: 60, cy: 60, r, class: 'gauge-bg' })) bg.setAttribute(k, v);
  const fg = document.createElementNS(NS, 'circle');
  const p = Math.max(0, Math.min(100, remainingPct));
  const level = p <= 10 ? 'low' : p <= 30 ? 'mid' : 'ok';
  for (const [k, v] of Object.entries({ cx: 60, cy: 60, r, class: `gauge-fg gauge-${level}`, 'stroke-dasharray': `${(c * p) / 100} ${c}`, transform: 'rotate(-90 60 60)' })) fg.setAttribute(k, v);
  svg.append(bg, fg);
  return h('div.gauge', { role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(Math.round(p)), 'aria-label': label, 'aria-valuetext': sub },
    svg, h('div.gauge-text', h('strong.gauge-pct', `${p.toFixed(p < 10 ? 1 : 0)}%`), h('span', sub)));
}
