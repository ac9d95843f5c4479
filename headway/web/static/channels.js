// The owner's notification channels: a form that adds one (an Apprise URL, the events it
// hears, when a task counts as stalled, steps or not, a read-only link for its messages),
// and the list of them, each with its redacted URL, its events, a test message and its
// outcome, its recent deliveries and, once confirmed, its removal. The server checks
// everything; its 422 sentence is shown as it is.

import { el, setText } from "./dom.js";
import { formatClock, formatDuration, parseTime } from "./format.js";
import { JSON_HEADERS, errorOf } from "./http.js";

const REFRESH_MS = 30_000; // deliveries are read again this often while the page is seen
const MIN_STALL_MINUTES = 1; // the server's `stalled_after`: 60 to 604,800 s
const MAX_STALL_MINUTES = 10_080;
const EVENTS = { completed: "finishes", failed: "failures", stalled: "stalls", late: "late runs" };
const COLUMNS = ["Time", "Event", "Outcome", "Detail"];
const OUTCOMES = { delivered: "delivered", failed: "failed", given_up: "given up" };
// The schemes whose services can edit a message they sent (the server's `live_send`).
const LIVE_SCHEMES = new Set(["ntfy", "ntfys", "tgram", "discord", "slack", "matrix", "matrixs"]);
const LIVE_HINT =
  "One message per task, edited as it moves and left showing how it ended: ntfy, " +
  "Telegram, Discord, Slack (with a bot token, xoxb-…) and Matrix can edit what they sent.";

/** Why the URL's service cannot keep a live message, or null when it can (or the URL is
 *  not written yet): the server says the same with a 422. */
