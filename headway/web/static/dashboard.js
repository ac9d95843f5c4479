// The live dashboard of a space (for its owner) or of a share link (read-only). It reads
// the space's stream, keeps what it holds in a SpaceState, and shows it, touching only
// the tasks that changed (a new snapshot too, after the stream started again); older
// tasks come a page at a time. Also: the filter, the tab title's overall progress and
// failures, a live age on every task, stale tasks (by the server's stall rule, see
// stalls.js), finish (or failure) announcements, deleting a task (owner's page only), and
// a deleted space or dead link said once, after which nothing more is asked of the server.

import { deleteAt, deleteQuestion } from "./deleting.js";
import { el, setText } from "./dom.js";
import { iconUrl, parseTime } from "./format.js";
import { setUpJobs } from "./jobs.js";
import { setUpNotifier } from "./notify.js";
import { setUpOwner } from "./owner.js";
import { observe, served, withServed } from "./rate.js";
import { Motion, staleAfterMs, stallOf } from "./stalls.js";
import { connect } from "./stream.js";
import { TaskView } from "./task-view.js";
import { SpaceState, keyOf, overallProgress, parentKeyOf } from "./tasks.js";

const PAGE_SIZE = 50; // top-level tasks in the snapshot and in each older page
const SHOW_STEPS_UP_TO = 8; // bigger families start collapsed
const RUNNING_STEPS_SHOWN = 3; // running steps a collapsed family still shows
const FAILED_STEPS_SHOWN = 3; // and failed ones
const RENDER_DELAY_MS = 50; // events arriving together are shown together
const ANNOUNCEMENTS_KEPT = 5;

const main = document.querySelector("main[data-base]");
const base = main.dataset.base;
const shared = main.dataset.mode === "shared";
const page = {
  list: document.getElementById("tasks"),
  empty: document.getElementById("empty"),
  older: document.getElementById("older"),
  gone: document.getElementById("gone"),
  connection: document.getElementById("connection"),
  announcer: document.getElementById("announcer"),
  title: document.getElementById("space-title"),
  toolbar: document.querySelector(".toolbar"),
  side: document.querySelector("aside.side"),
  notify: document.getElementById("notify"),
  retention: document.querySelector(".space-foot"),
  icon: document.getElementById("space-icon"),
  favicon: document.querySelector('link[rel="icon"]'),
  filters: [...document.querySelectorAll("button[data-filter]")],
};

const state = new SpaceState();
const views = new Map(); // task key -> TaskView, for every task held
const viewOf = new WeakMap(); // a task's element -> its TaskView
const deleted = new Set(); // keys of the tasks this page deleted: their late events are old
const estimates = new Map(); // task key -> rate estimate, the page's own
const servedEstimates = new Map(); // task key -> the server's estimate (see rate.js)
const expandedByHand = new Map(); // parent key -> whether its steps were opened by hand
const dirty = new Set(); // keys of tasks changed since the last render
// Steps whose events came before their parent's, by parent key: a new parent and its
// first step made within one round of the stream, whose step's event comes first (a
// child's event is followed by its parent's). Each is shown as its parent arrives.
const early = new Map();
const EARLY_PARENTS_KEPT = 100; // parents that never come (older than the pages held)
const motion = new Motion(); // when each task's `current` last changed
let staleAfter = staleAfterMs(null); // ms; the owner's page follows its channels
let filter = "all";
let renderTimer = null;
let clockAhead = null; // how far the browser's clock runs ahead of the server's, in ms
let gone = false; // the space was deleted, or the link no longer works

/** The server's time now, as best the browser can tell (see noteClock). */
const now = () => Date.now() - (clockAhead ?? 0);

/** A task event is sent as its task changes, so its newest timestamp is about the
 *  server's now: the smallest gap seen bounds how far the browser's clock is ahead. */
function noteClock(task) {
  const stamps = [task.created_at, task.finished_at, task.progress?.updated_at];
  const newest = Math.max(...stamps.filter((s) => s != null).map(parseTime));
  const gap = Date.now() - newest;
  clockAhead = clockAhead == null ? gap : Math.min(clockAhead, gap);
}

