// One task on the dashboard: title, source, state, how it failed, log line, bar, numbers,
// rate and time left, age of the last report, values and, for a parent, its steps; on the
// owner's page, "Delete" and the question it asks first. Built once, then updated in place
// as reports arrive; `tick` refreshes what the passing time changes. Whether it is stale is
// decided by the stall rule (stalls.js), given to the view.

import { el, setAttribute, setParts, setText } from "./dom.js";
import {
  formatAge,
  formatClock,
  formatCount,
  formatDuration,
  formatPercent,
  formatRate,
  parseTime,
  runSeconds,
} from "./format.js";
import { knows, secondsLeft, servedLeft } from "./rate.js";

const BADGES = {
  failed: "Failed",
  finished: "Finished",
  running: "Running",
  stale: "Stale",
  waiting: "Waiting for data",
};

/** What the server's estimate says: "2.5/s, about 4 min left · usually 12 min", and
 *  "running late" first when it is. */
function servedText(estimate, left) {
  const parts = [];
  if (estimate.rate_per_s != null && estimate.rate_per_s > 0) {
    parts.push(formatRate(estimate.rate_per_s));
  }
  if (left != null) parts.push(left < 1 ? "almost done" : `about ${formatDuration(left)} left`);
  const said = [parts.join(", ")];
  if (estimate.usual != null) said.push(`usually ${formatDuration(estimate.usual.p50_s)}`);
  if (estimate.late) said.unshift("running late");
  return said.filter((part) => part !== "").join(" · ");
}

let lastListId = 0;
let lastQuestionId = 0;

/** What a task is doing: failed (finished with a `failure`, see tasks.js), finished,
 *  stale (`stall`: stalled by the server's rule, see stalls.js), waiting (never
 *  reported, or its report expired) or running. */
function taskState(task, failure, stall) {
  if (failure != null) return "failed";
  if (task.finished_at != null) return "finished";
  if (stall != null) return "stale";
  if (task.progress == null) return "waiting";
  return "running";
}

/** How much of a task's bar is filled: as far as it got while it runs; all of it once
 *  finished, unless it failed, where it shows how far it got (its counts, whatever the
 *  ratio 1 of a finished task says), or all of it when it has no counts. */
function barRatio(task, failed) {
  const progress = task.progress;
  if (task.finished_at == null) return progress?.ratio;
  if (failed && progress?.current != null && progress.end > 0) {
    return Math.min(Math.max(progress.current / progress.end, 0), 1);
  }
  return 1;
}

/** A task's counts as shown ("3 / 10 · 30%") and as a screen reader says its bar. */
function describeCounts(task, ratio, failed) {
  const progress = task.progress;
  const done = task.finished_at != null && !failed;
  if (progress?.aggregated) {
    const shown = formatPercent(ratio ?? 0);
    return { shown, spoken: `${shown}, ${progress.current} of ${progress.end} steps done` };
  }
  if (progress?.current != null && progress.end != null) {
    const counts = `${formatCount(progress.current)} of ${formatCount(progress.end)}`;
    const shown = `${formatCount(progress.current)} / ${formatCount(progress.end)}`;
    if (ratio == null) return { shown, spoken: counts };
    const percent = formatPercent(ratio);
    // A finished task's badge says it is done: its 100% would only repeat it. The
    // no-break space keeps the separator at the end of a line the counts wrap at.
    const withPercent = `${shown}\u00a0· ${percent}`;
    return { shown: done ? shown : withPercent, spoken: `${percent}, ${counts}` };
  }
  if (progress?.current != null) {
    const shown = `${formatCount(progress.current)} so far`;
    return { shown, spoken: shown };
  }
  if (task.finished_at != null) return { shown: "", spoken: failed ? "failed" : "finished" };
  return { shown: "", spoken: "waiting for data" };
}

