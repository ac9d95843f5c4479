// The owner's "Delete this space": a second step asks to type the space's title (or
// "delete" when it has none) before the space and everything in it are deleted.

import { setText } from "./dom.js";
import { deleteAt } from "./deleting.js";

/** Whether `typed` is the phrase asked for: the title exactly (spaces around either
 *  aside), or "delete" in any case for an untitled space. */
function confirms(typed, phrase, untitled) {
  const said = typed.trim().normalize("NFC");
  const asked = phrase.trim().normalize("NFC");
  return untitled ? said.toLowerCase() === asked.toLowerCase() : said === asked;
}

/** Wires the panel of `space`; `onDeleted()` is called once the server deleted it. */
export function setUpSpaceDelete(space, onDeleted) {
  const open = document.getElementById("space-delete-open");
  const form = document.getElementById("space-delete-form");
  const input = document.getElementById("space-delete-confirm");
  const cancel = document.getElementById("space-delete-cancel");
  const error = document.getElementById("space-delete-error");
  const submit = form.querySelector('button[type="submit"]');
  const phrase = form.dataset.confirm;
  const untitled = form.dataset.untitled === "true";

  const showError = (message) => {
    setText(error, message ?? "");
    error.hidden = message == null;
    input.setAttribute("aria-invalid", String(message != null));
  };

  /** Opens or closes the confirmation; closed, it forgets what was typed. */
  const ask = (asking) => {
    form.hidden = !asking;
    open.setAttribute("aria-expanded", String(asking));
    showError(null);
    if (asking) {
      input.focus();
    } else {
      input.value = "";
      open.focus();
    }
  };

  open.addEventListener("click", () => ask(form.hidden));
  cancel.addEventListener("click", () => ask(false));
  form.addEventListener("keydown", (event) => {
    if (event.key === "Escape") ask(false);
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!confirms(input.value, phrase, untitled)) {
      showError(untitled ? "Type delete to confirm." : `Type “${phrase}” exactly to confirm.`);
      input.focus();
      return;
    }
    showError(null);
    submit.disabled = cancel.disabled = true;
    const failure = await deleteAt(`/spaces/${space}`, "space");
    submit.disabled = cancel.disabled = false;
    if (failure != null) {
      showError(failure);
      return;
    }
    onDeleted();
  });
}
