// Words and numbers for people: counts, percentages, durations, ages, rates and times,
// and the space's icon as a favicon.

const counts = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });
const rates = new Intl.NumberFormat(undefined, { maximumSignificantDigits: 3 });

/** A count as the reader's locale writes it: 1,234.5. */
export function formatCount(number) {
  return counts.format(number);
}

/** A ratio as a whole percentage, rounded down so that 99.9% never reads as done. */
export function formatPercent(ratio) {
  return `${Math.floor(ratio * 100)}%`;
}

/** Seconds as a person reads them: under 10 s with one decimal ("1.9 s"; "under 0.1 s"
 *  below that), under a minute whole seconds rounded to the nearest ("42 s"), then two
 *  units, the smaller rounded down and left out when zero ("3 min 10 s", "2 h 5 min",
 *  "3 d 4 h"). The same words as headway/durations.py (a test holds the two together). */
export function formatDuration(seconds) {
  const s = Number.isFinite(seconds) && seconds > 0 ? seconds : 0;
  const tenths = Math.floor(s * 10 + 0.5);
  if (tenths === 0) return "under 0.1 s";
  if (tenths < 100) return `${(tenths / 10).toFixed(1)} s`;
  const whole = Math.floor(s + 0.5);
  if (whole < 60) return `${whole} s`;
  const total = Math.max(Math.floor(s), 60);
  const pair = (big, bigUnit, small, smallUnit) =>
    small ? `${big} ${bigUnit} ${small} ${smallUnit}` : `${big} ${bigUnit}`;
  if (total < 3600) return pair(Math.floor(total / 60), "min", total % 60, "s");
  if (total < 86400) {
    return pair(Math.floor(total / 3600), "h", Math.floor((total % 3600) / 60), "min");
  }
  return pair(Math.floor(total / 86400), "d", Math.floor((total % 86400) / 3600), "h");
}

/** Microseconds since the epoch of an RFC 3339 timestamp: Date.parse stops at the
 *  millisecond, the digits after it are added back. */
function parseMicros(timestamp) {
  const extra = /\.\d{3}(\d{1,3})/.exec(timestamp)?.[1] ?? "";
  return parseTime(timestamp) * 1000 + Number(extra.padEnd(3, "0"));
}

/** How long a finished task ran, in seconds to the microsecond: from its `created_at` to
 *  its `finished_at` (the API's `duration` is whole seconds, rounded down). */
export function runSeconds(task) {
  return Math.max(parseMicros(task.finished_at) - parseMicros(task.created_at), 0) / 1e6;
}

/** How long ago `milliseconds` back was: "just now", "12 s ago", "3 min 10 s ago". */
export function formatAge(milliseconds) {
  return milliseconds < 1000 ? "just now" : `${formatDuration(milliseconds / 1000)} ago`;
}

/** A rate per second as "2.5/s", or per minute or hour when slower. */
export function formatRate(perSecond) {
  if (perSecond >= 1) return `${rates.format(perSecond)}/s`;
  if (perSecond * 60 >= 1) return `${rates.format(perSecond * 60)}/min`;
  return `${rates.format(perSecond * 3600)}/h`;
}

/** Milliseconds since the epoch of an RFC 3339 timestamp (or null), whatever the number
 *  of fractional digits. */
export function parseTime(timestamp) {
  return timestamp == null ? null : Date.parse(timestamp.replace(/(\.\d{3})\d+/, "$1"));
}

/** A clock time for display ("14:05"), with the date when it is not today. */
export function formatClock(milliseconds) {
  const date = new Date(milliseconds);
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (date.toDateString() === new Date().toDateString()) return time;
  return `${date.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}

/** A data: URL of an SVG showing `icon` (one character), for the tab's favicon. */
export function iconUrl(icon) {
  const escaped = icon.replace(/[&<>"']/g, (c) => `&#${c.codePointAt(0)};`);
  const svg =
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">' +
    `<text x="50" y="50" dy=".35em" text-anchor="middle" font-size="84">${escaped}</text></svg>`;
  return `data:image/svg+xml,${encodeURIComponent(svg)}`;
}
