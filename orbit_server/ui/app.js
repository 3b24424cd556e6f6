// The dashboard's router: sign-in, the hash routes (#/queues, #/tasks?…, #/task/<id>,
// #/review?…, #/workers, #/schedules?…, #/limits?…, #/workflows?…, #/workflow/<id>), the status line and auto-refresh.

import { ApiError, credential, get, parseCredential, signIn, signOut } from "./api.js";
import { h, replace, shortId } from "./dom.js";
import { renderQueues, renderReview, renderTask, renderTasks, renderWorkers } from "./pages.js";
import { renderLimits } from "./limits.js";
import { renderSchedules } from "./schedules.js";
import { renderWorkflow, renderWorkflows } from "./workflows.js";

const REFRESH_MS = 5000;
// The queue list (names for the menus) counts every queue's tasks: read it at most this often.
const QUEUES_MS = 60000;
const ID = /^[0-9a-f]{32}$/;  // only an ID goes into an API path
const $ = (id) => document.getElementById(id);
// The sign-in form leaves the document while a page shows: keep hold of it.
const signInForm = $("sign-in");
const credentialInput = $("credential");
const signInError = $("sign-in-error");

let me = null;
let generation = 0;   // a render started before the latest navigation is dropped
let dirty = false;    // the user typed into the page: auto-refresh waits
let rendering = false;
let queuesRead = { at: 0, list: [] };

async function queueList() {
  if (Date.now() - queuesRead.at >= QUEUES_MS) {
    queuesRead = { at: Date.now(), list: (await get("/v1/queues")).queues };
  }
  return queuesRead.list;
}

function route() {
  const hash = window.location.hash.replace(/^#\/?/, "");
  const [path, query] = hash.split("?", 2);
  const parts = path.split("/").filter(Boolean);
  return { page: parts[0] || "queues", arg: parts[1] || null, params: new URLSearchParams(query || "") };
}

function status(message, kind = "") {
  const el = $("status");
  el.className = kind;
  el.textContent = message;
}

function navigate(page, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") query.set(key, value);
  }
  const text = query.toString();
  const target = `#/${page}${text ? "?" + text : ""}`;
  if (window.location.hash === target) render();
  else window.location.hash = target;
}

function showSignIn(message = "") {
  me = null;
  queuesRead = { at: 0, list: [] };
  $("nav").hidden = true;
  $("sign-out").hidden = true;
  $("refresh-box").hidden = true;
  $("who").textContent = "";
  signInForm.hidden = false;
  replace($("main"), signInForm);
  signInError.textContent = message;
  credentialInput.focus();
}

// A field of the page has focus: auto-refresh would take it away.
function typing() {
  const active = document.activeElement;
  return Boolean(active && $("main").contains(active)
    && ["INPUT", "TEXTAREA", "SELECT"].includes(active.tagName));
}

async function render({ auto = false } = {}) {
  if (!me) return;
  const mine = ++generation;
  const hash = window.location.hash;
  const { page, arg, params } = route();
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.page === page || (page === "task" && link.dataset.page === "tasks")
      || (page === "workflow" && link.dataset.page === "workflows"));
  }
  rendering = true;
  try {
    const queues = await queueList();
    const ctx = { me, queues, params, navigate, status, refresh: () => render(),
      clean: () => { dirty = false; } };
    let node;
    if (page === "tasks") node = await renderTasks(ctx);
    else if (page === "task" && ID.test(arg || "")) node = await renderTask(ctx, arg);
    else if (page === "task") node = h("p", { class: "error" }, "not a task ID");
    else if (page === "review") node = await renderReview(ctx);
    else if (page === "workers") node = await renderWorkers(ctx);
    else if (page === "schedules") node = await renderSchedules(ctx);
    else if (page === "limits") node = await renderLimits(ctx);
    else if (page === "workflows") node = await renderWorkflows(ctx);
    else if (page === "workflow" && ID.test(arg || "")) node = await renderWorkflow(ctx, arg);
    else if (page === "workflow") node = h("p", { class: "error" }, "not a workflow ID");
    else node = await renderQueues(ctx);
    if (mine !== generation) return;
    // The user started typing while an auto-refresh was reading: keep what they typed.
    if (auto && (dirty || typing())) return;
    replace($("main"), node);
    document.body.dataset.page = page;
    document.body.dataset.route = hash;  // what is shown (the browser tests wait for it)
  } catch (err) {
    if (mine !== generation) return;
    if (err instanceof ApiError && err.status === 401) {
      signOut();
      showSignIn(`signed out: ${err.message}`);
      return;
    }
    status(err instanceof ApiError ? `${err.code}: ${err.message}` : String(err), "error");
  } finally {
    rendering = false;
  }
}

async function start() {
  if (!credential()) {
    showSignIn();
    return;
  }
  try {
    me = await get("/v1/me");
  } catch (err) {
    signOut();
    showSignIn(err instanceof ApiError ? `${err.code}: ${err.message}` : String(err));
    return;
  }
  signInForm.hidden = true;
  $("nav").hidden = false;
  $("sign-out").hidden = false;
  $("refresh-box").hidden = false;
  $("who").textContent = `${me.role} ${shortId(me.credential_id)}`;
  await render();
}

function setUp() {
  signInForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const bearer = parseCredential(credentialInput.value);
    credentialInput.value = "";
    if (!bearer) {
      signInError.textContent = "expected credential_id.secret or a credentials file's JSON";
      return;
    }
    signIn(bearer);
    start();
  });
  $("sign-out").addEventListener("click", () => {
    signOut();
    status("");
    showSignIn();
  });
  $("main").addEventListener("input", () => { dirty = true; });
  window.addEventListener("hashchange", () => { dirty = false; status(""); render(); });
  window.setInterval(() => {
    if (me && $("refresh").checked && !dirty && !typing() && !rendering && !document.hidden) {
      render({ auto: true });
    }
  }, REFRESH_MS);
  start();
}

setUp();