/** Announces `message` to screen readers: each one is a new node in the polite live
 *  region, so the same words said twice are heard twice. */
function say(message) {
  page.announcer.append(el("p", {}, message));
  while (page.announcer.childElementCount > ANNOUNCEMENTS_KEPT) {
    page.announcer.firstElementChild.remove();
  }
}

function showSpace(space) {
  setText(page.title, space.title ?? "Untitled space");
  setText(page.icon, space.icon ?? "");
  if (space.icon) page.favicon.href = iconUrl(space.icon);
}

/** Notes a task as an event or a page shows it (with its nested children): its rate and
 *  when it last moved. A parent's motion is noted with its own event, which follows its
 *  step's: its steps are then as the event left them. */
function track(task) {
  const key = keyOf(task);
  const { current, updated_at: updatedAt } = task.progress ?? {};
  estimates.set(key, observe(estimates.get(key), current, parseTime(updatedAt)));
  for (const child of task.children ?? []) track(child);
  motion.note(key, state.get(key), state.steps(key));
}

/** How the task `key` is stalled at `time`, or null (see stalls.js). */
function stallFor(key, task, time) {
  return stallOf(task, motion.movedAt(key), time, staleAfter);
}

/** Follows the space's channels (owner's page): the smallest `stalled_after` among those
 *  that want stalls decides when a task is stale. */
function onChannels(channels) {
  const after = staleAfterMs(channels);
  if (after === staleAfter) return;
  staleAfter = after;
  tick();
}

/** A snapshot replaces what the page holds: at the stream's start, and each time it
 *  starts again (after a task was deleted, say). The views of the tasks still there are
 *  kept and updated in place, so nothing flickers and focus stays where it was. */
function onSnapshot(space) {
  if (gone) return;
  early.clear();
  state.replace(space, PAGE_SIZE);
  showSpace(space);
  space.tasks.forEach(track);
  motion.keepOnly((key) => state.get(key) != null);
  for (const key of [...views.keys()]) {
    if (state.get(key) == null) views.delete(key);
    else dirty.add(key);
  }
  render();
}

function onTask(task) {
  const key = keyOf(task);
  const parent = parentKeyOf(task);
  if (gone || deleted.has(key) || deleted.has(parent)) return;
  const before = state.get(key);
  if (before == null && parent != null && state.get(parent) == null) {
    holdEarly(parent, task);
    return;
  }
  if (before == null && !state.accepts(task)) return;
  noteClock(task);
  state.put(task);
  track(task);
  markDirty(key);
  if (parent != null) markDirty(parent);
  if (parent == null && before != null && before.finished_at == null && task.finished_at != null) {
    finished(task, state.failure(key));
  }
  const steps = early.get(key);
  if (steps != null) {
    early.delete(key);
    for (const step of steps.values()) onTask(step);
  }
}

/** Keeps the event of a step whose parent the page does not hold (yet), the newest one
 *  of each step, until its parent's event comes (see `early`). */
function holdEarly(parent, task) {
  if (!early.has(parent)) {
    if (early.size >= EARLY_PARENTS_KEPT) early.delete(early.keys().next().value);
    early.set(parent, new Map());
  }
  early.get(parent).set(keyOf(task), task);
}

/** Announces a top-level task's finish; a parent's steps arrive before it, so `failure`
 *  already counts them. */
function finished(task, failure) {
  showJobs(); // a run more, if the past runs are shown
  const title = task.title ?? "Untitled task";
  if (failure == null) {
    say(`${title} finished.`);
    notify(`${title} finished`, page.title.textContent);
  } else {
    say(`${title} failed: ${failure.message}.`);
    notify(`${title} failed`, `${failure.message} (${page.title.textContent})`);
  }
}

/** The server's estimates of running tasks: each shown from now on, counted down. */
function onEstimates(found) {
  if (gone) return;
  for (const [key, estimate] of Object.entries(found)) {
    servedEstimates.set(key, served(estimate, now()));
    if (state.get(key) != null) markDirty(key);
  }
}

