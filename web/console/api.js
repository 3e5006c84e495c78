// Every call the back office makes to the DPCS public API lives here, so a
// renamed route is a one-line change. Shapes are those of /openapi.json.

const SESSION = "dpcs.console.session";

/**
 * ApiError carries the HTTP status (0: the server was not reached), the
 * RFC 9457 problem details and Retry-After. Its message is the server's
 * text, for the console's logs: what the agent reads is errorText (ui.js).
 */
export class ApiError extends Error {
  constructor(status, problem, retryAfter, code) {
    const detail = problem && (problem.detail || problem.title);
    const errs = problem && Array.isArray(problem.errors)
      ? problem.errors.map((e) => `${e.location ? e.location + ": " : ""}${e.message}`).join("; ")
      : "";
    super([detail || `HTTP ${status}`, errs].filter(Boolean).join(" — "));
    this.status = status;
    this.problem = problem || {};
    this.retryAfter = retryAfter;
    this.code = code; // the console's own reason, e.g. "notBackOffice"
  }
}

let session = null;
try { session = JSON.parse(sessionStorage.getItem(SESSION) || "null"); } catch { session = null; }
const listeners = new Set();

function save(s) {
  const changed = !!s !== !!session;
  session = s;
  if (s) sessionStorage.setItem(SESSION, JSON.stringify(s));
  else sessionStorage.removeItem(SESSION);
  if (changed) for (const fn of listeners) fn(s);
}

/** The signed-in admin ({memberId, role, ...}) or null. */
export function current() { return session; }
/** onSession(fn) calls fn when the admin signs in or out (or the session ends), not on a token refresh. */
export function onSession(fn) { listeners.add(fn); }

/** readOnly: the signed-in account is a care agent (AGENT), who reads what an admin reads and changes nothing. */
export function readOnly() { return !!session && session.role === "AGENT"; }

/** login signs in with an admin's or a care agent's id or phone; family accounts are refused. */
export async function login(loginName, password) {
  const t = await raw("POST", "/auth/token", { login: loginName, password }, false);
  if (t.role !== "ADMIN" && t.role !== "AGENT") {
    // Not for the back office: end that session at once.
    await raw("POST", "/auth/logout", { refreshToken: t.refreshToken }, false).catch(() => {});
    throw new ApiError(403, { detail: "This account is not a back-office account (ADMIN or AGENT)." }, undefined, "notBackOffice");
  }
  save(t);
  return t;
}

/** endedWhy says, once, why the last session ended by itself (EXPIRED, PASSWORD, REMOVED, REVOKED, SESSION); "" after a sign-out. */
export function endedWhy() { const e = ended; ended = ""; return e; }
let ended = "";

export async function logout() {
  const s = session;
  ended = "";
  save(null);
  if (s) await raw("POST", "/auth/logout", { refreshToken: s.refreshToken }, false).catch(() => {});
}

let refreshing = null;
async function refresh() {
  if (!session) throw new ApiError(401, { detail: "Not signed in." });
  if (!refreshing) {
    const rt = session.refreshToken;
    refreshing = raw("POST", "/auth/refresh", { refreshToken: rt }, false)
      .then((t) => { save(t); })
      // A refused refresh ends the session, saying why (#38); an
      // unreachable server does not.
      .catch((e) => {
        if (e.status !== 0 && e.status < 500) { ended = (e.problem && e.problem.ended) || "SESSION"; save(null); }
        throw e;
      })
      .finally(() => { refreshing = null; });
  }
  return refreshing;
}

async function raw(method, path, body, auth) {
  const headers = { Accept: "application/json, application/problem+json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (auth && session) headers.Authorization = `Bearer ${session.accessToken}`;
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, { detail: String(e && e.message) }); // offline, server down
  }
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = { detail: text }; } }
  if (!res.ok) throw new ApiError(res.status, data, Number(res.headers.get("Retry-After")) || undefined);
  return data;
}

/** call makes an authenticated call, refreshing the access token once on 401. */
async function call(method, path, body) {
  try {
    return await raw(method, path, body, true);
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 401 || !session) throw e;
    await refresh();
    return raw(method, path, body, true);
  }
}

function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") u.set(k, String(v));
  }
  const s = u.toString();
  return s ? `?${s}` : "";
}
const enc = encodeURIComponent;

