// The back office shell: sign-in, navigation and the hash router.
import * as api from "./api.js";
import { h, fill, say } from "./ui.js";
import { searchScreen } from "./search.js";
import { familyScreen } from "./family.js";
import { templatesScreen, driftScreen } from "./templates.js";
import { auditScreen } from "./audit.js";
import { operationsScreen, deadLettersScreen } from "./operations.js";

const routes = [
  [/^\/search$/, "search", searchScreen, "Families"],
  [/^\/family\/(\d+)$/, "search", familyScreen, "Family"],
  [/^\/templates$/, "templates", templatesScreen, "Policy templates"],
  [/^\/templates\/(\d+)\/drift$/, "templates", driftScreen, "Template drift"],
  [/^\/audit$/, "audit", auditScreen, "Audit log"],
  [/^\/operations$/, "operations", operationsScreen, "Operations"],
  [/^\/dead-letters$/, "dead-letters", deadLettersScreen, "Dead letters"],
];

const view = document.getElementById("view");
let cleanup = null;

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
  document.getElementById("who").hidden = !signedIn;
  if (!signedIn) {
    fill(view);
    document.title = "Sign in · DPCS back office";
    document.getElementById("login-name").focus();
    return;
  }
  const s = api.current();
  // A care agent reads and changes nothing: every control that writes
  // ([data-write]) is hidden, and the API refuses such calls anyway.
  document.body.classList.toggle("read-only", api.readOnly());
  document.getElementById("who-name").textContent = api.readOnly() ? `Care agent ${s.memberId} · read only` : `Admin ${s.memberId}`;
  const { path, query } = parse();
  const hit = routes.find(([re]) => re.test(path));
  if (!hit) { location.hash = "#/search"; return; }
  const [re, navKey, screen, title] = hit;
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.route === navKey) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${title} · DPCS back office`;
  const args = path.match(re).slice(1);
  const root = h("div", { class: "screen", "data-screen": navKey });
  fill(view, root);
  try {
    cleanup = (await screen(root, { args, query })) || null;
  } catch (e) {
    if (e instanceof api.ApiError && e.status === 401) { await api.logout(); return; }
    fill(root, h("h1", {}, title), h("p", { class: "conflict", role: "alert" }, e.message || String(e)));
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
    err.textContent = e.status === 401 ? "Wrong id, phone or password." : e.message;
  }
});
document.getElementById("logout").addEventListener("click", () => api.logout());
api.onSession(() => render());
window.addEventListener("hashchange", async () => {
  say("");
  await render();
  // After a navigation, keyboard and screen-reader users start at the new
  // screen's content, unless the screen focused a field itself.
  const a = document.activeElement;
  if (!a || a === document.body || a.closest("#nav")) document.getElementById("main").focus({ preventScroll: true });
});
render();
