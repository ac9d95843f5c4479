// Deleting, from the owner's page: the question a task's "Delete" asks first, and the
// DELETE of a task or a space, whose failure comes back as a sentence to show.

import { JSON_HEADERS, errorOf } from "./http.js";

const UNTITLED = "Untitled task";

/** A task's title as the question quotes it: reporter's text (see dom.js `setParts`). */
const titleOf = (task) => (task.title == null ? UNTITLED : { text: task.title });

/** The question a task's "Delete" asks: "Delete “Deploy” and its 3 steps? This cannot be
 *  undone.", as parts (see dom.js `setParts`). `steps` is how many steps it has;
 *  `parent` its parent, for a step. */
export function deleteQuestion(task, steps, parent = null) {
  const title = ["“", titleOf(task), "”"];
  let what = title;
  if (parent != null) {
    what = ["the step ", ...title, " of “", titleOf(parent), "”"];
  } else if (steps > 0) {
    what = [...title, ` and its ${steps} ${steps === 1 ? "step" : "steps"}`];
  }
  return ["Delete ", ...what, "? This cannot be undone."];
}

/** DELETEs `path` (a `what`: "task", "space"). Null once it is gone, a 404 included (it
 *  was deleted already, from another page); otherwise what went wrong. */
export async function deleteAt(path, what) {
  try {
    const response = await fetch(path, { method: "DELETE", headers: JSON_HEADERS });
    if (response.ok || response.status === 404) return null;
    return (await errorOf(response)) ?? `The ${what} could not be deleted; try again.`;
  } catch {
    return "The server could not be reached; try again.";
  }
}
