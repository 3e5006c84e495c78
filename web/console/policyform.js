// The typed policy form: the constraints an agent changes most, as fields
// (limits with their unit, instant block, throttle, categories, the night
// window) instead of KEY=value lines. It reads a member's rules and gives
// back the patch ({set, remove}) of what the agent changed; keys it does not
// show (named windows, app blocks, extras, exceptions, gifts) are never in
// the patch, and a field left as it was is not either (a limit shown
// rounded is not rewritten).
import { h, MB, ruleWords } from "./ui.js";
import { t } from "./i18n.js";

export const CATEGORIES = ["VIDEO", "GAME", "SOCIAL", "MESSAGING", "WEB", "MUSIC"];
const GB = 1024 * MB;
const UNITS = { MB, GB };

const MONTHLY = "LIMIT:DATA:MONTHLY", DAILY = "LIMIT:DATA:DAILY", ACCESS = "BLOCK:ACCESS", THROTTLE = "THROTTLE:SPEED";
const START = "BLOCK:TIME:START", END = "BLOCK:TIME:END";
const blockCat = (c) => `BLOCK:CATEGORY:${c}`, allowCat = (c) => `ALLOW:CATEGORY:${c}`;

/** formKeys reports whether the typed form shows (and may change) key k. */
export function formKey(k) {
  return [MONTHLY, DAILY, ACCESS, THROTTLE, START, END].includes(k) ||
    CATEGORIES.some((c) => k === blockCat(c) || k === allowCat(c));
}

/**
 * policyForm builds the form for rules. read() returns {patch} or {error}
 * (a field the agent filled in wrongly, in words). With readOnly the
 * fields are shown disabled: a care agent sees the policy, changes nothing.
 */
export function policyForm(rules, { readOnly = false, onsubmit } = {}) {
  const f = policyFields(rules, { readOnly });
  const err = h("p", { class: "error", role: "alert", id: "policy-form-error" });
  const form = h("form", { id: "policy-form", "aria-labelledby": "policy-form-h", onsubmit: (ev) => {
    ev.preventDefault();
    err.textContent = "";
    const r = f.read();
    if (r.error) { err.textContent = r.error; return; }
    onsubmit(r.patch);
  } },
  h("h3", { id: "policy-form-h" }, t("formTitle")), f.element, err,
  h("div", { class: "toolbar", "data-write": "" }, h("button", { type: "submit" }, t("formSave"))));
  return form;
}

/**
 * policyFields is the typed fields of rules without a form of their own
 * (a template's editor holds them in its form): element, and read() →
 * {patch} or {error}, as policyForm's.
 */
export function policyFields(rules, { readOnly = false } = {}) {
  const fields = [
    limitField("pf-monthly", "monthlyLimit", MONTHLY, rules[MONTHLY]),
    limitField("pf-daily", "dailyLimit", DAILY, rules[DAILY]),
    throttleField(rules[THROTTLE]),
    blockField(rules[ACCESS]),
    categoryField("pf-block", "blockedCats", blockCat, rules),
    categoryField("pf-allow", "allowedCats", allowCat, rules),
    nightField(rules[START], rules[END]),
  ];
  const others = Object.keys(rules).filter((k) => !formKey(k)).sort();
  const element = h("div", {},
    h("fieldset", { class: "policy-form", disabled: readOnly }, h("legend", { class: "sr-only" }, t("formTitle")), fields.map((f) => f.wrap)),
    others.length ? h("p", { class: "muted", id: "policy-form-others" },
      t("formOther", { list: others.map((k) => ruleWords(k, rules[k])).join(", ") })) : null);

  function read() {
    const set = {}, remove = [];
    for (const f of fields) {
      if (!f.changed()) continue;
      const r = f.read();
      if (r.error) return r;
      for (const [k, v] of Object.entries(r.values)) {
        if (v === undefined) { if (k in rules) remove.push(k); } else if (rules[k] !== v) set[k] = v;
      }
    }
    return { patch: { set, remove } };
  }
  return { element, read };
}

// Each field: wrap (its element), changed() (the agent touched it), read()
// → {values: {key: value or undefined to remove}} or {error}.

// snapshot remembers a field's inputs as first shown, for changed().
function snapshot(inputs) {
  const state = () => inputs.map((i) => (i.type === "checkbox" ? String(i.checked) : i.value)).join("\u0000");
  const first = state();
  return () => state() !== first;
}

