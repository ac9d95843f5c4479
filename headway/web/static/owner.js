// The owner's panel of a space's dashboard: copy-paste snippets to report to this space
// (this server's address and the space's uuid filled in), its read-only links (create,
// copy, open, revoke), its notification channels (channels.js) and deleting the space
// (space-delete.js).

import { setUpChannels } from "./channels.js";
import { confirmCopy, copyText, el } from "./dom.js";
import { formatClock, parseTime } from "./format.js";
import { JSON_HEADERS, errorOf } from "./http.js";
import { setUpSpaceDelete } from "./space-delete.js";

/** The snippets, keyed by the id of the `<code>` element that shows each. */
function snippets(origin, space) {
  const json = "-H 'content-type: application/json'";
  return {
    "snippet-curl": [
      `# Create a task and keep its uuid in T`,
      `T=$(curl -s -X POST ${origin}/spaces/${space}/tasks ${json} \\`,
      `  -d '{"title":"backup"}' | cut -d'"' -f4)`,
      ``,
      `# Report: each report replaces the task's whole state`,
      `curl -X PUT ${origin}/tasks/$T ${json} \\`,
      `  -d '{"current":3,"end":10,"values":{"log":"copying"}}'`,
      ``,
      `# Finish it, keeping the last numbers`,
      `curl -X PUT ${origin}/tasks/$T ${json} -d '{"done":true}'`,
    ].join("\n"),
    "snippet-url": [
      `# The same report from anything that can only fire a URL`,
      `curl "${origin}/tasks/$T/report?current=3&end=10&values%5Blog%5D=copying"`,
    ].join("\n"),
    "snippet-cli": [
      `# Install the command and the Python client from this server`,
      `pip install "$(curl -fsS ${origin}/client)"`,
      ``,
      `# Run a command as a task: its output's last line is the log,`,
      `# and a count it prints (12/30, 40%) the progress`,
      `export HEADWAY_URL=${origin}`,
      `export HEADWAY_SPACE=${space}`,
      `headway run --title backup -- ./backup.sh`,
    ].join("\n"),
    "snippet-python": [
      `import time`,
      `from headway import Client`,
      ``,
      `client = Client("${origin}", space="${space}")`,
      `files = ["users.csv", "orders.csv", "events.csv"]`,
      `# The task finishes when the block ends`,
      `with client.task("backup") as task:`,
      `    for done, name in enumerate(files, start=1):`,
      `        time.sleep(1)  # the work`,
      `        task.report(current=done, end=len(files), log=f"copied {name}")`,
    ].join("\n"),
  };
}

/** Fills the snippets, wires their copy buttons, the read-only links, the channels and
 *  the deletion of `space`; `say` announces a result to screen readers;
 *  `onChannels(channels)` is called with the space's channels each time they are read or
 *  change, `onDeleted()` once this page deleted the space. Returns `stop()`, which ends
 *  what the panel reads by itself (once the space is gone). */
export function setUpOwner(space, say, onChannels, onDeleted) {
  for (const [id, text] of Object.entries(snippets(window.location.origin, space))) {
    const code = document.getElementById(id);
    if (code) code.textContent = text;
  }
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const code = document.getElementById(button.dataset.copy);
    button.addEventListener("click", async () => {
      confirmCopy(button, await copyText(code.textContent, code));
    });
  }
  const channels = setUpChannels(space, say, onChannels);
  setUpShares(space, say, (shares) => channels.showShares(shares));
  setUpSpaceDelete(space, onDeleted);
  return () => channels.stop();
}

/** The space's read-only links: listed newest first, each with copy, open and revoke;
 *  `onShares(shares)` hears the list, newest first, each time it is read or changes. */
