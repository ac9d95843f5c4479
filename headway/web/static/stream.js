// The live stream of a space or share link: an EventSource on `{base}/events` whose every
// connection starts with a snapshot, then one `task` event per change. When a connection
// fails, one small JSON read tells a revoked or unknown link (404) from a passing
// trouble, which is retried with a growing delay.

const FIRST_RETRY_MS = 500;
const LAST_RETRY_MS = 30_000;

/** Opens the stream of `base` with `query`; calls `onSnapshot(space)`, `onTask(task)`,
 *  `onStatus("live" | "reconnecting")` and, once, `onGone()`. */
export function connect(base, query, { onSnapshot, onTask, onStatus, onGone }) {
  let retry = FIRST_RETRY_MS;

  function open() {
    const source = new EventSource(`${base}/events?${query}`);
    source.addEventListener("snapshot", (event) => {
      retry = FIRST_RETRY_MS;
      onSnapshot(JSON.parse(event.data));
      onStatus("live");
    });
    source.addEventListener("task", (event) => onTask(JSON.parse(event.data)));
    source.addEventListener("error", () => {
      source.close();
      onStatus("reconnecting");
      check();
    });
  }

  async function check() {
    try {
      const response = await fetch(`${base}?limit=1`, { headers: { Accept: "application/json" } });
      if (response.status === 404) {
        onGone();
        return;
      }
    } catch {
      // The network is down: try again below.
    }
    setTimeout(open, retry);
    retry = Math.min(retry * 2, LAST_RETRY_MS);
  }

  open();
}
