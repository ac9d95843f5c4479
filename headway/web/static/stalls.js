// When a task is stale, by the server's stall rule (headway/notify/stalls.py), so that a
// page marks Stale what a channel would be told has stalled:
//
// - an active task is stalled when nothing has been reported for `stalled_after` since
//   its last report, or since its creation if it never reported (`silent`);
// - or when reports come but `current` has not changed for that long (`flat`); a parent
//   moves when any of its steps' `current` moves or a step finishes;
// - a finished task never stalls.
//
// `stalled_after` is the smallest among the space's channels that want stalls; with none,
// or where the page cannot read the channels (a share link), the channels' default of
// 600 s, so that the page and the server agree unless told otherwise.
//
// The server keeps no history, so when `current` last changed is learnt from the stream:
// the time of the first report seen with the current value (Motion). A task first seen
// in a snapshot counts from its last report: it has been flat for at least that long.

import { parseTime } from "./format.js";

/** The channels' default `stalled_after`, in seconds (CreateChannel in schemas.py). */
export const DEFAULT_STALLED_AFTER_S = 600;

/** Milliseconds after which a task is stale, from a space's channels (as
 *  `GET /spaces/{s}/channels` lists them; null or none: the default). */
export function staleAfterMs(channels) {
  const wanted = (channels ?? [])
    .filter((channel) => channel.events.includes("stalled"))
    .map((channel) => channel.stalled_after);
  return 1000 * (wanted.length > 0 ? Math.min(...wanted) : DEFAULT_STALLED_AFTER_S);
}

/** What changes exactly when a task moves: its `current`, or for a parent (`steps` its
 *  children held) how many steps finished and each unfinished step's `current`. */
export function motionOf(task, steps = []) {
  if (steps.length === 0) return JSON.stringify(task.progress?.current ?? null);
  const running = steps
    .filter((step) => step.finished_at == null)
    .map((step) => [step.created_at, step.progress?.current ?? null])
    .sort();
  return JSON.stringify([steps.length - running.length, running]);
}

/** How a task is stalled at `now` (ms, the server's time): `{reason: "silent" | "flat",
 *  forMs}`, or null. `movedAt`: when its motion last changed (see Motion), or null. */
export function stallOf(task, movedAt, now, afterMs) {
  if (task.finished_at != null) return null;
  const reported = task.progress?.updated_at ?? null;
  const silentMs = now - parseTime(reported ?? task.created_at);
  if (silentMs >= afterMs) return { reason: "silent", forMs: silentMs };
  const flatMs = movedAt == null ? 0 : now - movedAt;
  if (reported != null && flatMs >= afterMs) return { reason: "flat", forMs: flatMs };
  return null;
}

/** When each task's motion (see motionOf) last changed, by task key. */
export class Motion {
  constructor() {
    this.seen = new Map(); // key -> { motion, at }
  }

  /** Notes `task` as the stream shows it now: a motion unlike the last one seen starts
   *  its clock again, at the task's last report (or creation). */
  note(key, task, steps) {
    const motion = motionOf(task, steps);
    if (this.seen.get(key)?.motion !== motion) {
      const at = parseTime(task.progress?.updated_at ?? task.created_at);
      this.seen.set(key, { motion, at });
    }
  }

  /** When `key`'s motion last changed (ms), or null if never noted. */
  movedAt(key) {
    return this.seen.get(key)?.at ?? null;
  }

  /** Forgets every task but those `keep` holds (after a fresh snapshot). */
  keepOnly(keep) {
    for (const key of this.seen.keys()) {
      if (!keep(key)) this.seen.delete(key);
    }
  }
}
