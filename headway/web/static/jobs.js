// A space's jobs (its tasks grouped by title, source and parent's title: see the
// README's "Jobs"), read when their panel is opened: each job's runs, failures and usual
// duration, and its newest runs as a chart drawn here, with no script from elsewhere:
// one bar per run (oldest left), its height the run's length, failed runs marked, and
// the band of its usual duration (p50 to p95).

import { el, setText } from "./dom.js";
import { formatDuration, parseTime } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const BAR = 10; // width of a run's bar, and the gap between two: 2
const HEIGHT = 48;

function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

/** The chart of `job`'s newest runs: bars oldest first, the usual band behind them. */
export function chart(job) {
  const runs = [...job.last].reverse();
  const tallest = Math.max(...runs.map((run) => run.seconds), job.usual?.p95_s ?? 0, 0.001);
  const y = (seconds) => HEIGHT - (seconds / tallest) * HEIGHT;
  const width = Math.max(runs.length, 1) * BAR;
  const failed = runs.filter((run) => run.failed).length;
  let label = `Lengths of its last ${runs.length} runs`;
  if (failed > 0) label += `, ${failed} failed`;
  if (job.usual != null) label += `; usually ${formatDuration(job.usual.p50_s)}`;
  const drawn = svg("svg", {
    class: "job-chart",
    role: "img",
    "aria-label": label,
    viewBox: `0 0 ${width} ${HEIGHT}`,
    width: String(width * 2),
    height: String(HEIGHT),
    preserveAspectRatio: "none",
  });
  if (job.usual != null) {
    const top = y(job.usual.p95_s);
    const height = Math.max(1, y(job.usual.p50_s) - top);
    drawn.append(svg("rect", { class: "usual", x: "0", y: String(top), width: String(width), height: String(height) }));
  }
  runs.forEach((run, index) => {
    const top = Math.min(y(run.seconds), HEIGHT - 1);
    const took = `${run.failed ? "failed after" : "took"} ${formatDuration(run.seconds)}`;
    const when = new Date(parseTime(run.finished_at)).toLocaleString();
    drawn.append(
      svg(
        "rect",
        {
          class: run.failed ? "run failed" : "run",
          x: String(index * BAR + 1),
          y: String(top),
          width: String(BAR - 2),
          height: String(HEIGHT - top),
        },
        svg("title", {}, `${when}: ${took}`),
      ),
    );
  });
  return drawn;
}

function facts(job) {
  const parts = [`${job.runs} ${job.runs === 1 ? "run" : "runs"}`];
  if (job.failed > 0) parts.push(`${job.failed} failed`);
  if (job.usual != null) {
    parts.push(`usually ${formatDuration(job.usual.p50_s)} (p95 ${formatDuration(job.usual.p95_s)})`);
  }
  if (job.active > 0) parts.push(`${job.active} running`);
  return parts.join(" · ");
}

/** Reads the jobs of `base` (a space's or a share link's path) each time `panel` opens. */
export function setUpJobs(panel, base) {
  const list = panel.querySelector(".job-list");
  const empty = panel.querySelector(".jobs-empty");
  async function show() {
    if (!panel.open) return;
    try {
      const response = await fetch(`${base}/jobs`, { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const { jobs } = await response.json();
      const shown = jobs.filter((job) => job.last.length > 0);
      list.replaceChildren(
        ...shown.map((job) =>
          el(
            "li",
            { class: "job" },
            el("h3", { dir: "auto" }, job.title),
            el("p", { class: "job-facts" }, facts(job)),
            chart(job),
          ),
        ),
      );
      empty.hidden = shown.length > 0;
      setText(empty, "No finished runs yet.");
    } catch {
      // The network is down: shown again at the next opening.
    }
  }
  panel.addEventListener("toggle", show);
  return show;
}
