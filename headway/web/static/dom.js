// Building the pages' elements from data without markup: text always goes in as text
// nodes and attributes through setAttribute, so user text never becomes HTML.

/** A new `tag` element with `attributes` (skipped when null or false) and `children`
 *  (strings become text nodes; null and false are skipped). */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value != null && value !== false) {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  node.append(...children.filter((child) => child != null && child !== false));
  return node;
}

/** Sets `node`'s text only when it changes, so screen readers and layout see no churn. */
export function setText(node, text) {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

const shownParts = new WeakMap(); // node -> the parts it shows, as JSON

/** Sets `node`'s content to `parts`, only when they change: a string is the page's own
 *  words, `{ text }` text a reporter wrote, shown in a <bdi> so that a bidi control in it
 *  (a right-to-left override, say) cannot reorder the words around it. */
export function setParts(node, parts) {
  const shown = JSON.stringify(parts);
  if (shownParts.get(node) === shown) return;
  shownParts.set(node, shown);
  node.replaceChildren(
    ...parts.map((part) => (typeof part === "string" ? part : el("bdi", {}, part.text))),
  );
}

/** The text of `parts` (see setParts), as one string. */
export function partsText(parts) {
  return parts.map((part) => (typeof part === "string" ? part : part.text)).join("");
}

/** Sets or removes an attribute, only when it changes. */
export function setAttribute(node, name, value) {
  if (value == null) {
    node.removeAttribute(name);
  } else if (node.getAttribute(name) !== String(value)) {
    node.setAttribute(name, String(value));
  }
}

/** Copies `text` to the clipboard; falls back to selecting `selectable` and the old copy
 *  command where the Clipboard API is missing (pages served over plain http). */
export async function copyText(text, selectable) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    if (selectable instanceof HTMLInputElement) {
      selectable.select();
    } else {
      window.getSelection().selectAllChildren(selectable);
    }
    return document.execCommand("copy");
  }
}

/** Shows "Copied" (or a hint to copy by hand) on `button` for a moment. */
export function confirmCopy(button, copied) {
  const label = button.dataset.label ?? button.textContent;
  button.dataset.label = label;
  button.textContent = copied ? "Copied" : "Press Ctrl+C";
  setTimeout(() => {
    button.textContent = label;
  }, 2000);
}
