import { partsText } from "./dom.js";

// The space as the page holds it: its tasks keyed by uuid (or, on a share link, by their
// opaque id), families of steps, and where the next older page starts. Fed by the
// stream's snapshot and task events and by older pages; knows nothing of the DOM. Also
// the rule of failure, as headway/failure.py decides it (a test holds the two to the same
// answers): a finished task whose `values.error` is a non-empty string has failed, and a
// finished parent has failed when it did itself or any of its finished steps did.

/** A task's key: its uuid, or its opaque id on a share link. */
export const keyOf = (task) => task.uuid ?? task.id;

/** The key of a task's parent, or null for a top-level task. */
export const parentKeyOf = (task) => task.parent_uuid ?? task.parent_id ?? null;

/** Timestamps share one format (UTC, microseconds, Z), so they sort as strings. */
const newestFirst = (a, b) => (a.created_at < b.created_at ? 1 : -1);

const NAMED_STEPS = 3; // failed steps a summary names before it only counts the rest
const UNTITLED_STEP = "Untitled step";

/** The error `values` report: `values.error` when it is a non-empty string, else null (a
 *  number, a boolean or "" there is just a value). */
export function failedError(values) {
  const error = values?.error;
  return typeof error === "string" && error !== "" ? error : null;
}

/** Whether `task` is a step that failed: finished, with an error. */
const stepFailed = (task) => task.finished_at != null && failedError(task.progress?.values) != null;

/** "1 of 3 steps failed (Run migrations: exit code 3)" for `failed` steps (oldest first)
 *  out of `total`, as parts (see dom.js `setParts`: the steps' titles and errors are
 *  reporters' text); null when none failed. */
function stepsSummary(failed, total) {
  if (failed.length === 0) return null;
  const noun = total === 1 ? "step" : "steps";
  const parts = [`${failed.length} of ${total} ${noun} failed (`];
  failed.slice(0, NAMED_STEPS).forEach((step, index) => {
    if (index > 0) parts.push("; ");
    const title = step.title == null ? UNTITLED_STEP : { text: step.title };
    parts.push(title, ": ", { text: failedError(step.progress?.values) });
  });
  if (failed.length > NAMED_STEPS) parts.push(`; ${failed.length - NAMED_STEPS} more`);
  parts.push(")");
  return parts;
}

/** How `task` failed, with `steps` its children in any order: `{error, steps, message,
 *  parts}` (`error`: its own, or null when only steps failed; `steps`: the failed ones,
 *  oldest first; `message`: both in one line; `parts`: that line as dom.js `setParts`
 *  shows it, the reporters' text apart), or null when it has not failed. */
export function failureOf(task, steps = []) {
  if (task.finished_at == null) return null;
  const failed = steps.filter(stepFailed).sort((a, b) => -newestFirst(a, b));
  const error = failedError(task.progress?.values);
  if (error == null && failed.length === 0) return null;
  const summary = stepsSummary(failed, steps.length);
  const parts = [
    ...(error == null ? [] : [{ text: error }]),
    ...(error != null && summary != null ? ["; "] : []),
    ...(summary ?? []),
  ];
  return { error, steps: failed, message: partsText(parts), parts };
}

export class SpaceState {
  constructor() {
    this.title = null;
    this.icon = null;
    this.tasks = new Map(); // key -> task, without its children
    this.families = new Map(); // parent key -> Set of child keys
    this.oldest = null; // created_at of the oldest top-level task paged in: `before`
    this.hasOlder = false;
  }

  /** Forgets everything and holds `space` (a snapshot) instead. */
  replace(space, pageSize) {
    this.title = space.title;
    this.icon = space.icon;
    this.tasks.clear();
    this.families.clear();
    this.oldest = null;
    this.addPage(space.tasks, pageSize);
  }

  /** Adds a page of top-level tasks with their children; a full page means there may be
   *  older ones. */
  addPage(tasks, pageSize) {
    for (const task of tasks) {
      this.put(task);
      if (this.oldest == null || task.created_at < this.oldest) this.oldest = task.created_at;
    }
    this.hasOlder = tasks.length >= pageSize;
  }