export class TaskView {
  /** `isStep`: a child shown inside its parent; `onToggleSteps`: called when a parent's
   *  "show steps" button is pressed; `stallAt(task, now)`: how the task is stalled at
   *  `now` (see stalls.js `stallOf`), or null; `deletion`: on the owner's page,
   *  `{question()}`, the words asked before deleting, and `{remove()}`, which deletes
   *  and resolves to null, or to why it could not. */
  constructor(isStep, onToggleSteps, stallAt, deletion = null) {
    this.onToggleSteps = onToggleSteps;
    this.stallAt = stallAt;
    this.task = null;
    this.failure = null;
    this.estimate = null;
    this.valuesShown = null;
    this.steps = null;
    // What reporters wrote is isolated (dir="auto", or a <bdi> within the page's words),
    // so that a bidi control in it cannot reorder the page's own words around it.
    this.title = el(isStep ? "span" : "h3", { class: "task-title", dir: "auto" });
    this.source = el("span", { class: "task-source" });
    this.badge = el("span", { class: "badge" });
    this.error = el("p", { class: "task-error" });
    this.log = el("p", { class: "task-log", dir: "auto" });
    this.fill = el("div", { class: "bar-fill" });
    this.bar = el(
      "div",
      { class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100 },
      this.fill,
    );
    this.numbers = el("span");
    this.speed = el("span");
    this.age = el("span", { class: "age" });
    this.values = el("dl", { class: "task-values" });
    this.deletion = deletion == null ? null : this.buildDeletion(deletion, isStep);
    this.element = el(
      "li",
      { class: isStep ? "task step" : "task" },
      el(
        "div",
        { class: "task-head" },
        this.title,
        this.source,
        this.badge,
        this.deletion?.open,
      ),
      this.deletion?.asking,
      this.error,
      this.log,
      this.bar,
      el("p", { class: "task-facts" }, this.numbers, this.speed, this.age),
      this.values,
    );
  }

  /** Shows `task` as it now stands; `estimate` is its rate (see rate.js: the server's,
   *  or the page's own), `failure` how it failed (see tasks.js) or null. */
  update(task, estimate, now, failure = null) {
    this.task = task;
    this.failure = failure;
    this.estimate = estimate;
    const title = task.title ?? "Untitled task";
    setText(this.title, title);
    setParts(this.source, task.source == null ? [] : ["from ", { text: task.source }]);
    this.source.hidden = task.source == null;
    setAttribute(this.bar, "aria-label", `Progress of ${title}`);
    if (this.deletion != null) setAttribute(this.deletion.open, "aria-label", `Delete ${title}`);
    const log = task.progress?.values?.log;
    setText(this.log, log == null ? "" : String(log));
    this.log.hidden = log == null || log === "";
    setParts(this.error, failure?.parts ?? []);
    this.error.hidden = failure == null;
    this.showBar(task);
    // A failed task's own error is shown above: the values need not repeat it.
    this.showValues(task.progress?.values ?? {}, failure?.error != null ? "error" : null);
    this.tick(now);
  }

  showBar(task) {
    const failed = this.failure != null;
    const ratio = barRatio(task, failed);
    this.bar.classList.toggle("unknown", ratio == null && task.progress?.current != null);
    this.fill.style.width = ratio == null ? "" : `${ratio * 100}%`;
    setAttribute(this.bar, "aria-valuenow", ratio == null ? null : Math.floor(ratio * 100));
    const { shown, spoken } = describeCounts(task, ratio, failed);
    setText(this.numbers, shown);
    setAttribute(this.bar, "aria-valuetext", spoken);
  }

  showValues(values, shownAbove) {
    const entries = Object.entries(values).filter(([key]) => key !== "log" && key !== shownAbove);
    const shown = JSON.stringify(entries);
    if (shown === this.valuesShown) return;
    this.valuesShown = shown;
    this.values.replaceChildren(
      ...entries.map(([key, value]) =>
        el("div", {}, el("dt", { dir: "auto" }, key), el("dd", { dir: "auto" }, String(value))),
      ),
    );
    this.values.hidden = entries.length === 0;
  }

  /** Refreshes what time changes: state, age of the last report, time left. */
  tick(now) {
    const task = this.task;
    const stall = this.stallAt(task, now);
    const state = taskState(task, this.failure, stall);
    for (const name of ["failed", "finished", "waiting", "stale"]) {
      this.element.classList.toggle(name, state === name);
    }
    setText(this.badge, BADGES[state]);
    this.badge.className = `badge ${state}`;
    setText(this.age, this.ageText(task, state, stall, now));
    setText(this.speed, state === "running" ? this.speedText(task, now) : "");
  }

