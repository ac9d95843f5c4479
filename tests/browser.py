"""A real browser for the page tests: Debian's chromium driven by Playwright, and what the
tests watch in a page (console errors, dialogs, notifications)."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, Playwright, expect

# The features Playwright (1.65) turns off, which a `--disable-features` of ours replaces
# (Chromium takes the last one given), and two more: the address bar's pop-ups, which
# each browser context otherwise loads at once in a renderer of its own, unseen by any
# test: about 0.9 s of CPU per context, more than half of what Chromium spent in the
# page tests.
DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync,DestroyProfileOnBrowserClose,HttpsUpgrades,"
    "HttpsFirstBalancedModeAutoEnable,LensOverlay,MediaRouter,PaintHolding,"
    "ThirdPartyStoragePartitioning,AvoidCorsURLLoaderRestartOnRedirect,TcpPortRandomizationWin,"
    "OptimizationHints,NetworkTimeServiceQuerying,AimEnabled,PreconnectToSearch,"
    "WebUIOmniboxPopup,WebUIOmniboxAimPopup"
)

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    f"--disable-features={DISABLED_FEATURES}",
]

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)

# Wraps the page's Notification API to record what the page asks for, while still
# calling the real one: it observes the page, it does not replace the server.
RECORD_NOTIFICATIONS = """(() => {
  const Real = window.Notification;
  const shown = (window.__notifications = []);
  window.__permissionRequests = 0;
  class Recorded extends Real {
    constructor(title, options) {
      shown.push({ title, body: options?.body ?? null });
      super(title, options);
    }
    static requestPermission(...args) {
      window.__permissionRequests += 1;
      return Real.requestPermission(...args);
    }
    static get permission() {
      return Real.permission;
    }
  }
  window.Notification = Recorded;
})();"""


def chromium_path() -> str:
    """Debian's chromium; missing, it fails the tests in CI and skips them elsewhere."""
    found = shutil.which("chromium")
    if found is None:
        message = "chromium is not installed (scripts/system-packages installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


# How long `expect(...)` waits for a page to show what a test asks, returning as soon as
# it does: Playwright's 5 s suits a calm machine, not Chromium beside a busy suite.
EXPECT_TIMEOUT_MS = 20_000


def launch(playwright: Playwright) -> Browser:
    """Headless chromium, always: the tests run without a display."""
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    return playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)


@dataclass
class Watch:
    """What went wrong in a page: console errors (CSP violations among them), uncaught
    exceptions and dialogs (an `alert` would mean user text ran as code)."""

    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    expected: list[re.Pattern[str]] = field(default_factory=list)

    def attach(self, page: Page) -> Page:
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        page.on("dialog", self._dialog)
        return page

    def expect_error(self, pattern: str) -> None:
        """A console error matching `pattern` is expected (say, a revoked link's 404)."""
        self.expected.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.expected)]

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.text} ({message.location.get('url')})")

    def _dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()
