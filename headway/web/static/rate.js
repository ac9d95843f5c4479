// Rate and time left of a task: the server's estimate where the stream sent one (from
// every report it received and the job's usual duration, so a page opened mid-run shows
// one at once), counted down since; else estimated in the browser from the reports it
// saw: the count's speed between two reports, smoothed by a moving average weighted by
// time, so one burst or pause moves it only a little.

const SMOOTHING_MS = 10_000;

/** The estimate after a report of `current` at `at` (ms): `{current, at, rate}`, with
 *  `rate` per second, null until two reports have been seen. A count that went back
 *  starts over; a report already seen (a snapshot after a reconnect) changes nothing. */
export function observe(estimate, current, at) {
  if (current == null || at == null) return null;
  if (estimate == null || current < estimate.current || at < estimate.at) {
    return { current, at, rate: null };
  }
  if (at === estimate.at) return estimate;
  const elapsed = at - estimate.at;
  const instant = ((current - estimate.current) * 1000) / elapsed;
  if (estimate.rate == null) return { current, at, rate: instant };
  const weight = 1 - Math.exp(-elapsed / SMOOTHING_MS);
  return { current, at, rate: estimate.rate + weight * (instant - estimate.rate) };
}

/** The server's `estimate` of a task (as `GET /tasks/{uuid}/estimate` answers it),
 *  received at `at` (ms, the server's clock as the page tells it). */
export function served(estimate, at) {
  return { served: estimate, at };
}

/** The page's own estimate `own` with the server's `entry` (from `served`) beside it,
 *  as a task's view takes them. */
export function withServed(own, entry) {
  return entry == null ? own : { ...(own ?? {}), server: entry };
}

/** Whether the server's estimate says anything: a rate, a time left, or late. */
export function knows(entry) {
  const { rate_per_s: rate, remaining_s: left, late } = entry.served;
  return rate != null || left != null || late;
}

/** Seconds left by a `served` estimate at `now` (ms): counted down since it came; null
 *  when the server does not know. */
export function servedLeft(entry, now) {
  const left = entry.served.remaining_s;
  return left == null ? null : Math.max(0, left - (now - entry.at) / 1000);
}

/** Seconds left until `end` at the estimated rate, counted down from the last report to
 *  `now` (ms); null when there is no end or no progress to extrapolate. */
export function secondsLeft(estimate, end, now) {
  if (estimate?.rate == null || estimate.rate <= 0 || end == null) return null;
  const atReport = (end - estimate.current) / estimate.rate;
  return Math.max(0, atReport - (now - estimate.at) / 1000);
}
