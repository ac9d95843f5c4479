// Rate and time left of a task, estimated in the browser from its successive reports
// (the server keeps no history): the count's speed between two reports, smoothed by a
// moving average weighted by time, so one burst or pause moves it only a little.

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

/** Seconds left until `end` at the estimated rate, counted down from the last report to
 *  `now` (ms); null when there is no end or no progress to extrapolate. */
export function secondsLeft(estimate, end, now) {
  if (estimate?.rate == null || estimate.rate <= 0 || end == null) return null;
  const atReport = (end - estimate.current) / estimate.rate;
  return Math.max(0, atReport - (now - estimate.at) / 1000);
}
