// The space as the page holds it: its tasks keyed by uuid (or, on a share link, by their
// opaque id), families of steps, and where the next older page starts. Fed by the
// stream's snapshot and task events and by older pages; knows nothing of the DOM.

/** A task's key: its uuid, or its opaque id on a share link. */
export const keyOf = (task) => task.uuid ?? task.id;

/** The key of a task's parent, or null for a top-level task. */
export const parentKeyOf = (task) => task.parent_uuid ?? task.parent_id ?? null;

/** Timestamps share one format (UTC, microseconds, Z), so they sort as strings. */
const newestFirst = (a, b) => (a.created_at < b.created_at ? 1 : -1);

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

  get(key) {
    return this.tasks.get(key);
  }

  /** Top-level tasks, newest first. */
  topLevel() {
    return [...this.tasks.values()].filter((t) => parentKeyOf(t) == null).sort(newestFirst);
  }

  /** A parent's steps in creation order, with counts: `{steps, done, running}` where
   *  `running` are the unfinished steps that have reported. */
  family(key) {
    const steps = [...(this.families.get(key) ?? [])]
      .map((k) => this.tasks.get(k))
      .sort((a, b) => -newestFirst(a, b));
    const done = steps.filter((t) => t.finished_at != null).length;
    const running = steps.filter((t) => t.finished_at == null && t.progress != null);
    return { steps, done, running };
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
