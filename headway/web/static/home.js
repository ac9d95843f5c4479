// The home page: creates a space from the form (title, icon) and opens its dashboard.

const form = document.getElementById("create-space");
const title = document.getElementById("space-title-input");
const icon = document.getElementById("space-icon-input");
const error = document.getElementById("create-error");
const submit = form.querySelector('button[type="submit"]');

function showError(message) {
  error.textContent = message;
  error.hidden = false;
}

async function createSpace(event) {
  event.preventDefault();
  error.hidden = true;
  submit.disabled = true;
  try {
    const response = await fetch("/spaces", {
      method: "POST",
      headers: { Accept: "application/json", "Content-Type": "application/json" },
      body: JSON.stringify({ title: title.value.trim() || null, icon: icon.value.trim() || null }),
    });
    const body = await response.json();
    if (response.status !== 201) {
      showError(body.error ?? "The space could not be created; try again.");
      return;
    }
    window.location.assign(`/spaces/${body.uuid}`);
  } catch {
    showError("The server could not be reached; try again.");
  } finally {
    submit.disabled = false;
  }
}

form.addEventListener("submit", createSpace);
for (const choice of document.querySelectorAll("button[data-icon]")) {
  choice.addEventListener("click", () => {
    icon.value = choice.dataset.icon;
    icon.focus();
  });
}