// Families.
export const searchFamilies = (q, limit = 50) => call("GET", `/admin/families${qs({ q, limit })}`);
export const dashboard = (familyId) => call("GET", `/families/${enc(familyId)}`);
export const members = (familyId) => call("GET", `/families/${enc(familyId)}/members`);
export const addMember = (familyId, m) => call("POST", `/families/${enc(familyId)}/members`, m);
export const removeMember = (familyId, customerId) => call("DELETE", `/families/${enc(familyId)}/members/${enc(customerId)}`);
export const setRole = (familyId, customerId, role) => call("PUT", `/families/${enc(familyId)}/members/${enc(customerId)}/role`, { role });
/** topUp adds bytes outside the offers (the back office's, free); buyTopUp buys an offer (catalog topUpOffers[].id). */
export const topUp = (familyId, bytes) => call("POST", `/families/${enc(familyId)}/topups`, { bytes });
export const buyTopUp = (familyId, offerId) => call("POST", `/families/${enc(familyId)}/topups`, { offerId });
/** receipt: a top-up's receipt; history: a month's top-ups and gifts (충전/선물 내역), one member's with member. */
export const receipt = (familyId, id) => call("GET", `/families/${enc(familyId)}/topups/${enc(id)}`);
export const history = (familyId, month, member) => call("GET", `/families/${enc(familyId)}/history${qs({ month, member })}`);
export const setPlan = (familyId, planBytes) => call("PUT", `/admin/families/${enc(familyId)}/plan`, { planBytes });
export const familyUsage = (familyId, period = "month") => call("GET", `/admin/families/${enc(familyId)}/usage${qs({ period })}`);
export const memberUsage = (familyId, customerId, period = "month") =>
  call("GET", `/families/${enc(familyId)}/members/${enc(customerId)}/usage${qs({ period })}`);

/** catalog: every known app with its Korean and English name (GET /catalog). */
export const catalog = () => call("GET", "/catalog");
export const putApp = (appId, app) => call("PUT", `/admin/catalog/apps/${enc(appId)}`, app);
export const deleteApp = (appId) => call("DELETE", `/admin/catalog/apps/${enc(appId)}`);
/** familyLogins: each member's logins, locked or with the attempts left (GET /admin/families/{id}/logins). */
export const familyLogins = (familyId) => call("GET", `/admin/families/${enc(familyId)}/logins`);
/** unknownApps: the apps in recent traffic the catalog does not name (GET /admin/catalog/unknown-apps). */
export const unknownApps = () => call("GET", "/admin/catalog/unknown-apps");

// Care agents' notes on a family, newest first; adding one is the one
// write a care agent (AGENT) may make.
export const notes = (familyId) => call("GET", `/admin/families/${enc(familyId)}/notes`);
export const addNote = (familyId, body) => call("POST", `/admin/families/${enc(familyId)}/notes`, { body });

// Policies. patch = {set?, remove?, replace?, expectedVersion?}; 409 when the version is stale.
export const policy = (familyId, customerId) => call("GET", `/families/${enc(familyId)}/members/${enc(customerId)}/policies`);
export const patchPolicy = (familyId, customerId, patch) =>
  call("PATCH", `/families/${enc(familyId)}/members/${enc(customerId)}/policies`, patch);

// Policy templates.
export const templates = () => call("GET", "/admin/policy-templates");
export const template = (id) => call("GET", `/admin/policy-templates/${enc(id)}`);
export const createTemplate = (t) => call("POST", "/admin/policy-templates", t);
export const updateTemplate = (id, t) => call("PUT", `/admin/policy-templates/${enc(id)}`, t);
export const deleteTemplate = (id) => call("DELETE", `/admin/policy-templates/${enc(id)}`);
export const applyTemplate = (id, familyId, customerId, expectedVersion) =>
  call("POST", `/admin/policy-templates/${enc(id)}/apply`, { familyId, customerId, expectedVersion: expectedVersion || undefined });
export const templateDrift = (id, params = {}) => call("GET", `/admin/policy-templates/${enc(id)}/drift${qs(params)}`);
/** reapply: body = {members:[{familyId, customerId, expectedVersion}]} or {familyIds:[…]} or {all:true}. */
export const reapplyTemplate = (id, body) => call("POST", `/admin/policy-templates/${enc(id)}/reapply`, body);

// Audit log: filters {familyId, actorId, action, target, since, until, before, limit}.
export const auditLog = (filters) => call("GET", `/admin/audit-log${qs(filters)}`);

// Operations and dead letters.
export const operations = () => call("GET", "/admin/operations");
export const deadLetters = (params) => call("GET", `/admin/dead-letters${qs(params)}`);
/** replayDeadLetters: records = [{topic, partition, offset}]. */
export const replayDeadLetters = (records) => call("POST", "/admin/dead-letters/replay", { records });