function setUpShares(space, say, onShares) {
  const collection = `/spaces/${space}/shares`;
  const list = document.getElementById("share-list");
  const create = document.getElementById("share-create");
  const error = document.getElementById("share-error");
  const none = document.getElementById("share-none");

  const showError = (message) => {
    error.textContent = message;
    error.hidden = message == null;
  };
  const shares = [];
  const changed = () => {
    none.hidden = shares.length > 0;
    onShares([...shares]);
  };

  const revoke = async (share, item) => {
    showError(null);
    const response = await fetch(`${collection}/${share.uuid}`, {
      method: "DELETE",
      headers: JSON_HEADERS,
    });
    if (!response.ok && response.status !== 404) {
      showError((await errorOf(response)) ?? "The link could not be revoked; try again.");
      return;
    }
    item.remove();
    if (shares.includes(share)) shares.splice(shares.indexOf(share), 1);
    changed();
    create.focus();
    say("Read-only link revoked: it no longer opens this space.");
  };

  const itemOf = (share) => {
    const item = shareItem(share);
    item.querySelector("button.danger").addEventListener("click", () => revoke(share, item));
    return item;
  };

  create.addEventListener("click", async () => {
    showError(null);
    create.disabled = true;
    try {
      const response = await fetch(collection, {
        method: "POST",
        headers: JSON_HEADERS,
        body: "{}",
      });
      if (response.status !== 201) {
        showError((await errorOf(response)) ?? "The link could not be created; try again.");
        return;
      }
      const share = { created_at: new Date().toISOString(), ...(await response.json()) };
      const item = itemOf(share);
      list.prepend(item);
      shares.unshift(share);
      changed();
      item.querySelector("button").focus();
      say("Read-only link created.");
    } finally {
      create.disabled = false;
    }
  });

  fetch(collection, { headers: JSON_HEADERS })
    .then((response) => (response.ok ? response.json() : Promise.reject(response)))
    .then((found) => {
      found.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
      shares.splice(0, shares.length, ...found);
      list.replaceChildren(...shares.map(itemOf));
      changed();
    })
    .catch(() => showError("The read-only links could not be loaded."));
}

/** One read-only link: its full address, and copy, open and revoke buttons, then what
 *  it can be shown as elsewhere (see linkSnippets). */
function shareItem(share) {
  const url = new URL(share.url, window.location.origin).href;
  const label = "Read-only link";
  const field = el("input", { type: "text", readonly: true, value: url, "aria-label": label });
  const copy = el("button", { type: "button", "aria-label": "Copy the link" }, "Copy");
  copy.addEventListener("click", async () => confirmCopy(copy, await copyText(url, field)));
  const created = `created ${formatClock(parseTime(share.created_at))}`;
  const actions = el(
    "div",
    { class: "share-actions" },
    copy,
    el("a", { class: "button", href: url, target: "_blank", rel: "noopener" }, "Open"),
    el("button", { type: "button", class: "danger", "aria-label": "Revoke the link" }, "Revoke"),
    el("span", { class: "muted" }, created),
  );
  return el("li", { class: "share" }, field, actions, shareSnippets(url));
}

/** The snippets of a read-only link at `url`, with the space's `title`: its badge in
 *  Markdown (for a README), its Shields endpoint badge's address, and an <iframe> of its
 *  compact live view. The same forms as `headway badge URL` prints. */
export function linkSnippets(url, title) {
  const name = title || "progress";
  const alt = name.replace(/[[\]\\]/g, "");
  const attribute = name.replace(/[&<>"']/g, (c) => `&#${c.codePointAt(0)};`);
  const json = encodeURIComponent(`${url}/shields.json`);
  return {
    markdown: `[![${alt}](${url}/badge.svg)](${url})`,
    shields: `https://img.shields.io/endpoint?url=${json}`,
    iframe: `<iframe src="${url}/embed" title="${attribute}" width="480" height="320"></iframe>`,
  };
}

const SNIPPETS = [
  ["markdown", "Badge, in Markdown"],
  ["shields", "Shields badge address"],
  ["iframe", "Live view, to frame in a page"],
];

/** A link's badge (shown live), and its snippets, each with a copy button. */
function shareSnippets(url) {
  const title = document.getElementById("space-title").textContent;
  const snippets = linkSnippets(url, title);
  const rows = SNIPPETS.map(([kind, name]) => {
    const field = el("input", {
      type: "text",
      readonly: true,
      value: snippets[kind],
      "aria-label": name,
      "data-snippet": kind,
    });
    const copy = el("button", { type: "button", "aria-label": `Copy: ${name}` }, "Copy");
    copy.addEventListener("click", async () => {
      confirmCopy(copy, await copyText(snippets[kind], field));
    });
    return el("div", { class: "share-snippet" }, el("span", { class: "muted" }, name), field, copy);
  });
  const badge = el("img", { src: `${url}/badge.svg`, alt: "This link's badge", height: 20 });
  return el(
    "details",
    { class: "share-snippets" },
    el("summary", {}, "Badge and embed"),
    el("p", { class: "share-badge" }, badge),
    ...rows,
  );
}
