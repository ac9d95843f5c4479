// "Notify me": asks for the browser's permission when the button is pressed (never on
// load), then shows a notification for each task that finishes while the page is open.

/** Wires `button`; returns `notify(title, body)`, which does nothing until notifications
 *  are on. Browsers without the Notification API keep the button hidden. */
export function setUpNotifier(button, say) {
  if (!("Notification" in window)) return () => {};
  let on = false;
  button.setAttribute("aria-pressed", "false");
  button.addEventListener("click", async () => {
    if (on) {
      on = false;
      say("Notifications off.");
    } else {
      const permission = await Notification.requestPermission();
      on = permission === "granted";
      say(
        on
          ? "You will be notified when a task finishes."
          : "Notifications are blocked for this site in the browser's settings.",
      );
    }
    button.setAttribute("aria-pressed", String(on));
  });
  button.hidden = false;
  return (title, body) => {
    if (!on || Notification.permission !== "granted") return;
    try {
      new Notification(title, { body, icon: "/static/icon.svg" });
    } catch {
      // Some mobile browsers only notify from a service worker; the page still announces it.
    }
  };
}
