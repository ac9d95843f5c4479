// A space's jobs (its tasks grouped by title, source and parent's title: see
// docs/walkthrough.md, "Jobs"), read when their panel is opened: each job's runs, failures and usual
// duration, and its newest runs as a chart drawn here, with no script from elsewhere:
// one bar per run (oldest left), its height the run's length (its scale below it, each
// bar's length on hover and focus), failed runs marked, and the band of its usual
// duration (p50 to p95). Steps' jobs are listed under their parent's job.

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

/** The chart of `job`'s newest runs: bars oldest first, the usual band behind them, and
 *  its scale below it (what a bar's height says, up to the tallest); each bar says its
 *  run's length on hover (its title) and on focus (its label). */
export function chart(job) {
  return el(
    "figure",
    { class: "job-runs" },
    bars(job),
    el("figcaption", { class: "job-axis" }, axis(job)),
  );
}

/** "Height: each run's length, 0 to 1.2 s · oldest left". */
function axis(job) {
  const tallest = Math.max(...job.last.map((run) => run.seconds), job.usual?.p95_s ?? 0);
  return `Height: each run's length, 0 to ${formatDuration(tallest)} · oldest left`;
}

function bars(job) {
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
    role: "group",
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
          role: "img",
          tabindex: "0",
          "aria-label": `${when}: ${took}`,
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
      // Steps' jobs are shown under their parent's job, not as jobs of their own.
      const shown = jobs.filter((job) => job.last.length > 0 && job.parent_title == null);
      const stepsOf = (job) =>
        jobs.filter((step) => step.parent_title === job.title && step.runs > 0);
      list.replaceChildren(
        ...shown.map((job) => {
          const steps = stepsOf(job);
          return el(
            "li",
            { class: "job" },
            el("h3", { dir: "auto" }, job.title),
            el("p", { class: "job-facts" }, facts(job)),
            chart(job),
            ...(steps.length === 0
              ? []
              : [
                  el(
                    "ul",
                    { class: "job-steps", "aria-label": `Steps of ${job.title}` },
                    ...steps.map((step) =>
                      el(
                        "li",
                        {},
                        el("span", { class: "job-step", dir: "auto" }, step.title),
                        ` · ${facts(step)}`,
                      ),
                    ),
                  ),
                ]),
          );
        }),
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