function markDirty(key) {
  dirty.add(key);
  renderTimer ??= setTimeout(render, RENDER_DELAY_MS);
}

/** Shows the changed tasks, then the list in order and filtered, then the counts. */
function render() {
  clearTimeout(renderTimer);
  renderTimer = null;
  for (const key of dirty) {
    if (views.has(key)) showTask(key);
  }
  dirty.clear();
  const topLevel = state.topLevel();
  const shown = topLevel.filter(
    (task) => filter === "all" || (task.finished_at != null) === (filter === "finished"),
  );
  syncList(page.list, shown.map(keyOf), false);
  showCounts(topLevel, shown);
}

function viewFor(key, isStep) {
  if (!views.has(key)) {
    const stallAt = (task, time) => stallFor(key, task, time);
    const deletion = shared ? null : deletionOf(key);
    const view = new TaskView(isStep, () => toggleSteps(key), stallAt, deletion);
    views.set(key, view);
    viewOf.set(view.element, view);
    showTask(key);
  }
  return views.get(key);
}

function showTask(key) {
  const view = views.get(key);
  const estimate = withServed(estimates.get(key), servedEstimates.get(key));
  view.update(state.get(key), estimate, now(), state.failure(key));
  if (!state.families.has(key)) {
    view.hideFamily();
    return;
  }
  const family = state.family(key);
  const expanded = expandedByHand.get(key) ?? family.steps.length <= SHOW_STEPS_UP_TO;
  const steps = expanded
    ? family.steps
    : [
        ...family.failed.slice(0, FAILED_STEPS_SHOWN),
        ...family.running.slice(0, RUNNING_STEPS_SHOWN),
      ];
  syncList(view.showFamily(family, expanded), steps.map(keyOf), true);
}

function toggleSteps(key) {
  const family = state.family(key);
  const expanded = expandedByHand.get(key) ?? family.steps.length <= SHOW_STEPS_UP_TO;
  expandedByHand.set(key, !expanded);
  showTask(key);
}

/** Makes `list` hold the views of `keys`, in that order, moving only what moved. */
function syncList(list, keys, isStep) {
  keys.forEach((key, index) => {
    const node = viewFor(key, isStep).element;
    if (list.children[index] !== node) list.insertBefore(node, list.children[index] ?? null);
  });
  while (list.children.length > keys.length) list.lastElementChild.remove();
}

function showCounts(topLevel, shown) {
  const active = topLevel.filter((task) => task.finished_at == null).length;
  const counts = { active, finished: topLevel.length - active, all: topLevel.length };
  for (const button of page.filters) {
    setText(button.querySelector(".count"), String(counts[button.dataset.filter]));
  }
  page.empty.hidden = shown.length > 0;
  setText(page.empty, emptyText(topLevel.length));
  page.older.hidden = !state.hasOlder;
  const failed = topLevel.filter((task) => state.failure(keyOf(task)) != null).length;
  const prefix = titlePrefix(overallProgress(topLevel), failed);
  document.title = `${prefix}${state.title ?? "Untitled space"}`;
}

/** "(42%) " for overall progress, "✓ " when everything finished, nothing when unknown;
 *  with failed top-level tasks, "✗ 2 failed · " instead of the tick, after the
 *  percentage while others run ("(42%) ✗ 1 failed · "). */
function titlePrefix(overall, failed) {
  const progress = overall == null || overall === "done" ? "" : `(${Math.floor(overall * 100)}%) `;
  if (failed > 0) return `${progress}✗ ${failed} failed · `;
  return overall === "done" ? "✓ " : progress;
}

function emptyText(held) {
  if (held > 0) return filter === "active" ? "No active tasks." : "No finished tasks.";
  return shared ? "No tasks yet." : "No tasks yet: report one with a snippet from this page.";
}

function setFilter(name) {
  filter = name;
  for (const button of page.filters) {
    button.setAttribute("aria-pressed", String(button.dataset.filter === name));
  }
  render();
}

