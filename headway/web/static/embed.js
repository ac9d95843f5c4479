// A share link's embed: the newest top-level tasks of its space, live, as compact cards
// (title, state, bar, counts, log line; a parent's bar counts its steps), for another
// page's <iframe>. It reads the link's stream as the dashboard does (stream.js), keeps
// what it holds in a SpaceState, and judges failures and stalls by the same rules.

import { el, setText } from "./dom.js";
import { parseTime } from "./format.js";
import { observe, served, withServed } from "./rate.js";
import { Motion, staleAfterMs, stallOf } from "./stalls.js";
import { connect } from "./stream.js";
import { TaskView } from "./task-view.js";
import { SpaceState, keyOf, parentKeyOf } from "./tasks.js";

const RENDER_DELAY_MS = 50; // events arriving together are shown together

const main = document.querySelector("main[data-base]");
const base = main.dataset.base;
const limit = Number(main.dataset.limit);
const page = {
  list: document.getElementById("tasks"),
  empty: document.getElementById("empty"),
  gone: document.getElementById("gone"),
  connection: document.getElementById("connection"),
  announcer: document.getElementById("announcer"),
  title: document.getElementById("space-title"),
  icon: document.getElementById("space-icon"),
};

const state = new SpaceState();
const views = new Map(); // task key -> TaskView
const estimates = new Map(); // task key -> rate estimate, the page's own
const servedEstimates = new Map(); // task key -> the server's estimate (see rate.js)
const motion = new Motion(); // when each task's `current` last changed
const staleAfter = staleAfterMs(null); // a link cannot read the channels: the default
let renderTimer = null;
let clockAhead = null; // how far the browser's clock runs ahead of the server's, in ms

const now = () => Date.now() - (clockAhead ?? 0);

/** A task event is sent as its task changes: its newest timestamp is about the server's
 *  now, so the smallest gap seen bounds how far the browser's clock is ahead. */
function noteClock(task) {
  const stamps = [task.created_at, task.finished_at, task.progress?.updated_at];
  const newest = Math.max(...stamps.filter((s) => s != null).map(parseTime));
  const gap = Date.now() - newest;
  clockAhead = clockAhead == null ? gap : Math.min(clockAhead, gap);
}

function track(task) {
  const key = keyOf(task);
  const { current, updated_at: updatedAt } = task.progress ?? {};
  estimates.set(key, observe(estimates.get(key), current, parseTime(updatedAt)));
  for (const child of task.children ?? []) track(child);
  motion.note(key, state.get(key), state.steps(key));
}

function onSnapshot(space) {
  state.replace(space, limit);
  setText(page.title, space.title ?? "Untitled space");
  setText(page.icon, space.icon ?? "");
  space.tasks.forEach(track);
  motion.keepOnly((key) => state.get(key) != null);
  views.clear();
  page.list.replaceChildren();
  page.gone.hidden = true;
  render();
}

function onTask(task) {
  const key = keyOf(task);
  const before = state.get(key);
  if (before == null && !state.accepts(task)) return;
  noteClock(task);
  state.put(task);
  track(task);
  const parent = parentKeyOf(task);
  if (parent == null && before?.finished_at == null && task.finished_at != null) {
    const failure = state.failure(key);
    const title = task.title ?? "Untitled task";
    page.announcer.append(el("p", {}, failure ? `${title} failed.` : `${title} finished.`));
    while (page.announcer.childElementCount > 5) page.announcer.firstElementChild.remove();
  }
  renderTimer ??= setTimeout(render, RENDER_DELAY_MS);
}

/** The server's estimates of running tasks: each shown from now on, counted down. */
function onEstimates(found) {
  for (const [key, estimate] of Object.entries(found)) {
    servedEstimates.set(key, served(estimate, now()));
  }
  renderTimer ??= setTimeout(render, RENDER_DELAY_MS);
}

/** Shows the newest `limit` top-level tasks, newest first, each updated in place. */
function render() {
  clearTimeout(renderTimer);
  renderTimer = null;
  const shown = state.topLevel().slice(0, limit);
  const keys = new Set(shown.map(keyOf));
  for (const key of views.keys()) {
    if (!keys.has(key)) views.delete(key);
  }
  shown.forEach((task, index) => {
    const key = keyOf(task);
    if (!views.has(key)) {
      const stallAt = (t, time) => stallOf(t, motion.movedAt(key), time, staleAfter);
      views.set(key, new TaskView(false, () => {}, stallAt));
    }
    const view = views.get(key);
    const estimate = withServed(estimates.get(key), servedEstimates.get(key));
    view.update(task, estimate, now(), state.failure(key));
    if (page.list.children[index] !== view.element) {
      page.list.insertBefore(view.element, page.list.children[index] ?? null);
    }
  });
  while (page.list.children.length > shown.length) page.list.lastElementChild.remove();
  page.empty.hidden = shown.length > 0;
}

function showStatus(status) {
  page.connection.classList.toggle("live", status === "live");
  setText(page.connection, status === "live" ? "Live" : "Reconnecting…");
}

function onGone() {
  views.clear();
  page.list.replaceChildren();
  page.empty.hidden = true;
  page.gone.hidden = false;
  page.connection.classList.remove("live");
  setText(page.connection, "Offline");
}

function tick() {
  const time = now();
  for (const view of views.values()) {
    if (view.element.isConnected) view.tick(time);
  }
}

connect(base, `limit=${limit}`, { onSnapshot, onTask, onEstimates, onStatus: showStatus, onGone });
setInterval(tick, 1000);
