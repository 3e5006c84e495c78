// The back office shell: sign-in, navigation, the language switch and the
// hash router.
import * as api from "./api.js";
import { h, fill, say, errorText, setApps } from "./ui.js";
import { t, lang, setLang } from "./i18n.js";
import { searchScreen } from "./search.js";
import { familyScreen } from "./family.js";
import { templatesScreen, driftScreen } from "./templates.js";
import { auditScreen } from "./audit.js";
import { operationsScreen, deadLettersScreen } from "./operations.js";
import { catalogScreen } from "./catalog.js";

// [path, nav entry, screen, title key]
const routes = [
  [/^\/search$/, "search", searchScreen, "title.search"],
  [/^\/family\/(\d+)$/, "search", familyScreen, "title.family"],
  [/^\/templates$/, "templates", templatesScreen, "title.templates"],
  [/^\/templates\/(\d+)\/drift$/, "templates", driftScreen, "title.drift"],
  [/^\/audit$/, "audit", auditScreen, "title.audit"],
  [/^\/operations$/, "operations", operationsScreen, "title.operations"],
  [/^\/dead-letters$/, "dead-letters", deadLettersScreen, "title.deadLetters"],
  [/^\/catalog$/, "catalog", catalogScreen, "title.catalog"],
];

const view = document.getElementById("view");
let appsRead = false;
let cleanup = null;

// The page's own texts (index.html) in the current language: elements name
// their key in data-i18n (text) or data-i18n-label (aria-label).
function localize() {
  for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  for (const e of document.querySelectorAll("[data-i18n-label]")) e.setAttribute("aria-label", t(e.dataset.i18nLabel));
  const sw = document.getElementById("lang");
  sw.lang = lang === "en" ? "ko" : "en"; // the language the button's own text is in
  sw.title = t("switchLangLabel");
}

/** parse splits "#/path?x=1" into the path and its query. */
function parse() {
  const raw = location.hash.replace(/^#/, "") || "/search";
  const [path, query] = raw.split("?");
  return { path, query: new URLSearchParams(query || "") };
}

async function render() {
  if (cleanup) { cleanup(); cleanup = null; }
  const signedIn = !!api.current();
  document.getElementById("login").hidden = signedIn;
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("who-name").hidden = !signedIn;
  document.getElementById("logout").hidden = !signedIn;
  if (!signedIn) {
    fill(view);
    // A session that ended by itself says why (#38).
    const why = api.endedWhy();
    if (why) document.getElementById("login-error").textContent = t(`ended.${["EXPIRED", "PASSWORD", "REMOVED", "REVOKED"].includes(why) ? why : "SESSION"}`);
    document.title = t("docTitle", { title: t("signIn") });
    document.getElementById("login-name").focus();
    return;
  }
  const s = api.current();
  // Apps are named by the catalog everywhere (#38): read once per sign-in.
  if (!appsRead) {
    appsRead = true;
    await api.catalog().then((c) => setApps(c.apps), () => { appsRead = false; });
  }
  // A care agent reads and changes nothing: every control that writes
  // ([data-write]) is hidden, and the API refuses such calls anyway.
  document.body.classList.toggle("read-only", api.readOnly());
  document.getElementById("who-name").textContent = t(api.readOnly() ? "whoAgent" : "whoAdmin", { id: s.memberId });
  const { path, query } = parse();
  const hit = routes.find(([re]) => re.test(path));
  if (!hit) { location.hash = "#/search"; return; }
  const [re, navKey, screen, titleKey] = hit;
  const title = t(titleKey);
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.route === navKey) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = t("docTitle", { title });
  const args = path.match(re).slice(1);
  const root = h("div", { class: "screen", "data-screen": navKey });
  fill(view, root);
  try {
    cleanup = (await screen(root, { args, query })) || null;
  } catch (e) {
    if (e instanceof api.ApiError && e.status === 401) { await api.logout(); return; }
    fill(root, h("h1", {}, title), h("p", { class: "conflict", role: "alert" }, errorText(e)));
  }
}

document.getElementById("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = ev.target;
  const err = document.getElementById("login-error");
  err.textContent = "";
  try {
    await api.login(f.login.value.trim(), f.password.value);
    f.password.value = "";
  } catch (e) {
    err.textContent = e.code === "notBackOffice" ? t("loginNotBackOffice") : e.status === 401 ? t("loginWrong") : errorText(e);
  }
});
document.getElementById("logout").addEventListener("click", () => { appsRead = false; api.logout(); });
// The language switch: the page's texts and the screen shown are redrawn
// in the other language (a screen's unsaved input is not kept).
document.getElementById("lang").addEventListener("click", async () => {
  setLang(lang === "en" ? "ko" : "en");
  localize();
  say("");
  const err = document.getElementById("login-error");
  err.textContent = "";
  await render();
});
api.onSession(() => render());
window.addEventListener("hashchange", async () => {
  say("");
  await render();
  // After a navigation, keyboard and screen-reader users start at the new
  // screen's content, unless the screen focused a field itself.
  const a = document.activeElement;
  if (!a || a === document.body || a.closest("#nav")) document.getElementById("main").focus({ preventScroll: true });
});
localize();
render();