export function cannotEdit(text) {
  const found = /^\s*([a-z][a-z0-9+.-]*):\/\/([^/?#]*)/i.exec(text);
  if (found == null) return null;
  const scheme = found[1].toLowerCase();
  if (!LIVE_SCHEMES.has(scheme)) {
    return `${scheme}:// cannot edit a message it sent, so it gets events only. ${LIVE_HINT}`;
  }
  if (scheme === "slack" && !/^xox[bp]-/i.test(found[2])) {
    return "A Slack webhook URL cannot edit a message it sent: use a bot token (slack://xoxb-…/#channel).";
  }
  return null;
}

/** Wires the panel of `space`; `onChannels(channels)` hears the list each time it is read
 *  or changes. Returns `{showShares(shares)}`, which fills the read-only link picker, and
 *  `stop()`, which ends its reading of the deliveries. */
export function setUpChannels(space, say, onChannels) {
  const collection = `/spaces/${space}/channels`;
  const form = document.getElementById("channel-form");
  const url = document.getElementById("channel-url");
  const events = [...form.querySelectorAll('input[name="events"]')];
  const stalled = events.find((box) => box.value === "stalled");
  const stallField = document.getElementById("channel-stall");
  const minutes = document.getElementById("channel-stalled-after");
  const steps = document.getElementById("channel-steps");
  const live = document.getElementById("channel-live");
  const liveHint = document.getElementById("channel-live-hint");
  const showLive = () => {
    const why = cannotEdit(url.value);
    live.disabled = why != null;
    if (why != null) live.checked = false;
    setText(liveHint, why ?? LIVE_HINT);
  };
  url.addEventListener("input", showLive);
  const share = document.getElementById("channel-share");
  const submit = form.querySelector('button[type="submit"]');
  const error = document.getElementById("channel-error");
  const list = document.getElementById("channel-list");
  const none = document.getElementById("channel-none");
  const shown = new Map(); // channel uuid -> ChannelItem
  // The channels this page added or removed: a list read across one of them is stale.
  let edits = 0;

  const showError = (message) => {
    setText(error, message ?? "");
    error.hidden = message == null;
  };

  const changed = () => {
    none.hidden = shown.size > 0;
    onChannels([...shown.values()].map((item) => item.channel));
  };

  const remove = async (item) => {
    const response = await fetch(`${collection}/${item.channel.uuid}`, {
      method: "DELETE",
      headers: JSON_HEADERS,
    });
    if (!response.ok && response.status !== 404) {
      item.say((await errorOf(response)) ?? "The channel could not be removed; try again.");
      return;
    }
    item.element.remove();
    shown.delete(item.channel.uuid);
    edits += 1;
    changed();
    url.focus();
    say("Channel removed: it sends nothing more.");
  };

  const add = (channel) => {
    const item = new ChannelItem(channel, collection, remove);
    shown.set(channel.uuid, item);
    list.append(item.element);
    return item;
  };

  /** Shows the channels as the server lists them: new ones added, gone ones removed,
   *  the others' deliveries brought up to date (the DOM, and focus, stay put). */
  const sync = (channels) => {
    const listed = new Set(channels.map((channel) => channel.uuid));
    for (const [uuid, item] of shown) {
      if (!listed.has(uuid)) {
        item.element.remove();
        shown.delete(uuid);
      }
    }
    for (const channel of channels) {
      const item = shown.get(channel.uuid);
      if (item == null) add(channel);
      else item.update(channel);
    }
    changed();
  };

  let refreshing = null;
  const refresh = async () => {
    try {
      const before = edits;
      const response = await fetch(collection, { headers: JSON_HEADERS });
      if (response.status === 404) clearInterval(refreshing); // the space is gone
      if (!response.ok) throw new Error(String(response.status));
      const channels = await response.json();
      // Read before an add or a remove this page made: it would undo it, so read again.
      if (edits !== before) return refresh();
      sync(channels);
    } catch {
      if (shown.size === 0) showError("The channels could not be loaded.");
    }
  };

  /** The body to send, or a sentence saying what to fix. */
  const body = () => {
    const wanted = events.filter((box) => box.checked).map((box) => box.value);
    if (url.value.trim() === "") {
      return "Enter the channel's Apprise URL, such as ntfys://ntfy.sh/my-topic.";
    }
    if (wanted.length === 0) return "Pick at least one event to be told about.";
    const request = { url: url.value.trim(), events: wanted, steps: steps.checked };
    if (live.checked) request.live = true;
    if (stalled.checked) {
      const count = Number(minutes.value);
      if (!Number.isInteger(count) || count < MIN_STALL_MINUTES || count > MAX_STALL_MINUTES) {
        return "Stalled after must be a whole number of minutes from 1 to 10,080 (a week).";
      }
      request.stalled_after = count * 60;
    }
    if (share.value !== "") request.share_uuid = share.value;
    return request;
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const request = body();
    if (typeof request === "string") {
      showError(request);
      return;
    }
    showError(null);
    submit.disabled = true;
    try {
      const response = await fetch(collection, {
        method: "POST",
        headers: JSON_HEADERS,
        body: JSON.stringify(request),
      });
      if (response.status !== 201) {
        showError((await errorOf(response)) ?? "The channel could not be added; try again.");
        return;
      }
      const item = add({ ...(await response.json()), deliveries: [] });
      edits += 1;
      changed();
      url.value = "";
      showLive();
      item.focus();
      say(`Channel added: ${item.channel.url}.`);
    } catch {
      showError("The server could not be reached; try again.");
    } finally {
      submit.disabled = false;
    }
  });

  const showStall = () => {
    stallField.hidden = !stalled.checked;
  };
  stalled.addEventListener("change", showStall);
  showStall();
  for (const example of form.querySelectorAll("button[data-example]")) {
    example.addEventListener("click", () => {
      url.value = example.dataset.example;
      showLive();
      url.focus();
    });
  }

  refresh();
  refreshing = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);

  return {
    stop() {
      clearInterval(refreshing);
    },
    showShares(shares) {
      const picked = share.value;
      const options = shares.map((link) => el("option", { value: link.uuid }, shareLabel(link)));
      share.replaceChildren(el("option", { value: "" }, "None"), ...options);
      share.value = shares.some((link) => link.uuid === picked) ? picked : "";
    },
  };
}

/** A read-only link as the picker names it: when it was made, and the end of its address
 *  to tell two apart. */
function shareLabel(link) {
  return `Link created ${formatClock(parseTime(link.created_at))} (…${link.uuid.slice(-6)})`;
}

/** What a channel hears, in words: "finishes, failures · stalls after 10 min · steps
 *  too · with a read-only link". */
function describe(channel) {
  const heard = channel.events.filter((name) => name !== "stalled").map((name) => EVENTS[name]);
  const parts = heard.length > 0 ? [heard.join(", ")] : [];
  if (channel.events.includes("stalled")) {
    parts.push(`stalls after ${formatDuration(channel.stalled_after)}`);
  }
  parts.push(channel.steps ? "steps too" : "top-level tasks");
  if (channel.live) parts.push("one live message per task");
  if (channel.share_uuid != null) parts.push("with a read-only link");
  return parts.join("\u00a0· "); // a wrapped line never starts with the separator
}

let lastChannelId = 0;

/** One channel in the list: its URL (redacted by the server), what it hears, "Send test"
 *  and its outcome, "Remove" (asked twice), and its recent deliveries. */
