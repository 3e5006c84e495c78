// Operations (live decisions/s by code, lags, dead-letter counts, Redis state,
// polled) and the dead-letter browser (select + replay).
import * as api from "./api.js";
import { h, fill, field, table, when, num, bytes, say, busy, chart, chartBox, PALETTE } from "./ui.js";

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
  const decisions = chartBox("Decisions per second by decision code, live");
  const lag = chartBox("Consumer lag in records, live", true);
  const detail = h("div", { class: "grid" });
  const stamp = h("p", { class: "muted", id: "ops-at" });
  fill(root, h("h1", {}, "Operations"), stamp, tiles,
    h("section", { class: "card", "aria-labelledby": "ops-dec-h" }, h("h2", { id: "ops-dec-h" }, "Decisions per second by code"), decisions.box),
    h("section", { class: "card", "aria-labelledby": "ops-lag-h" }, h("h2", { id: "ops-lag-h" }, "Lag (records behind)"), lag.box),
    detail);

  const labels = [];
  const codeSeries = new Map(); // code -> number[]
  const lagSeries = { processor: [], notifier: [], writeBehind: [] };
  const decChart = chart(decisions.canvas, { type: "line", data: { labels, datasets: [] },
    options: { maintainAspectRatio: false, animation: false, scales: { y: { beginAtZero: true, title: { display: true, text: "decisions/s" } } } } });
  const lagChart = chart(lag.canvas, { type: "line", data: { labels, datasets: [
    { label: "processor", data: lagSeries.processor, borderColor: PALETTE[0], backgroundColor: PALETTE[0] },
    { label: "notifier", data: lagSeries.notifier, borderColor: PALETTE[1], backgroundColor: PALETTE[1] },
    { label: "write-behind", data: lagSeries.writeBehind, borderColor: PALETTE[2], backgroundColor: PALETTE[2] },
  ] }, options: { maintainAspectRatio: false, animation: false, scales: { y: { beginAtZero: true } } } });

  function push(o) {
    labels.push(new Date(o.at).toLocaleTimeString("en-GB", { hour12: false }));
    const n = labels.length;
    for (const code of Object.keys(o.decisionsPerSecond || {})) {
      if (!codeSeries.has(code)) {
        const arr = new Array(n - 1).fill(0);
        codeSeries.set(code, arr);
        const c = CODE_COLOURS[code] || PALETTE[codeSeries.size % PALETTE.length];
        decChart.data.datasets.push({ label: code, data: arr, borderColor: c, backgroundColor: c });
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
    stamp.textContent = `Updated ${when(o.at)} · refreshes every ${POLL_MS / 1000} s${o.windowSeconds ? ` · rates over ${num(o.windowSeconds, 1)} s` : ""}`;
    const redis = o.redisStale === undefined ? ["unknown", "neutral"] : o.redisStale ? ["STALE: judging paused", "bad"] : ["trusted", "ok"];
    const kafka = o.kafka === "ok" ? "ok" : o.kafka === "unavailable" ? "bad" : "neutral";
    fill(tiles,
      tile("Decisions/s", num(o.totalPerSecond ?? sum(o.decisionsPerSecond), 1), "ops-total"),
      tile("Records consumed/s", num(o.recordsPerSecond, 1)),
      tile("Processor lag", num(sum(o.processorLag))),
      tile("Notifier lag", num(sum(o.notifierLag))),
      tile("Dead letters held", num(sum(o.deadLetters)), "ops-dlt"),
      tile("Dead letters/s", num(o.deadLettersPerSecond, 2)),
      tile("Redis", h("span", { class: `badge ${redis[1]}` }, redis[0]), "ops-redis"),
      tile("Kafka", h("span", { class: `badge ${kafka}` }, o.kafka || "unknown")));
    const kv = (title, obj, fmt = (v) => num(v)) => h("section", { class: "card" }, table(title, ["Name", ["Value", "num"]],
      Object.keys(obj || {}).length
        ? Object.keys(obj).sort().map((k) => h("tr", {}, h("th", { scope: "row", class: "mono" }, k), h("td", { class: "num" }, fmt(obj[k]))))
        : h("tr", {}, h("td", { colspan: 2, class: "muted" }, "None in this window"))));
    fill(detail,
      kv("Decisions/s by code", o.decisionsPerSecond, (v) => num(v, 1)),
      kv("Processor lag by topic", o.processorLag),
      kv("Notifier lag by topic", o.notifierLag),
      kv("Write-behind lag by topic", o.writeBehindLag),
      h("section", { class: "card" }, table("Dead-letter topics (records held)", ["Topic", ["Records", "num"]],
        Object.keys(o.deadLetters || {}).sort().map((k) => h("tr", {}, h("th", { scope: "row", class: "mono" }, k),
          h("td", { class: "num" }, o.deadLetters[k] ? h("a", { href: `#/dead-letters?topic=${encodeURIComponent(k)}` }, num(o.deadLetters[k])) : "0"))))),
      o.sources ? h("section", { class: "card" }, table("Metric sources", ["Source", "State"],
        o.sources.map((s) => h("tr", {}, h("th", { scope: "row", class: "mono" }, s.source),
          h("td", {}, h("span", { class: `badge ${s.ok ? "ok" : "bad"}` }, s.ok ? "ok" : s.error || "failing")))))) : null);
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
      if (!stopped) say(`Operations: ${e.message}`, true);
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
  const topic = field("Topic", { options: [["", "All dead-letter topics"], ...DLT_TOPICS.map((t) => [t, t])], value: query.get("topic") || "" }, "select");
  const out = h("section", { class: "card", "aria-labelledby": "dlt-h" });
  const report = h("section", { class: "card", id: "replay-report", hidden: true, "aria-labelledby": "replay-h" });
  fill(root, h("h1", {}, "Dead letters"),
    h("section", { class: "card" }, h("form", { class: "row", onsubmit: (ev) => {
      ev.preventDefault();
      location.hash = `#/dead-letters${topic.input.value ? `?topic=${encodeURIComponent(topic.input.value)}` : ""}`;
    } }, topic.wrap, h("div", {}, h("button", { type: "submit", class: "secondary" }, "Show")),
    h("p", { class: "muted" }, "Records a consumer could not process, newest first. Fix the cause, select the records and replay them to the topic they came from (each record is replayed at most once)."))),
    report, out);

  const boxes = [];
  const tbody = h("tbody");
  const more = h("div");
  const selectAll = h("input", { type: "checkbox", id: "dlt-all", onchange: (ev) => { for (const b of boxes) if (!b.cb.disabled) b.cb.checked = ev.target.checked; } });
  const replayBtn = h("button", { type: "button", id: "replay-selected", "data-write": "", onclick: replay }, "Replay selected");
  fill(out, h("h2", { id: "dlt-h" }, query.get("topic") || "All dead-letter topics"),
    h("div", { class: "toolbar", "data-write": "" }, selectAll, h("label", { for: "dlt-all" }, "Select all shown"), replayBtn),
    h("table", {}, h("caption", { class: "sr-only" }, "Dead-letter records"),
      h("thead", {}, h("tr", {}, ["Select", "Dead-lettered", "Record", "Origin", "Reason", "Key", "Payload", "Replay"].map((c) => h("th", { scope: "col" }, c)))),
      tbody), more);

  async function page(before) {
    let p;
    try {
      p = await api.deadLetters({ topic: query.get("topic") || undefined, limit: 50, before });
    } catch (e) {
      if (e.status === 503) { fill(out, h("h2", { id: "dlt-h" }, "Dead letters"), h("p", { class: "conflict" }, "The dead-letter browser is not configured on this server (no Kafka connection).")); return; }
      throw e;
    }
    const recs = p.records || [];
    if (!recs.length && !before) tbody.append(h("tr", {}, h("td", { colspan: 8, id: "dlt-empty" }, "No dead-letter records.")));
    for (const r of recs) {
      const id = `${r.topic}/${r.partition}/${r.offset}`;
      const cb = h("input", { type: "checkbox", "aria-label": `Select ${id}`, "data-record": id, "data-write": "", disabled: !!r.replayed });
      boxes.push({ cb, r });
      tbody.append(h("tr", { "data-record": id },
        h("td", {}, cb),
        h("td", {}, when(r.time)),
        h("td", { class: "mono" }, id, r.eventType ? h("div", { class: "muted" }, r.eventType) : null,
          r.replayedFrom ? h("div", { class: "muted" }, `replay of ${r.replayedFrom}`) : null),
        h("td", { class: "mono" }, r.originTopic || "—", r.originPartition >= 0 ? ` / ${r.originPartition} / ${r.originOffset}` : "",
          r.channel ? h("div", { class: "muted" }, `channel ${r.channel}`) : null),
        h("td", {}, r.reason || "—"),
        h("td", { class: "mono" }, r.key || "—"),
        h("td", {}, h("details", {}, h("summary", {}, `${r.payloadEncoding || "bytes"}, ${bytes(r.payloadBytes)}`), h("pre", { class: "mono" }, pretty(r)))),
        h("td", { "data-replayed": r.replayed ? "yes" : "no" }, r.replayed
          ? h("span", { class: "badge ok" }, `replayed ${when(r.replayed.at)} by #${r.replayed.by}`)
          : h("span", { class: "badge neutral" }, "not replayed"))));
    }
    fill(more, p.nextBefore ? h("button", { type: "button", class: "secondary", onclick: () => busy(() => page(p.nextBefore)) }, "Older records") : null);
  }

  async function replay() {
    const records = boxes.filter((b) => b.cb.checked).map(({ r }) => ({ topic: r.topic, partition: r.partition, offset: r.offset }));
    if (!records.length) { say("Select at least one record.", true); return; }
    const rep = await busy(() => api.replayDeadLetters(records));
    if (!rep) return;
    report.hidden = false;
    fill(report, h("h2", { id: "replay-h" }, "Replay result"),
      h("p", {}, `${rep.replayed} replayed, ${rep.alreadyReplayed} already replayed before, ${rep.failed} failed.`),
      table(null, ["Record", "Sent to", "Status", "Error"], (rep.results || []).map((x) => h("tr", {},
        h("td", { class: "mono" }, `${x.topic}/${x.partition}/${x.offset}`),
        h("td", { class: "mono" }, x.originTopic || "—"),
        h("td", {}, h("span", { class: `badge ${x.status === "replayed" ? "ok" : x.status === "already-replayed" ? "warn" : "bad"}` }, x.status)),
        h("td", {}, x.error || "")))));
    say(`${rep.replayed} record(s) replayed.`, rep.failed > 0);
    boxes.length = 0;
    tbody.replaceChildren();
    selectAll.checked = false;
    await page();
  }

  await page();
}

function pretty(r) {
  if (r.payloadEncoding === "json") {
    try { return JSON.stringify(JSON.parse(r.payload), null, 2); } catch { /* shown as is */ }
  }
  return r.payload || "";
}