  ageText(task, state, stall, now) {
    if (state === "finished" || state === "failed") {
      const finished = parseTime(task.finished_at);
      setAttribute(this.age, "title", new Date(finished).toLocaleString());
      return `took ${formatDuration(runSeconds(task))}, ${state} ${formatClock(finished)}`;
    }
    if (state === "stale") {
      const quiet = stall.reason === "flat" ? "no progress" : "no report";
      return `${quiet} for ${formatDuration(stall.forMs / 1000)}`;
    }
    if (state === "waiting") return `created ${formatAge(now - parseTime(task.created_at))}`;
    return `updated ${formatAge(now - parseTime(task.progress.updated_at ?? task.created_at))}`;
  }

  speedText(task, now) {
    const server = this.estimate?.server;
    if (server != null && knows(server)) return servedText(server.served, servedLeft(server, now));
    const rate = this.estimate?.rate;
    if (rate == null || rate <= 0) return "";
    const left = secondsLeft(this.estimate, task.progress.end, now);
    if (left == null) return formatRate(rate);
    const eta = left < 1 ? "almost done" : `about ${formatDuration(left)} left`;
    return `${formatRate(rate)}, ${eta}`;
  }

  /** Shows a parent's steps summary and toggle; returns the list its steps go in. */
  showFamily({ steps, done, running, failed }, expanded) {
    if (this.steps == null) this.steps = this.buildSteps();
    const total = steps.length;
    let summary = `${done} of ${total} ${total === 1 ? "step" : "steps"} done`;
    if (failed.length > 0) summary += `, ${failed.length} failed`;
    if (running.length > 0) summary += `, ${running.length} running`;
    setText(this.steps.summary, summary);
    setText(this.steps.toggle, expanded ? "Hide steps" : `Show all ${total} steps`);
    setAttribute(this.steps.toggle, "aria-expanded", expanded);
    setAttribute(this.steps.list, "aria-label", `Steps of ${this.task.title ?? "Untitled task"}`);
    return this.steps.list;
  }

  /** Takes away the steps shown: the task has none left. */
  hideFamily() {
    this.steps?.section.remove();
    this.steps = null;
  }

  buildSteps() {
    const id = `steps-${++lastListId}`;
    const summary = el("p", { class: "steps-summary" });
    const toggle = el("button", { type: "button", class: "link", "aria-controls": id });
    toggle.addEventListener("click", () => this.onToggleSteps());
    const list = el("ol", { class: "steps-list", id });
    const section = el(
      "div",
      { class: "steps" },
      el("div", { class: "steps-head" }, summary, toggle),
      list,
    );
    this.element.append(section);
    return { summary, toggle, list, section };
  }

  /** Moves focus to the task's title (say, once the task next to it was deleted). */
  focus() {
    this.title.setAttribute("tabindex", "-1");
    this.title.focus();
  }

  /** "Delete", and in its place, once pressed, the question with "Delete task" (or
   *  step) and "Cancel"; Escape cancels too. Focus goes to "Cancel", the harmless one. */
  buildDeletion({ question, remove }, isStep) {
    const id = `question-${++lastQuestionId}`;
    const open = el("button", { type: "button", class: "task-delete" }, "Delete");
    const words = el("p", { class: "task-question", id });
    const confirm = el(
      "button",
      { type: "button", class: "danger-strong" },
      isStep ? "Delete step" : "Delete task",
    );
    const cancel = el("button", { type: "button" }, "Cancel");
    const failure = el("p", { class: "error", role: "alert", hidden: true });
    const asking = el(
      "div",
      { class: "task-confirm", role: "group", "aria-labelledby": id, hidden: true },
      words,
      el("div", { class: "task-confirm-actions" }, confirm, cancel),
      failure,
    );
    const ask = (shown) => {
      setParts(words, shown ? question() : []);
      setText(failure, "");
      failure.hidden = true;
      asking.hidden = !shown;
      open.hidden = shown;
      (shown ? cancel : open).focus();
    };
    open.addEventListener("click", () => ask(true));
    cancel.addEventListener("click", () => ask(false));
    asking.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        ask(false);
      }
    });
    confirm.addEventListener("click", async () => {
      confirm.disabled = cancel.disabled = true;
      const why = await remove();
      confirm.disabled = cancel.disabled = false;
      if (why != null) {
        setText(failure, why);
        failure.hidden = false;
      }
    });
    return { open, asking };
  }
}