class ChannelItem {
  constructor(channel, collection, onRemove) {
    this.channel = channel;
    this.collection = collection;
    const id = `channel-${++lastChannelId}`;
    this.url = el("code", { class: "channel-url", id: `${id}-url` }, channel.url);
    this.outcome = el("p", { class: "channel-outcome", role: "status", "aria-live": "polite" });
    this.test = el("button", { type: "button", "aria-describedby": `${id}-url` }, "Send test");
    this.test.addEventListener("click", () => this.sendTest());
    this.remove = el(
      "button",
      { type: "button", class: "danger", "aria-describedby": `${id}-url` },
      "Remove",
    );
    this.confirm = el("button", { type: "button", class: "danger" }, "Remove channel");
    this.cancel = el("button", { type: "button" }, "Keep it");
    this.actions = el("div", { class: "channel-actions" }, this.test, this.remove);
    this.asking = el(
      "div",
      { class: "channel-actions", role: "group", "aria-label": "Confirm removal", hidden: true },
      el("span", {}, "Remove this channel? It sends nothing more."),
      this.confirm,
      this.cancel,
    );
    this.remove.addEventListener("click", () => this.ask(true));
    this.cancel.addEventListener("click", () => this.ask(false));
    this.confirm.addEventListener("click", async () => {
      this.confirm.disabled = true;
      try {
        await onRemove(this);
      } finally {
        this.confirm.disabled = false;
      }
    });
    this.summary = el("summary");
    this.rows = el("tbody");
    this.empty = el("p", { class: "muted" }, "Nothing sent yet.");
    this.table = el(
      "table",
      { class: "deliveries" },
      el("caption", { class: "visually-hidden" }, "Recent deliveries, newest first"),
      el(
        "thead",
        {},
        el(
          "tr",
          {},
          ...COLUMNS.map((name) => el("th", { scope: "col" }, name)),
        ),
      ),
      this.rows,
    );
    this.deliveries = el(
      "details",
      { class: "channel-deliveries" },
      this.summary,
      this.empty,
      this.table,
    );
    this.heard = el("p", { class: "muted" });
    this.element = el(
      "li",
      { class: "channel" },
      this.url,
      this.heard,
      this.actions,
      this.asking,
      this.outcome,
      this.deliveries,
    );
    this.update(channel);
  }

  /** Shows `channel` as the server now lists it. */
  update(channel) {
    this.channel = channel;
    setText(this.url, channel.url);
    setText(this.heard, describe(channel));
    this.showDeliveries(channel.deliveries ?? []);
  }

  showDeliveries(deliveries) {
    this.channel = { ...this.channel, deliveries };
    setText(this.summary, `Recent deliveries (${deliveries.length})`);
    this.empty.hidden = deliveries.length > 0;
    this.table.hidden = deliveries.length === 0;
    this.rows.replaceChildren(...deliveries.map(deliveryRow));
  }

  focus() {
    this.test.focus();
  }

  say(message) {
    setText(this.outcome, message);
  }

  /** Shows or hides the confirmation, moving focus to what replaced the pressed button. */
  ask(asking) {
    this.actions.hidden = asking;
    this.asking.hidden = !asking;
    (asking ? this.confirm : this.remove).focus();
  }

  async sendTest() {
    this.test.disabled = true;
    this.say("Sending a test message…");
    try {
      const response = await fetch(`${this.collection}/${this.channel.uuid}/test`, {
        method: "POST",
        headers: JSON_HEADERS,
        body: "{}",
      });
      if (!response.ok) {
        this.say((await errorOf(response)) ?? "The test message could not be sent; try again.");
        return;
      }
      const delivery = await response.json();
      // Delivered, the detail ("delivered to Slack (HTTP 200)") is left to the table.
      const failed = delivery.outcome !== "delivered";
      const why = failed && delivery.detail ? `: ${delivery.detail}` : "";
      this.say(`Test message ${failed ? "not delivered" : "delivered"}${why}.`);
      this.showDeliveries([delivery, ...this.channel.deliveries].slice(0, 20));
    } catch {
      this.say("The server could not be reached; try again.");
    } finally {
      this.test.disabled = false;
    }
  }
}

/** A delivery as a table row: time, event, outcome, detail. */
function deliveryRow(delivery) {
  const at = parseTime(delivery.at);
  const outcome = delivery.outcome;
  return el(
    "tr",
    {},
    el("td", { title: new Date(at).toLocaleString() }, formatClock(at)),
    el("td", {}, delivery.event),
    el("td", { class: `outcome ${outcome}` }, OUTCOMES[outcome] ?? outcome),
    el("td", {}, delivery.detail ?? ""),
  );
}
