// Operations (live decisions/s by code, lags, dead-letter counts, Redis state,
// polled) and the dead-letter browser (select + replay).
import * as api from "./api.js";
import { h, fill, field, table, when, num, bytes, say, busy, errorText, decisionWords, chart, chartBox, PALETTE } from "./ui.js";
import { t, has, locale } from "./i18n.js";

const POLL_MS = 3000;
const KEEP = 60; // samples on the live charts (3 minutes)

// One colour per decision code, the same on every visit.
const CODE_COLOURS = {
  ALLOWED: "#1b6b35", BLOCKED_ACCESS: "#b3261e", BLOCKED_APP: "#8a4b00", BLOCKED_TIME: "#6b2fa0",
  BLOCKED_LIMIT_DAILY: "#00696f", BLOCKED_LIMIT_MONTHLY: "#a1286a", BLOCKED_FAMILY_QUOTA: "#0b57d0",
  BLOCKED_NOT_MEMBER: "#5f6368",
};

const sum = (o) => Object.values(o || {}).reduce((a, b) => a + Number(b || 0), 0);

export async function operationsScreen(root) {
  const tiles = h("dl", { class: "stats", id: "ops-tiles" });
  const decisions = chartBox(t("opsDecisionsChart"));
  const lag = chartBox(t("opsLagChart"), true);
  const detail = h("div", { class: "grid" });
  const stamp = h("p", { class: "muted", id: "ops-at" });
  fill(root, h("h1", {}, t("opsTitle")), stamp, tiles,
    h("section", { class: "card", "aria-labelledby": "ops-dec-h" }, h("h2", { id: "ops-dec-h" }, t("opsDecisions")), decisions.box),
    h("section", { class: "card", "aria-labelledby": "ops-lag-h" }, h("h2", { id: "ops-lag-h" }, t("opsLag")), lag.box),
    detail);

  const labels = [];
  const codeSeries = new Map(); // code -> number[]
  const lagSeries = { processor: [], notifier: [], writeBehind: [] };
  const decChart = chart(decisions.canvas, { type: "line", data: { labels, datasets: [] },
    options: { maintainAspectRatio: false, animation: false, scales: { y: { beginAtZero: true, title: { display: true, text: t("perSecond") } } } } });
  const lagChart = chart(lag.canvas, { type: "line", data: { labels, datasets: [
    { label: t("lag.processor"), data: lagSeries.processor, borderColor: PALETTE[0], backgroundColor: PALETTE[0] },
    { label: t("lag.notifier"), data: lagSeries.notifier, borderColor: PALETTE[1], backgroundColor: PALETTE[1] },
    { label: t("lag.writeBehind"), data: lagSeries.writeBehind, borderColor: PALETTE[2], backgroundColor: PALETTE[2] },
  ] }, options: { maintainAspectRatio: false, animation: false, scales: { y: { beginAtZero: true } } } });

  function push(o) {
    labels.push(new Date(o.at).toLocaleTimeString(locale(), { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" }));
    const n = labels.length;
    for (const code of Object.keys(o.decisionsPerSecond || {})) {
      if (!codeSeries.has(code)) {
        const arr = new Array(n - 1).fill(0);
        codeSeries.set(code, arr);
        const c = CODE_COLOURS[code] || PALETTE[codeSeries.size % PALETTE.length];
        decChart.data.datasets.push({ label: decisionWords(code), data: arr, borderColor: c, backgroundColor: c });
      }
    }
    for (const [code, arr] of codeSeries) arr.push(Number((o.decisionsPerSecond || {})[code] || 0));
    lagSeries.processor.push(sum(o.processorLag));
    lagSeries.notifier.push(sum(o.notifierLag));
    lagSeries.writeBehind.push(sum(o.writeBehindLag));
    if (labels.length > KEEP) {
      labels.shift();
      for (const arr of codeSeries.values()) arr.shift();
      for (const arr of Object.values(lagSeries)) arr.shift();
    }
    decChart.update();
    lagChart.update();
  }

  function render(o) {
    stamp.textContent = t("opsUpdated", { when: when(o.at), s: POLL_MS / 1000 }) + (o.windowSeconds ? t("opsWindow", { s: num(o.windowSeconds, 1) }) : "");
    const redis = o.redisStale === undefined ? [t("redisUnknown"), "neutral"] : o.redisStale ? [t("redisStale"), "bad"] : [t("redisOk"), "ok"];
    const kafka = o.kafka === "ok" ? ["ok", t("kafkaOk")] : o.kafka === "unavailable" ? ["bad", t("kafkaDown")] : ["neutral", o.kafka || t("unknown")];
    fill(tiles,
      tile(t("tileDecisions"), num(o.totalPerSecond ?? sum(o.decisionsPerSecond), 1), "ops-total"),
      tile(t("tileRecords"), num(o.recordsPerSecond, 1)),
      tile(t("tileProcLag"), num(sum(o.processorLag))),
      tile(t("tileNotifLag"), num(sum(o.notifierLag))),
      tile(t("tileDlt"), num(sum(o.deadLetters)), "ops-dlt"),
      tile(t("tileDltRate"), num(o.deadLettersPerSecond, 2)),
      tile(t("tileRedis"), h("span", { class: `badge ${redis[1]}` }, redis[0]), "ops-redis"),
      tile(t("tileKafka"), h("span", { class: `badge ${kafka[0]}` }, kafka[1])));
    const kv = (title, obj, fmt = (v) => num(v), name = (k) => k) => h("section", { class: "card" }, table(title, [t("colMetric"), [t("colValueNum"), "num"]],
      Object.keys(obj || {}).length
        ? Object.keys(obj).sort().map((k) => h("tr", {}, h("th", { scope: "row", class: name(k) === k ? "mono" : undefined }, name(k)), h("td", { class: "num" }, fmt(obj[k]))))
        : h("tr", {}, h("td", { colspan: 2, class: "muted" }, t("noneInWindow")))));
    fill(detail,
      kv(t("opsByCode"), o.decisionsPerSecond, (v) => num(v, 1), decisionWords),
      kv(t("opsProcByTopic"), o.processorLag),
      kv(t("opsNotifByTopic"), o.notifierLag),
      kv(t("opsWbByTopic"), o.writeBehindLag),
      h("section", { class: "card" }, table(t("opsDltTopics"), [t("colTopic"), [t("colRecords"), "num"]],
        Object.keys(o.deadLetters || {}).sort().map((k) => h("tr", {}, h("th", { scope: "row", class: "mono" }, k),
          h("td", { class: "num" }, o.deadLetters[k] ? h("a", { href: `#/dead-letters?topic=${encodeURIComponent(k)}` }, num(o.deadLetters[k])) : "0"))))),
      o.sources ? h("section", { class: "card" }, table(t("opsSources"), [t("colSource"), t("colState")],
        o.sources.map((s) => h("tr", {}, h("th", { scope: "row", class: "mono" }, s.source),
          h("td", {}, h("span", { class: `badge ${s.ok ? "ok" : "bad"}`, title: s.error || undefined }, s.ok ? t("ok") : t("failing"))))))) : null);
  }

  let stopped = false;
  let timer = null;
  async function tick() {
    try {
      const o = await api.operations();
      if (stopped) return;
      render(o);
      push(o);
    } catch (e) {
      if (!stopped) say(t("opsFailed", { msg: errorText(e) }), true);
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  }
  await tick();
  return () => { stopped = true; clearTimeout(timer); };
}

function tile(label, value, id) {
  return h("div", { class: "stat" }, h("dt", {}, label), h("dd", { id }, value));
}

const DLT_TOPICS = ["usage-events.DLT", "policy-updated.DLT", "usage-persist.DLT", "notification-events.DLT"];

export async function deadLettersScreen(root, { query }) {
  const topic = field(t("dltTopic"), { options: [["", t("dltAll")], ...DLT_TOPICS.map((t) => [t, t])], value: query.get("topic") || "" }, "select");
  const out = h("section", { class: "card", "aria-labelledby": "dlt-h" });
  const report = h("section", { class: "card", id: "replay-report", hidden: true, "aria-labelledby": "replay-h" });
  fill(root, h("h1", {}, t("dltTitle")),
    h("section", { class: "card" }, h("form", { class: "row", onsubmit: (ev) => {
      ev.preventDefault();
      // "보기" reads the records again even when the address stays the
      // same (#38: it only set an unchanged fragment and showed nothing new).
      const next = `#/dead-letters${topic.input.value ? `?topic=${encodeURIComponent(topic.input.value)}` : ""}`;
      if (location.hash === next) window.dispatchEvent(new HashChangeEvent("hashchange"));
      else location.hash = next;
    } }, topic.wrap, h("div", {}, h("button", { type: "submit", class: "secondary" }, t("show"))),
    h("p", { class: "muted" }, t("dltHelp")))),
    report, out);

  const boxes = [];
  const tbody = h("tbody");
  const more = h("div");
  const selectAll = h("input", { type: "checkbox", id: "dlt-all", onchange: (ev) => { for (const b of boxes) if (!b.cb.disabled) b.cb.checked = ev.target.checked; } });
  const replayBtn = h("button", { type: "button", id: "replay-selected", "data-write": "", onclick: replay }, t("replaySelected"));
  fill(out, h("h2", { id: "dlt-h" }, query.get("topic") || t("dltAll")),
    h("div", { class: "toolbar", "data-write": "" }, selectAll, h("label", { for: "dlt-all" }, t("dltSelectAll")), replayBtn),
    h("table", {}, h("caption", { class: "sr-only" }, t("dltCaption")),
      h("thead", {}, h("tr", {}, [t("colSelect"), t("colDeadLettered"), t("colRecord"), t("colOrigin"), t("colReason"), t("colKey"), t("colPayload"), t("colReplay")].map((c) => h("th", { scope: "col" }, c)))),
      tbody), more);

  async function page(before) {
    let p;
    try {
      p = await api.deadLetters({ topic: query.get("topic") || undefined, limit: 50, before });
    } catch (e) {
      if (e.status === 503) { fill(out, h("h2", { id: "dlt-h" }, t("dltTitle")), h("p", { class: "conflict" }, t("dltNotConfigured"))); return; }
      throw e;
    }
    const recs = p.records || [];
    if (!recs.length && !before) tbody.append(h("tr", {}, h("td", { colspan: 8, id: "dlt-empty" }, t("dltEmpty"))));
    for (const r of recs) {
      const id = `${r.topic}/${r.partition}/${r.offset}`;
      const cb = h("input", { type: "checkbox", "aria-label": t("selectRecord", { id }), "data-record": id, "data-write": "", disabled: !!r.replayed });
      boxes.push({ cb, r });
      tbody.append(h("tr", { "data-record": id },
        h("td", {}, cb),
        h("td", {}, when(r.time)),
        h("td", { class: "mono" }, id, r.eventType ? h("div", { class: "muted" }, r.eventType) : null,
          r.replayedFrom ? h("div", { class: "muted" }, t("replayOf", { id: r.replayedFrom })) : null),
        h("td", { class: "mono" }, r.originTopic || "—", r.originPartition >= 0 ? ` / ${r.originPartition} / ${r.originOffset}` : "",
          r.channel ? h("div", { class: "muted" }, t("channel", { c: r.channel })) : null),
        // Why, in words; the consumer's own text (for developers) folded.
        h("td", {}, dltReason(r), r.reason ? h("details", { class: "raw-reason" }, h("summary", {}, t("dltRawReason")), h("pre", { class: "mono" }, r.reason)) : null),
        h("td", { class: "mono" }, r.key || "—"),
        h("td", {}, h("details", {}, h("summary", {}, t(r.payloadEncoding === "json" ? "dltPayloadJSON" : "dltPayloadBytes", { bytes: bytes(r.payloadBytes) })), h("pre", { class: "mono" }, pretty(r)))),
        h("td", { "data-replayed": r.replayed ? "yes" : "no" }, r.replayed
          ? h("span", { class: "badge ok" }, t("replayedBy", { when: when(r.replayed.at), by: r.replayed.by }))
          : h("span", { class: "badge neutral" }, t("notReplayed")))));
    }
    fill(more, p.nextBefore ? h("button", { type: "button", class: "secondary", onclick: () => busy(() => page(p.nextBefore)) }, t("olderRecords")) : null);
  }

  async function replay() {
    const records = boxes.filter((b) => b.cb.checked).map(({ r }) => ({ topic: r.topic, partition: r.partition, offset: r.offset }));
    if (!records.length) { say(t("selectOneRecord"), true); return; }
    const rep = await busy(() => api.replayDeadLetters(records));
    if (!rep) return;
    report.hidden = false;
    fill(report, h("h2", { id: "replay-h" }, t("replayTitle")),
      h("p", { id: "replay-summary", "data-replayed": rep.replayed }, t("replayDone", { ok: rep.replayed, already: rep.alreadyReplayed, failed: rep.failed })),
      table(null, [t("colRecord"), t("colSentTo"), t("colStatus"), t("colError")], (rep.results || []).map((x) => h("tr", {},
        h("td", { class: "mono" }, `${x.topic}/${x.partition}/${x.offset}`),
        h("td", { class: "mono" }, x.originTopic || "—"),
        h("td", {}, h("span", { class: `badge ${x.status === "replayed" ? "ok" : x.status === "already-replayed" ? "warn" : "bad"}` }, has(`replay.${x.status}`) ? t(`replay.${x.status}`) : x.status)),
        h("td", {}, x.error || "")))));
    say(t("replaySaid", { n: rep.replayed }), rep.failed > 0);
    boxes.length = 0;
    tbody.replaceChildren();
    selectAll.checked = false;
    await page();
  }

  await page();
}

// dltReason says in words why a record was dead-lettered, from the
// consumer's reason (free text written for developers, kept below it).
function dltReason(r) {
  const why = String(r.reason || "").toLowerCase();
  if (!why) return t("dltWhy.unknown");
  if (r.channel || /attempts failed|channel/.test(why)) return t("dltWhy.channel");
  if (/queue (is )?full|queue full/.test(why)) return t("dltWhy.queue");
  if (/too (big|large)|exceeds/.test(why)) return t("dltWhy.tooBig");
  if (/too old|older than|dedupe window|max(imum)? age/.test(why)) return t("dltWhy.tooOld");
  if (/on topic|unexpected|unknown (event|sub)|event type/.test(why)) return t("dltWhy.wrongTopic");
  if (/json|decode|malformed|invalid|parse|payload|missing|must/.test(why)) return t("dltWhy.unreadable");
  if (/member|family|not provisioned/.test(why)) return t("dltWhy.family");
  return t("dltWhy.other");
}

function pretty(r) {
  if (r.payloadEncoding === "json") {
    try { return JSON.stringify(JSON.parse(r.payload), null, 2); } catch { /* shown as is */ }
  }
  return r.payload || "";
}