  /** Whether a task event belongs to what the page holds: a known task, a step of a known
   *  parent, or a top-level task newer than the pages held (older ones come with their page). */
  accepts(task) {
    if (this.tasks.has(keyOf(task))) return true;
    const parent = parentKeyOf(task);
    if (parent != null) return this.tasks.has(parent);
    return !this.hasOlder || this.oldest == null || task.created_at > this.oldest;
  }

  /** Stores `task` (and the children it nests); an event's empty `children` keeps the
   *  family already held, since each step arrives as its own event. */
  put(task) {
    const { children = [], ...rest } = task;
    const key = keyOf(task);
    this.tasks.set(key, rest);
    const parent = parentKeyOf(task);
    if (parent != null) {
      if (!this.families.has(parent)) this.families.set(parent, new Set());
      this.families.get(parent).add(key);
    }
    for (const child of children) this.put(child);
  }

  /** Forgets the task `key` with its steps, and takes it from its parent's family, whose
   *  held counts follow (the server's next word on the parent may say more: that it
   *  finished). Returns the keys forgotten: none when the task was not held. */
  remove(key) {
    const task = this.tasks.get(key);
    if (task == null) return [];
    const gone = [];
    const forget = (k) => {
      gone.push(k);
      for (const step of this.families.get(k) ?? []) forget(step);
      this.tasks.delete(k);
      this.families.delete(k);
    };
    forget(key);
    const parent = parentKeyOf(task);
    const family = this.families.get(parent);
    if (family != null) {
      family.delete(key);
      if (family.size === 0) this.families.delete(parent);
      this.recount(parent);
    }
    return gone;
  }

  /** Brings a parent's aggregated counts in line with the steps held. */
  recount(key) {
    const task = this.tasks.get(key);
    if (!task?.progress?.aggregated) return;
    const steps = this.steps(key);
    const current = steps.filter((step) => step.finished_at != null).length;
    const end = steps.length;
    let ratio = end === 0 ? null : current / end;
    if (task.finished_at != null) ratio = 1;
    this.tasks.set(key, { ...task, progress: { ...task.progress, current, end, ratio } });
  }

  get(key) {
    return this.tasks.get(key);
  }

  /** Top-level tasks, newest first. */
  topLevel() {
    return [...this.tasks.values()].filter((t) => parentKeyOf(t) == null).sort(newestFirst);
  }

  /** A task's steps as held, in no particular order (none for a task without any). */
  steps(key) {
    return [...(this.families.get(key) ?? [])].map((k) => this.tasks.get(k));
  }

  /** A parent's steps in creation order, with counts: `{steps, done, running, failed}`
   *  where `running` are the unfinished steps that have reported and `failed` the
   *  finished steps that failed. */
  family(key) {
    const steps = [...(this.families.get(key) ?? [])]
      .map((k) => this.tasks.get(k))
      .sort((a, b) => -newestFirst(a, b));
    const done = steps.filter((t) => t.finished_at != null).length;
    const running = steps.filter((t) => t.finished_at == null && t.progress != null);
    const failed = steps.filter(stepFailed);
    return { steps, done, running, failed };
  }

  /** How the task `key` failed, judged with the steps held (see failureOf), or null. */
  failure(key) {
    const task = this.tasks.get(key);
    if (task.finished_at == null) return null;
    return failureOf(task, this.steps(key));
  }
}

/** The overall progress shown in the tab's title: "done" when every top-level task has
 *  finished, else the mean ratio of the active top-level tasks that have a total (null
 *  when none has). */
export function overallProgress(topLevel) {
  const active = topLevel.filter((t) => t.finished_at == null);
  if (topLevel.length > 0 && active.length === 0) return "done";
  const ratios = active.map((t) => t.progress?.ratio).filter((r) => r != null);
  if (ratios.length === 0) return null;
  return ratios.reduce((sum, r) => sum + r, 0) / ratios.length;
}