function limitField(id, what, key, value) {
  let amount = "", unit = "MB";
  if (/^\d+$/.test(value || "")) {
    const n = Number(value);
    if (n >= GB && n % GB === 0) { amount = String(n / GB); unit = "GB"; } else amount = String(Math.round((n / MB) * 100) / 100);
  }
  const num = h("input", { type: "number", id: `${id}-amount`, name: `${id}-amount`, min: 0, step: "any", inputmode: "decimal", value: amount, class: "amount" });
  const sel = h("select", { id: `${id}-unit`, name: `${id}-unit` }, Object.keys(UNITS).map((u) => h("option", { value: u }, u)));
  sel.value = unit;
  const label = t(what);
  return {
    wrap: h("fieldset", { class: "pf" }, h("legend", {}, label),
      h("div", { class: "inline" },
        h("label", { for: num.id, class: "sr-only" }, t("amount", { what: label })), num,
        h("label", { for: sel.id, class: "sr-only" }, t("unit", { what: label })), sel),
      h("p", { class: "muted hint" }, t("emptyNoLimit"))),
    changed: snapshot([num, sel]),
    read() {
      const v = num.value.trim();
      if (!v) return { values: { [key]: undefined } };
      const n = Number(v);
      if (!Number.isFinite(n) || n < 0) return { error: t("formBadAmount", { what: label }) };
      return { values: { [key]: String(Math.round(n * UNITS[sel.value])) } };
    },
  };
}

function throttleField(value) {
  const num = h("input", { type: "number", id: "pf-throttle", name: "pf-throttle", min: 1, step: 1, inputmode: "numeric", value: value || "", class: "amount" });
  return {
    wrap: h("fieldset", { class: "pf" }, h("legend", {}, h("label", { for: num.id }, t("throttle"))),
      h("div", { class: "inline" }, num), h("p", { class: "muted hint" }, t("emptyNoThrottle"))),
    changed: snapshot([num]),
    read() {
      const v = num.value.trim();
      if (!v) return { values: { [THROTTLE]: undefined } };
      if (!/^\d+$/.test(v) || Number(v) < 1) return { error: t("formBadThrottle") };
      return { values: { [THROTTLE]: String(Number(v)) } };
    },
  };
}

function blockField(value) {
  const cb = h("input", { type: "checkbox", id: "pf-access", name: "pf-access", checked: value !== undefined });
  return {
    wrap: h("fieldset", { class: "pf" }, h("legend", {}, t("instantBlock")),
      h("label", { class: "check", for: cb.id }, cb, t("instantBlockOn")), h("p", { class: "muted hint" }, t("instantBlockHelp"))),
    changed: snapshot([cb]),
    read: () => ({ values: { [ACCESS]: cb.checked ? "1" : undefined } }),
  };
}

function categoryField(id, what, keyOf, rules) {
  const boxes = CATEGORIES.map((c) => ({ c, cb: h("input", { type: "checkbox", id: `${id}-${c}`, name: `${id}-${c}`, value: c, checked: keyOf(c) in rules }) }));
  return {
    wrap: h("fieldset", { class: "pf wide" }, h("legend", {}, t(what)),
      h("div", { class: "checks" }, boxes.map(({ c, cb }) => h("label", { class: "check", for: cb.id }, cb, t(`cat.${c}`))))),
    changed: snapshot(boxes.map((b) => b.cb)),
    read: () => ({ values: Object.fromEntries(boxes.map(({ c, cb }) => [keyOf(c), cb.checked ? "1" : undefined])) }),
  };
}

function nightField(start, end) {
  const asTime = (v) => (/^\d{4}$/.test(v || "") ? `${v.slice(0, 2)}:${v.slice(2)}` : "");
  const from = h("input", { type: "time", id: "pf-night-start", name: "pf-night-start", value: asTime(start) });
  const to = h("input", { type: "time", id: "pf-night-end", name: "pf-night-end", value: asTime(end) });
  return {
    wrap: h("fieldset", { class: "pf wide" }, h("legend", {}, t("nightWindow")),
      h("div", { class: "inline" },
        h("label", { for: from.id }, t("nightStart")), from,
        h("label", { for: to.id }, t("nightEnd")), to),
      h("p", { class: "muted hint" }, t("nightHelp"))),
    changed: snapshot([from, to]),
    read() {
      const a = from.value, b = to.value;
      if (!a && !b) return { values: { [START]: undefined, [END]: undefined } };
      if (!a || !b) return { error: t("formBadNight") };
      const hhmm = (v) => v.slice(0, 5).replace(":", "");
      return { values: { [START]: hhmm(a), [END]: hhmm(b) } };
    },
  };
}
