// The live stream of a space or share link: an EventSource on `{base}/events` whose every
// connection starts with a snapshot, then one `task` event per change. The server ends a
// stream to make its page start again (a task was deleted: a resync), or for good (the
// space was deleted, the link revoked). A live stream that ends is opened again at once
// and quietly: its next snapshot replaces what the page holds. A connection that fails
// is followed by one small JSON read, which tells a gone space or link (404: the stream
// stops for good, and the page says so) from a passing trouble (retried with a growing
// delay).

const FIRST_RETRY_MS = 500;
const LAST_RETRY_MS = 30_000;
// A live stream ending this soon after the last one did is opened again after a growing
// delay, so that a server ending streams in a loop is not asked again in a loop.
const QUICK_END_MS = 5_000;
// A stream that ended says "reconnecting" only if it is not live again by then.
const QUIET_MS = 1_500;

/** Opens the stream of `base` with `query`; calls `onSnapshot(space)`, `onTask(task)`,
 *  `onEstimates(estimates)` (the server's estimates of running tasks, by key, after the
 *  snapshot and beside each running task's event), `onStatus("live" | "reconnecting")`
 *  and, once, `onGone()`. Returns `stop()`, which closes it for good (say, once the page
 *  itself deleted the space). */
export function connect(base, query, { onSnapshot, onTask, onEstimates, onStatus, onGone }) {
  let retry = FIRST_RETRY_MS; // before the next try after a failed connection
  let again = 0; // before opening again a live stream that ended soon after the last one
  let lastEnd = -Infinity;
  let source = null;
  let pending = null; // the timer of the next open
  let quiet = null; // the timer that says "reconnecting" if a reopened stream is not live
  let stopped = false;

  function open() {
    pending = null;
    if (stopped) return;
    let live = false;
    const current = new EventSource(`${base}/events?${query}`);
    source = current;
    current.addEventListener("snapshot", (event) => {
      live = true;
      retry = FIRST_RETRY_MS;
      clearTimeout(quiet);
      onSnapshot(JSON.parse(event.data));
      onStatus("live");
    });
    current.addEventListener("task", (event) => onTask(JSON.parse(event.data)));
    current.addEventListener("estimates", (event) => onEstimates?.(JSON.parse(event.data)));
    current.addEventListener("error", () => {
      // Closed here, never left to the browser's own reconnection: its next try is ours.
      current.close();
      if (stopped || current !== source) return;
      if (live) ended();
      else failed();
    });
  }

  /** A live stream ended: open it again, at once unless it keeps ending. */
  function ended() {
    const now = Date.now();
    const soon = now - lastEnd < QUICK_END_MS;
    again = soon ? Math.min(Math.max(again * 2, FIRST_RETRY_MS), LAST_RETRY_MS) : 0;
    lastEnd = now;
    clearTimeout(quiet);
    quiet = setTimeout(() => onStatus("reconnecting"), QUIET_MS);
    if (again === 0) open();
    else pending = setTimeout(open, again);
  }

  /** A connection failed before its snapshot: gone for good (404), or try again later. */
  async function failed() {
    try {
      const response = await fetch(`${base}?limit=1`, { headers: { Accept: "application/json" } });
      if (response.status === 404) {
        stop();
        onGone();
        return;
      }
    } catch {
      // The network is down: try again below.
    }
    if (stopped) return;
    clearTimeout(quiet);
    onStatus("reconnecting");
    pending = setTimeout(open, retry);
    retry = Math.min(retry * 2, LAST_RETRY_MS);
  }

  function stop() {
    stopped = true;
    source?.close();
    clearTimeout(pending);
    clearTimeout(quiet);
  }

  open();
  return stop;
}