async function loadOlder() {
  page.older.disabled = true;
  try {
    const query = `limit=${PAGE_SIZE}&before=${encodeURIComponent(state.oldest)}`;
    const response = await fetch(`${base}?${query}`, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(String(response.status));
    const space = await response.json();
    state.addPage(space.tasks, PAGE_SIZE);
    space.tasks.forEach(track);
    render();
  } catch {
    say("Older tasks could not be loaded; try again.");
  } finally {
    page.older.disabled = false;
  }
}

/** What a task's "Delete" asks and does (owner's page). */
function deletionOf(key) {
  return {
    question() {
      const task = state.get(key);
      const parent = parentKeyOf(task);
      return deleteQuestion(task, state.steps(key).length, parent && state.get(parent));
    },
    remove: () => deleteTask(key),
  };
}

/** Deletes the task `key` with its steps; once the server has, the page forgets them and
 *  focus goes to the task that took its place (or the one before it, or its parent).
 *  Resolves to null, or to why it could not be deleted. */
async function deleteTask(key) {
  const title = state.get(key)?.title ?? "Untitled task";
  const element = views.get(key)?.element;
  const around = [element?.nextElementSibling, element?.previousElementSibling];
  const parent = parentKeyOf(state.get(key));
  const failure = await deleteAt(`/tasks/${encodeURIComponent(key)}`, "task");
  if (failure != null) return failure;
  forget(key);
  const next = [...around.map((node) => node && viewOf.get(node)), views.get(parent)].find(
    (view) => view?.element.isConnected,
  );
  if (next != null) next.focus();
  else page.filters.find((button) => button.dataset.filter === "all").focus();
  say(`Deleted “${title}”.`);
  return null;
}

/** Forgets a deleted task and its steps (a new snapshot may have done so already). */
function forget(key) {
  const task = state.get(key);
  deleted.add(key);
  if (task == null) return;
  for (const removed of state.remove(key)) {
    deleted.add(removed);
    views.delete(removed);
    estimates.delete(removed);
    servedEstimates.delete(removed);
    expandedByHand.delete(removed);
  }
  motion.keepOnly((known) => state.get(known) != null);
  const parent = parentKeyOf(task);
  if (parent != null) markDirty(parent);
  render();
}

function showStatus(status) {
  page.connection.classList.toggle("live", status === "live");
  setText(page.connection, status === "live" ? "Live" : "Reconnecting…");
}

/** The space was deleted (here, on another page, or for being idle) or the link no longer
 *  works: say so, once, in place of the tasks and panels, and ask nothing more of the
 *  server. */
function onGone() {
  if (gone) return;
  gone = true;
  stopStream?.();
  stopOwner?.();
  clearTimeout(renderTimer);
  state.replace({ title: state.title, icon: state.icon, tasks: [] }, PAGE_SIZE);
  views.clear();
  page.list.replaceChildren();
  for (const node of [page.toolbar, page.empty, page.older, page.side, page.notify]) {
    if (node != null) node.hidden = true;
  }
  if (page.retention != null) page.retention.hidden = true;
  page.connection.hidden = true;
  main.classList.add("space-gone");
  page.gone.hidden = false;
  page.gone.setAttribute("tabindex", "-1");
  if (!page.gone.contains(document.activeElement)) page.gone.focus();
  const title = state.title ?? "Untitled space";
  document.title = shared ? `Link no longer works · ${title}` : `Deleted · ${title}`;
}

function tick() {
  const time = now();
  for (const view of views.values()) {
    if (view.element.isConnected) view.tick(time);
  }
}

for (const button of page.filters) {
  button.addEventListener("click", () => setFilter(button.dataset.filter));
}
page.older.addEventListener("click", loadOlder);
const notify = setUpNotifier(page.notify, say);
const showJobs = setUpJobs(document.getElementById("jobs"), base);
const stopOwner = shared ? null : setUpOwner(main.dataset.space, say, onChannels, onGone);
const stopStream = connect(base, `limit=${PAGE_SIZE}`, {
  onSnapshot,
  onTask,
  onEstimates,
  onStatus: (status) => gone || showStatus(status),
  onGone,
});
setInterval(tick, 1000);
