"""The browser pages: a space's live dashboard, a share link's read-only view and the home
page, driven in a real headless chromium against a real `headway serve`, plus their plain
HTTP behaviour (content negotiation, headers, static files) and static checks of the
script, the templates and the palette."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, Response, expect, sync_playwright

from headway.config import Settings
from headway.domain.durations import duration_words
from headway.domain.failure import failure_of
from headway.domain.schemas import CreateChannel
from headway.web.pages import CONTENT_SECURITY_POLICY, period_words

from .browser import RECORD_NOTIFICATIONS, UUID, Watch, chromium_path, launch
from .live_server import LiveServer, environment, serving, wait_for

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "headway" / "web"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
XSS = "<img src=x onerror=alert(1)>"


class Api:
    """The JSON API, as a script reporting progress uses it."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def space(self, title: str | None = None, icon: str | None = None) -> str:
        response = self.client.post("/spaces", json={"title": title, "icon": icon})
        assert response.status_code == 201, response.text
        return response.json()["uuid"]

    def task(self, space: str, title: str, **body: Any) -> str:
        response = self.client.post(f"/spaces/{space}/tasks", json={"title": title, **body})
        assert response.status_code == 201, response.text
        return response.json()["uuid"]

    def report(self, task: str, **body: Any) -> dict[str, Any]:
        response = self.client.put(f"/tasks/{task}", json=body)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium_path()
    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tests' screenshots go."""
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def api(server: LiveServer) -> Iterator[Api]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield Api(client)


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture
def new_page(browser: Browser, server: LiveServer, watch: Watch) -> Iterator[Callable[..., Page]]:
    """Opens pages in fresh browser contexts; afterwards, fails on any console error (a
    CSP violation is one), uncaught exception or dialog any of them saw."""
    contexts = []

    def new(viewport: dict[str, int] = DESKTOP, permissions: tuple[str, ...] = ()) -> Page:
        context = browser.new_context(base_url=server.url, viewport=viewport)
        context.grant_permissions(list(permissions), origin=server.url)
        if "notifications" in permissions:
            context.add_init_script(RECORD_NOTIFICATIONS)
        contexts.append(context)
        return watch.attach(context.new_page())

    yield new
    for context in contexts:
        context.close()
    assert watch.dialogs == [], "a dialog opened: user text ran as code"
    assert watch.unexpected() == [], "the page logged errors"


def task_card(page: Page, title: str) -> Locator:
    """A top-level task on the dashboard, by its title."""
    return page.locator("#tasks > li").filter(
        has=page.get_by_role("heading", name=title, exact=True)
    )


def step_card(page: Page, title: str) -> Locator:
    """A step shown inside its parent, by its title."""
    return page.locator("li.step").filter(has=page.get_by_text(title, exact=True))


def bar(card: Locator, title: str) -> Locator:
    return card.get_by_role("progressbar", name=f"Progress of {title}", exact=True)


def uuids_in(text: str) -> set[str]:
    return {match.lower() for match in UUID.findall(text)}


# Live dashboard


def test_a_space_page_shows_reports_live_without_reload(new_page, api, shots):
    space = api.space("Live space", "📦")
    task = api.task(space, "Backup", source="backup.sh")
    page = new_page()
    page.goto(f"/spaces/{space}")
    card = task_card(page, "Backup")
    expect(card.locator(".badge")).to_have_text("Waiting for data")
    expect(page.locator("#connection")).to_have_text("Live")
    page.evaluate("window.sameDocument = true")

    api.report(task, current=3, end=10, values={"log": "copying", "host": "db-1"})
    expect(bar(card, "Backup")).to_have_attribute("aria-valuenow", "30")
    expect(card.locator(".task-log")).to_have_text("copying")
    expect(card.locator(".task-facts")).to_contain_text("3 / 10 · 30%")
    expect(card.locator(".task-values dt")).to_have_text("host")
    expect(card.locator(".task-values dd")).to_have_text("db-1")
    expect(page).to_have_title("(30%) Live space")

    api.report(task, current=7, end=10, values={"log": "migrating"})
    expect(bar(card, "Backup")).to_have_attribute("aria-valuenow", "70")
    expect(card.locator(".task-log")).to_have_text("migrating")
    expect(card.locator(".task-values")).to_be_hidden()
    expect(card.locator(".task-facts")).to_contain_text(
        re.compile(r"/(s|min|h), (about .+ left|almost done)")
    )
    expect(card.locator(".task-facts")).to_contain_text(re.compile(r"updated (just now|\d+ s ago)"))
    expect(page).to_have_title("(70%) Live space")
    page.screenshot(path=shots / "live-running.png", full_page=True)

    api.report(task, done=True)
    expect(card.locator(".badge")).to_have_text("Finished")
    took = re.compile(r"took (under 0\.1 s|\d+\.\d s)")
    expect(card.locator(".task-facts")).to_contain_text(took)
    expect(page).to_have_title("✓ Live space")
    assert page.evaluate("window.sameDocument") is True, "the page reloaded"


def test_a_page_opened_mid_run_shows_the_servers_estimate_at_once(new_page, api):
    """The server's estimate comes with the stream's snapshot: a page opened (or a share
    page) while a task runs shows its time left and its job's usual duration before any
    new report, where the page alone would need two reports to tell a rate."""
    space = api.space("Nightly")
    for _ in range(5):  # a job with history: a usual duration
        api.report(api.task(space, "Nightly ETL", source="cron"), done=True)
    task = api.task(space, "Nightly ETL", source="cron")
    for current in (0, 100, 200):  # three reports past 2 % of `end`: a rate
        api.report(task, current=current, end=1000)
    share = api.client.post(f"/spaces/{space}/shares", json={}).json()["uuid"]
    for path in (f"/spaces/{space}", f"/shared/{share}"):
        page = new_page()
        page.goto(path)
        expect(page.locator("#connection")).to_have_text("Live")
        facts = task_card(page, "Nightly ETL").first.locator(".task-facts")
        expect(facts).to_contain_text(re.compile(r"(about .+ left|almost done|running late)"))
        expect(facts).to_contain_text("usually")
        assert task not in page.content() or path.startswith("/spaces/")


def test_past_runs_show_each_jobs_history_with_its_failures(new_page, api, shots):
    """The space's jobs, opened from the page: counts, the usual duration, and a chart of
    the newest runs drawn on the page (no script from elsewhere), failed runs marked; the
    share page shows the same without a uuid."""
    space = api.space("Nightly")
    for n in range(7):  # runs of a few tenths of a second: a usual duration
        task = api.task(space, "Nightly ETL", source="cron")
        time.sleep(0.2 + 0.05 * (n % 3))
        values = {"error": "disk full"} if n in (2, 5) else {}
        api.report(task, values=values, done=True)
    for _ in range(2):  # a job with steps: its steps are no jobs beside it
        release = api.task(space, "Release")
        for title in ("Run tests", "Publish"):
            api.report(api.task(space, title, parent_uuid=release), done=True)
    running = api.task(space, "Nightly ETL", source="cron")
    for current in (1, 2, 3):  # three reports: the server has a rate
        api.report(running, current=current, end=40, values={"log": f"table {current}"})
        time.sleep(0.1)
    share = api.client.post(f"/spaces/{space}/shares", json={}).json()["uuid"]
    for path in (f"/spaces/{space}", f"/shared/{share}"):
        page = new_page()
        scripts: list[str] = []
        page.on("request", lambda request, asked=scripts: asked.append(request.url))
        page.goto(path)
        expect(page.locator("#connection")).to_have_text("Live")
        page.get_by_text("Past runs").click()
        jobs = page.locator("#jobs .job")
        expect(jobs.locator("h3")).to_have_text(["Nightly ETL", "Release"])
        steps = jobs.last.locator(".job-steps > li")
        expect(steps).to_have_count(2)
        expect(steps.first).to_contain_text("2 runs")
        expect(jobs.last.locator(".job-steps")).to_contain_text("Run tests")
        job = jobs.filter(has=page.get_by_role("heading", name="Nightly ETL"))
        expect(job.locator("h3")).to_have_text("Nightly ETL")
        # A scale: what a bar's height says, and each bar's value on hover and on focus.
        expect(job.locator(".job-axis")).to_contain_text(re.compile(r"0 to \d"))
        first_run = job.locator("svg.job-chart rect.run").first
        expect(first_run).to_have_attribute("tabindex", "0")
        expect(first_run).to_have_attribute("aria-label", re.compile(r"(took|failed after) \d"))
        first_run.focus()
        expect(first_run).to_be_focused()
        expect(job.locator(".job-facts")).to_contain_text("7 runs · 2 failed")
        expect(job.locator(".job-facts")).to_contain_text("usually")
        expect(job.locator(".job-facts")).to_contain_text("1 running")
        expect(job.locator("svg.job-chart rect.run")).to_have_count(7)
        expect(job.locator("svg.job-chart rect.run.failed")).to_have_count(2)
        expect(job.locator("svg.job-chart rect.usual")).to_have_count(1)
        label = job.locator("svg.job-chart").get_attribute("aria-label")
        assert label is not None and "2 failed" in label
        assert all(url.startswith(api.client.base_url.__str__().rstrip("/")) for url in scripts)
        facts = task_card(page, "Nightly ETL").first.locator(".task-facts")
        expect(facts).to_contain_text(re.compile(r"(about .+ left|running late) · usually"))
        if path.startswith("/shared/"):
            assert space not in page.content() and running not in page.content()
            page.screenshot(path=shots / "jobs-shared.png", full_page=True)
        elif os.environ.get("HEADWAY_UPDATE_DOCS") == "1":  # docs/walkthrough.md's picture
            page.screenshot(path=ROOT / "docs" / "past-runs.png", full_page=True)


def test_a_new_task_appears_first_without_reload(new_page, api):
    space = api.space("Arrivals")
    api.task(space, "First")
    page = new_page()
    page.goto(f"/spaces/{space}")
    expect(page.locator("#tasks > li")).to_have_count(1)
    api.task(space, "Second")
    expect(page.locator("#tasks > li h3")).to_have_text(["Second", "First"])


def test_a_step_finishing_moves_its_parent(new_page, api):
    space = api.space("Families")
    parent = api.task(space, "Deploy")
    steps = [api.task(space, f"Step {n}", parent_uuid=parent) for n in (1, 2, 3)]
    page = new_page()
    page.goto(f"/spaces/{space}")
    card = task_card(page, "Deploy")
    expect(card.locator(".steps-summary")).to_have_text("0 of 3 steps done")
    expect(bar(card, "Deploy")).to_have_attribute("aria-valuenow", "0")

    api.report(steps[0], current=5, end=5)
    expect(bar(card, "Deploy")).to_have_attribute("aria-valuenow", "33")
    expect(card.locator(".steps-summary")).to_have_text("1 of 3 steps done")
    expect(step_card(page, "Step 1").locator(".badge")).to_have_text("Finished")

    api.report(steps[1], current=1, end=4, values={"log": "half way there"})
    expect(card.locator(".steps-summary")).to_have_text("1 of 3 steps done, 1 running")
    expect(step_card(page, "Step 2").locator(".task-log")).to_have_text("half way there")

    for step in steps[1:]:
        api.report(step, done=True)
    expect(card.locator(".badge").first).to_have_text("Finished")
    expect(bar(card, "Deploy")).to_have_attribute("aria-valuenow", "100")


def test_a_big_family_starts_collapsed_with_its_counts(new_page, api):
    space = api.space("Big family")
    parent = api.task(space, "Thumbnails")
    steps = [api.task(space, f"Image {n}", parent_uuid=parent) for n in range(12)]
    for step in steps[:2]:
        api.report(step, done=True)
    api.report(steps[2], current=40, end=100)
    page = new_page()
    page.goto(f"/spaces/{space}")
    card = task_card(page, "Thumbnails")
    expect(card.locator(".steps-summary")).to_have_text("2 of 12 steps done, 1 running")
    expect(card.locator("li.step")).to_have_count(1)  # only the running one
    toggle = card.get_by_role("button", name="Show all 12 steps")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    expect(card.locator("li.step")).to_have_count(12)
    expect(card.get_by_role("button", name="Hide steps")).to_have_attribute("aria-expanded", "true")

    api.report(steps[3], done=True)  # expanded stays expanded as steps finish
    expect(card.locator(".steps-summary")).to_have_text("3 of 12 steps done, 1 running")
    expect(card.locator("li.step")).to_have_count(12)


def test_the_filter_shows_active_or_finished_tasks(new_page, api):
    space = api.space("Filtered")
    done = api.task(space, "Done already")
    api.report(done, done=True)
    api.task(space, "Still running")
    page = new_page()
    page.goto(f"/spaces/{space}")
    titles = page.locator("#tasks > li h3")
    expect(titles).to_have_text(["Still running", "Done already"])
    page.get_by_role("button", name="Active 1").click()
    expect(titles).to_have_text(["Still running"])
    page.get_by_role("button", name="Finished 1").click()
    expect(titles).to_have_text(["Done already"])
    expect(page.get_by_role("button", name="Finished 1")).to_have_attribute("aria-pressed", "true")
    page.get_by_role("button", name="All 2").click()
    expect(titles).to_have_count(2)


def test_the_older_button_pages_back_through_a_big_space(new_page, api):
    space = api.space("Big space")
    for n in range(55):
        api.task(space, f"Task {n:02}")
    page = new_page()
    page.goto(f"/spaces/{space}")
    titles = page.locator("#tasks > li h3")
    expect(titles).to_have_count(50)
    expect(titles.first).to_have_text("Task 54")
    older = page.get_by_role("button", name="Show older tasks")
    older.click()
    expect(titles).to_have_count(55)
    expect(titles.last).to_have_text("Task 00")
    expect(older).to_be_hidden()


@pytest.mark.alone  # measures time: run by itself (scripts/test)
def test_age_goes_on_live_and_a_silent_task_is_marked_stale(new_page, api):
    space = api.space("Clock")
    task = api.task(space, "Quiet")
    api.report(task, current=1, end=10)
    page = new_page()
    page.clock.install()
    page.goto(f"/spaces/{space}")
    card = task_card(page, "Quiet")
    expect(card.locator(".age")).to_have_text(re.compile(r"updated (just now|\d\.\d s ago)"))
    page.clock.fast_forward(12_000)
    expect(card.locator(".age")).to_have_text(re.compile(r"updated 1[2-4] s ago"))
    expect(card.locator(".badge")).to_have_text("Running")
    # With no channel, the channels' default stall threshold: 600 s, as the server's.
    page.clock.fast_forward(60_000)
    expect(card.locator(".age")).to_have_text(re.compile(r"updated 1 min 1[2-4] s ago"))
    expect(card.locator(".badge")).to_have_text("Running")
    page.clock.fast_forward(528_000)
    expect(card.locator(".badge")).to_have_text("Stale")
    expect(card.locator(".age")).to_have_text(re.compile(r"no report for 10 min( \d+ s)?$"))
    api.report(task, current=2, end=10)
    expect(card.locator(".badge")).to_have_text("Running")


def test_a_finish_raises_a_browser_notification_once_asked(new_page, api):
    space = api.space("Notified", "🔔")
    old = api.task(space, "Finished before")
    api.report(old, done=True)
    task = api.task(space, "Backup")
    page = new_page(permissions=("notifications",))
    page.goto(f"/spaces/{space}")
    expect(task_card(page, "Backup")).to_be_visible()
    assert page.evaluate("window.__permissionRequests") == 0, "permission asked on load"

    notify = page.get_by_role("button", name="Notify me")
    notify.click()
    expect(notify).to_have_attribute("aria-pressed", "true")
    assert page.evaluate("window.__permissionRequests") == 1

    api.report(task, current=10, end=10)
    expect(page.locator("#announcer p").last).to_have_text("Backup finished.")
    shown = page.evaluate("window.__notifications")
    assert shown == [{"title": "Backup finished", "body": "Notified"}]


def test_the_dashboard_of_a_busy_space_as_the_readme_shows_it(new_page, api, shots):
    space = api.space("Nightly builds", "🌙")
    suite = api.task(space, "Run test suite", source="ci/test.sh")
    api.report(suite, current=1482, end=1482, values={"log": "1482 passed in 61 s", "failed": 0})
    deploy = api.task(space, "Deploy web", source="deploy.sh")
    steps = [
        api.task(space, title, parent_uuid=deploy)
        for title in ("Build image", "Push image", "Migrate", "Switch traffic")
    ]
    api.report(steps[0], done=True)
    api.task(space, "Sync mirrors", source="cron@mirror-2")
    thumbnails = api.task(space, "Render thumbnails", source="thumbs.py")
    backup = api.task(space, "Back up database", source="backup.sh")
    page = new_page()
    page.goto(f"/spaces/{space}")
    expect(page.locator("#connection")).to_have_text("Live")
    for n in range(3):  # successive reports give each task a rate and a time left
        api.report(
            backup,
            current=612 + 4 * n,
            end=1000,
            values={"log": "copying table orders", "host": "db-1"},
        )
        api.report(thumbnails, current=1200 + 9 * n, values={"log": f"IMG_{2041 + 9 * n}.jpg"})
        api.report(steps[1], current=2 + n, end=6, values={"log": f"pushing layer {2 + n} of 6"})
        expect(task_card(page, "Back up database").locator(".task-facts")).to_contain_text(
            f"{612 + 4 * n} / 1,000"
        )
    page.get_by_role("button", name="Create a read-only link").click()
    expect(page.get_by_role("textbox", name="Read-only link")).to_be_visible()
    expect(page).to_have_title("(43%) Nightly builds")  # the mean of 62% and 1 step in 4
    # Saved with the others; `HEADWAY_UPDATE_DOCS=1` also refreshes the README's picture
    # (docs/watching.md shows it too).
    page.screenshot(path=shots / "dashboard.png", full_page=True, animations="disabled")
    if os.environ.get("HEADWAY_UPDATE_DOCS") == "1":
        page.screenshot(path=ROOT / "docs" / "dashboard.png", full_page=True, animations="disabled")
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=shots / "dashboard-dark.png", full_page=True, animations="disabled")


def test_rate_time_left_and_ages_come_out_as_people_read_them(new_page):
    page = new_page()
    page.goto("/")
    rate = page.evaluate(
        """async () => {
          const { observe, secondsLeft } = await import("/static/rate.js");
          const first = observe(null, 0, 0);
          const second = observe(first, 10, 1000); // 10 a second
          const burst = observe(second, 40, 2000); // then 30 in one second
          return {
            first: first.rate,
            second: second.rate,
            seenAgain: observe(second, 10, 1000) === second, // a snapshot after a reconnect
            smoothed: burst.rate,
            left: secondsLeft(burst, 100, 2000),
            leftLater: secondsLeft(burst, 100, 4000),
            restarted: observe(burst, 5, 3000).rate,
          };
        }"""
    )
    assert rate["first"] is None and rate["second"] == 10 and rate["seenAgain"]
    assert 11 < rate["smoothed"] < 13  # a tenth of the way to 30 after one second
    assert rate["left"] == pytest.approx(60 / rate["smoothed"])
    assert rate["leftLater"] == pytest.approx(rate["left"] - 2)
    assert rate["restarted"] is None
    words = page.evaluate(
        """async () => {
          const f = await import("/static/format.js");
          return [f.formatAge(400), f.formatAge(12_400), f.formatDuration(190),
                  f.formatDuration(7_500), f.formatRate(2.5), f.formatRate(0.5),
                  f.formatPercent(0.999), f.parseTime("2026-11-22T01:15:09.123456Z")];
        }"""
    )
    assert words == [
        "just now",
        "12 s ago",
        "3 min 10 s",
        "2 h 5 min",
        "2.5/s",
        "30/min",
        "99%",
        1795310109123,
    ]


DURATIONS = [0, 0.04, 0.4, 0.99, 1.94, 9.94, 9.96, 12.5, 45, 59.4, 59.6, 190, 192.9, 7_500]
DURATIONS += [3 * 86_400 + 4 * 3600 + 59, -5]


def test_the_page_says_durations_as_the_server_does_to_the_microsecond(new_page):
    page = new_page()
    page.goto("/")
    said = page.evaluate(
        """async (durations) => {
          const { formatDuration } = await import("/static/format.js");
          return durations.map(formatDuration);
        }""",
        DURATIONS,
    )
    assert said == [duration_words(seconds) for seconds in DURATIONS]
    # A finished task's card, built as the dashboard builds it, from its timestamps.
    ages = page.evaluate(
        """async () => {
          const { TaskView } = await import("/static/task-view.js");
          const card = (created, finished, duration) => {
            const view = new TaskView(false, () => {}, () => null);
            const task = { title: "t", source: null, created_at: created,
                           finished_at: finished, duration, progress: null };
            view.update(task, null, Date.now());
            return view.age.textContent;
          };
          return [
            card("2026-11-22T01:00:00.000000Z", "2026-11-22T01:00:01.940000Z", 1),
            card("2026-11-22T01:00:00.999999Z", "2026-11-22T01:00:01.999000Z", 0),
            card("2026-11-22T01:00:00.5Z", "2026-11-22T01:03:12.9Z", 192),
          ];
        }"""
    )
    assert [age.split(",")[0] for age in ages] == ["took 1.9 s", "took 1.0 s", "took 3 min 12 s"]


# Share links


def test_a_share_link_shows_the_same_live_and_reveals_no_uuid(new_page, api, server, watch, shots):
    space = api.space("Shared space", "🛰")
    parent = api.task(space, "Deploy", source="deploy.sh")
    step = api.task(space, "Push image", parent_uuid=parent)
    api.report(step, current=2, end=5, values={"log": "pushing layer 2"})
    secret = {space, parent, step}

    owner = new_page(permissions=("clipboard-read", "clipboard-write"))
    owner.goto(f"/spaces/{space}")
    owner.get_by_role("button", name="Create a read-only link").click()
    link = owner.get_by_role("textbox", name="Read-only link")
    expect(link).to_have_value(re.compile(rf"^{re.escape(server.url)}/shared/"))
    url = link.input_value()
    copy = owner.get_by_role("button", name="Copy the link")
    copy.click()
    expect(copy).to_have_text("Copied")
    assert owner.evaluate("navigator.clipboard.readText()") == url
    share = url.rsplit("/", 1)[1]

    viewer = new_page()
    responses: list[Response] = []
    viewer.on("response", lambda response: responses.append(response))
    viewer.goto(url)
    expect(viewer.locator("#connection")).to_have_text("Live")
    expect(viewer.get_by_text("Read-only", exact=True)).to_be_visible()
    expect(viewer.get_by_role("button", name="Create a read-only link")).to_have_count(0)
    expect(viewer.get_by_role("heading", name="Notifications")).to_have_count(0)
    expect(viewer.locator("#channel-form")).to_have_count(0)
    card = task_card(viewer, "Deploy")
    expect(step_card(viewer, "Push image").locator(".task-log")).to_have_text("pushing layer 2")

    api.report(step, current=5, end=5)
    expect(card.locator(".steps-summary")).to_have_text("1 of 1 step done")
    expect(bar(card, "Deploy")).to_have_attribute("aria-valuenow", "100")
    viewer.screenshot(path=shots / "shared.png", full_page=True)

    assert uuids_in(viewer.content()) <= {share}
    for response in responses:
        assert not re.search(r"/channels(/|\?|$)", response.url), "the channels were read"
        assert uuids_in(response.url) <= {share}, response.url
        assert uuids_in(json.dumps(response.headers)) <= {share}, response.url
        if "text/event-stream" not in response.headers.get("content-type", ""):
            assert uuids_in(response.text()) <= {share}, response.url
    with httpx.Client(base_url=server.url, timeout=10) as client:
        read = client.get(f"/shared/{share}", params={"limit": 50})
        assert read.status_code == 200
        assert uuids_in(read.text) == set()
        stream = read_stream(client, f"/shared/{share}/events", lambda: api.report(step, done=True))
    assert "event: snapshot" in stream and "event: task" in stream
    assert uuids_in(stream) == set()
    assert not any(uuid in viewer.content() + stream for uuid in secret)

    watch.expect_error(r"404|MIME type")  # the revoked link's stream and read are refused
    owner.get_by_role("button", name="Revoke").click()
    expect(viewer.get_by_role("alert")).to_contain_text(
        "This link no longer works.", timeout=10_000
    )
    expect(viewer.locator("#tasks > li")).to_have_count(0)
    expect(owner.get_by_role("textbox", name="Read-only link")).to_have_count(0)


def read_stream(client: httpx.Client, path: str, then: Callable[[], Any]) -> str:
    """The text of a stream up to its first `task` event, calling `then` once the snapshot
    has arrived."""
    seen: list[str] = []
    with client.stream("GET", path, params={"limit": 50}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            seen.append(line)
            if line.startswith("data:") and seen[-2] == "event: snapshot":
                then()
            elif line.startswith("data:") and seen[-2] == "event: task":
                break
    return "\n".join(seen)


# Notifications (the owner's channels) and stalls


def channel_item(page: Page, url: str) -> Locator:
    """A channel in the owner's list, by its redacted URL."""
    return page.locator("#channel-list > li").filter(
        has=page.locator("code", has_text=re.compile(f"^{re.escape(url)}$"))
    )


def test_the_owner_adds_tests_and_removes_a_channel(new_page, api, json_receiver, watch, shots):
    space = api.space("Notified space", "📣")
    share = api.client.post(f"/spaces/{space}/shares", json={}).json()["uuid"]
    page = new_page()
    page.goto(f"/spaces/{space}")
    panel = page.locator("section").filter(has=page.get_by_role("heading", name="Notifications"))
    expect(panel.get_by_text("No channels yet.")).to_be_visible()
    add = panel.get_by_role("button", name="Add channel")

    # The server's 422, shown as it is.
    refused = api.client.post(f"/spaces/{space}/channels", json={"url": "file:///etc/passwd"})
    assert refused.status_code == 422
    watch.expect_error(r"status of 422")
    url = panel.get_by_role("textbox", name="Apprise URL")
    url.fill("file:///etc/passwd")
    add.click()
    expect(panel.get_by_role("alert")).to_have_text(refused.json()["error"])
    expect(panel.locator("#channel-list > li")).to_have_count(0)

    # The examples fill the field; the stall threshold shows once stalls are picked.
    panel.get_by_text("Examples of URLs").click()
    panel.get_by_role("button", name="Use the Telegram example").click()
    expect(url).to_have_value("tgram://123456789:BotToken/ChatID")
    expect(url).to_be_focused()
    # Telegram can keep a live message; a JSON endpoint cannot, and the form says why.
    live = panel.get_by_role("checkbox", name="Keep one message per task up to date")
    expect(live).to_be_enabled()
    url.fill("slack://TokenA/TokenB/TokenC")
    expect(live).to_be_disabled()
    expect(panel.locator("#channel-live-hint")).to_contain_text("use a bot token")
    minutes = panel.get_by_role("spinbutton", name="Stalled after, in minutes")
    expect(minutes).to_be_hidden()
    panel.get_by_role("checkbox", name="stalls").check()
    expect(minutes).to_be_visible()
    minutes.fill("0")
    url.fill(json_receiver.url())
    expect(live).to_be_disabled()
    expect(panel.locator("#channel-live-hint")).to_contain_text("json:// cannot edit")
    add.click()
    expect(panel.get_by_role("alert")).to_contain_text("from 1 to 10,080")

    minutes.fill("5")
    panel.get_by_role("checkbox", name="fails").check()
    panel.get_by_role("checkbox", name="Steps too").check()
    picker = panel.get_by_role("combobox", name="Read-only link in messages")
    expect(picker.locator("option")).to_have_count(2)
    picker.select_option(share)
    add.click()
    expect(panel.locator("#channel-list > li")).to_have_count(1)
    expect(panel.get_by_role("alert")).to_be_hidden()
    [stored] = api.client.get(f"/spaces/{space}/channels").json()
    assert (stored["events"], stored["steps"], stored["stalled_after"], stored["share_uuid"]) == (
        ["completed", "failed", "stalled"],
        True,
        300,
        share,
    )
    item = channel_item(page, stored["url"])
    expect(item).to_contain_text("finishes, failures · stalls after 5 min · steps too")
    expect(item).to_contain_text("with a read-only link")
    expect(url).to_have_value("")
    expect(item.get_by_role("button", name="Send test")).to_be_focused()
    expect(page.locator("#announcer p").last).to_have_text(f"Channel added: {stored['url']}.")

    # A test message: its outcome in a live region, the message at the receiver, and a
    # row in the channel's deliveries.
    item.get_by_role("button", name="Send test").click()
    outcome = item.get_by_role("status")
    expect(outcome).to_have_text("Test message delivered.")
    expect(outcome).to_have_attribute("aria-live", "polite")
    assert len(json_receiver.arrivals) == 1
    assert "Notified space" in json_receiver.texts()
    item.get_by_text("Recent deliveries (1)").click()
    row = item.locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(1)).to_have_text("test")
    expect(row.locator("td").nth(2)).to_have_text("delivered")
    expect(row.locator("td").nth(3)).to_contain_text("HTTP 200")
    json_receiver.refuse(1, status=503, retry_after=None)
    item.get_by_role("button", name="Send test").click()
    expect(outcome).to_have_text(re.compile(r"^Test message not delivered: .*HTTP 503.*\.$"))
    expect(item.locator("summary")).to_have_text("Recent deliveries (2)")
    expect(row.first.locator("td").nth(2)).to_have_text("failed")
    page.screenshot(path=shots / "notifications.png", full_page=True)
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=shots / "notifications-dark.png", full_page=True)
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=shots / "notifications-phone.png", full_page=True)

    # The list as another visit reads it, deliveries included.
    again = new_page()
    again.goto(f"/spaces/{space}")
    expect(channel_item(again, stored["url"]).locator("summary")).to_have_text(
        "Recent deliveries (2)"
    )
    again.close()

    # Remove asks first; keeping it changes nothing.
    item.get_by_role("button", name="Remove", exact=True).click()
    expect(item.get_by_role("button", name="Remove channel")).to_be_focused()
    item.get_by_role("button", name="Keep it").click()
    expect(item.get_by_role("button", name="Remove", exact=True)).to_be_focused()
    assert len(api.client.get(f"/spaces/{space}/channels").json()) == 1
    item.get_by_role("button", name="Remove", exact=True).click()
    item.get_by_role("button", name="Remove channel").click()
    expect(panel.locator("#channel-list > li")).to_have_count(0)
    expect(panel.get_by_text("No channels yet.")).to_be_visible()
    expect(url).to_be_focused()
    expect(page.locator("#announcer p").last).to_have_text(
        "Channel removed: it sends nothing more."
    )
    assert api.client.get(f"/spaces/{space}/channels").json() == []


def test_the_read_only_link_picker_follows_the_links(new_page, api):
    space = api.space("Links for channels")
    page = new_page()
    page.goto(f"/spaces/{space}")
    picker = page.get_by_role("combobox", name="Read-only link in messages")
    expect(picker.locator("option")).to_have_text(["None"])
    page.get_by_role("button", name="Create a read-only link").click()
    link = page.get_by_role("textbox", name="Read-only link").input_value()
    expect(picker.locator("option")).to_have_count(2)
    picker.select_option(link.rsplit("/", 1)[1])
    page.get_by_role("button", name="Revoke").click()
    expect(picker.locator("option")).to_have_text(["None"])
    expect(picker).to_have_value("")


def test_a_list_read_across_an_add_or_a_remove_does_not_undo_it(new_page, api, json_receiver):
    """The page reads its channels again every 30 s; a read answered after the owner added
    or removed one must not undo that on screen."""
    space = api.space("Channels read late")
    collection = f"**/spaces/{space}/channels"
    held: list[tuple[Any, Any]] = []

    def hold(route: Any) -> None:
        # One read of the list as it is now, answered only once the test lets it go.
        if route.request.method != "GET" or held:
            route.fallback()
            return
        held.append((route, route.fetch()))

    def read_late(then: Callable[[], None]) -> list[Any]:
        """Starts the 30 s read and holds its answer, does `then`, and lets the answer go:
        the page reads once more, and its list is what the server says now."""
        held.clear()
        page.clock.fast_forward(30_000)
        deadline = time.monotonic() + 10
        while not held and time.monotonic() < deadline:
            page.wait_for_timeout(20)
        [(route, stale)] = held
        then()
        with page.expect_response(
            lambda r: r.request.method == "GET" and r.url.endswith("/channels")
        ):
            route.fulfill(response=stale)
        return stale.json()

    page = new_page()
    page.clock.install()
    page.goto(f"/spaces/{space}")
    panel = page.locator("section").filter(has=page.get_by_role("heading", name="Notifications"))
    items = panel.locator("#channel-list > li")
    expect(panel.get_by_text("No channels yet.")).to_be_visible()
    held.append((None, None))  # the first read, at load, goes through
    page.route(collection, hold)

    def add() -> None:
        panel.get_by_role("textbox", name="Apprise URL").fill(json_receiver.url())
        panel.get_by_role("button", name="Add channel").click()
        expect(items).to_have_count(1)

    assert read_late(add) == []
    expect(items).to_have_count(1)

    def remove() -> None:
        items.get_by_role("button", name="Remove", exact=True).click()
        items.get_by_role("button", name="Remove channel").click()
        expect(items).to_have_count(0)

    assert len(read_late(remove)) == 1
    expect(items).to_have_count(0)
    expect(panel.get_by_text("No channels yet.")).to_be_visible()


class ShiftedClock:
    """Real time, moved forward by hand: the server's side of a page's `page.clock`, so
    that the two agree on what time it is while a test jumps minutes ahead."""

    def __init__(self) -> None:
        self.offset_us = 0

    def now_us(self) -> int:
        return time.time_ns() // 1000 + self.offset_us

    def advance(self, seconds: float) -> None:
        self.offset_us += round(seconds * 1_000_000)


def test_the_stale_marker_follows_the_servers_stall_rule(browser, watch, tmp_path, json_receiver):
    from headway.app import create_app

    clock = ShiftedClock()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'stalls.db'}",
        webhook_allow_private=True,
        rate_limits=False,
        run_worker=False,
    )
    with serving(settings, create_app(settings, clock)) as (host, port):
        base = f"http://{host}:{port}"
        pages = []

        def open_page(path: str) -> Page:
            context = browser.new_context(base_url=base, viewport=DESKTOP)
            page = watch.attach(context.new_page())
            page.clock.install()
            page.goto(path)
            pages.append(page)
            return page

        def later(seconds: int) -> None:
            clock.advance(seconds)
            for page in pages:
                page.clock.fast_forward(seconds * 1000)

        try:
            with httpx.Client(base_url=base, timeout=10) as client:
                api = Api(client)
                space = api.space("Stalls")
                quiet, flat = api.task(space, "Quiet"), api.task(space, "Flat")
                api.report(quiet, current=1, end=10)
                api.report(flat, current=1, end=10)
                share = client.post(f"/spaces/{space}/shares", json={}).json()["url"]
                channel = {"url": json_receiver.url(), "events": ["stalled"], "stalled_after": 60}
                assert client.post(f"/spaces/{space}/channels", json=channel).status_code == 201
                owner, viewer = open_page(f"/spaces/{space}"), open_page(share)
                expect(owner.locator("#channel-list > li")).to_have_count(1)
                expect(viewer.locator("#connection")).to_have_text("Live")
                cards = {
                    (p, title): task_card(p, title) for p in pages for title in ("Quiet", "Flat")
                }
                badges = {key: card.locator(".badge") for key, card in cards.items()}
                ages = {key: card.locator(".age") for key, card in cards.items()}

                later(30)  # Flat reports again, its count unchanged; Quiet says nothing
                api.report(flat, current=1, end=10, values={"log": "still at 1"})
                expect(task_card(owner, "Flat").locator(".task-log")).to_have_text("still at 1")
                expect(task_card(viewer, "Flat").locator(".task-log")).to_have_text("still at 1")
                for badge in badges.values():
                    expect(badge).to_have_text("Running")

                # 65 s: past the channel's 60 s on the owner's page, silent and flat alike;
                # the share link cannot read the channels and keeps the default 600 s.
                later(35)
                expect(badges[owner, "Quiet"]).to_have_text("Stale")
                expect(ages[owner, "Quiet"]).to_have_text(
                    re.compile(r"^no report for 1 min \d+ s$")
                )
                expect(badges[owner, "Flat"]).to_have_text("Stale")
                expect(ages[owner, "Flat"]).to_have_text(
                    re.compile(r"^no progress for 1 min \d+ s$")
                )
                expect(badges[viewer, "Quiet"]).to_have_text("Running")
                expect(badges[viewer, "Flat"]).to_have_text("Running")

                api.report(flat, current=2, end=10)  # it moves: running again
                expect(badges[owner, "Flat"]).to_have_text("Running")

                # Without the channel, the owner's page is back to the default.
                item = owner.locator("#channel-list > li")
                item.get_by_role("button", name="Remove", exact=True).click()
                item.get_by_role("button", name="Remove channel").click()
                expect(item).to_have_count(0)
                expect(badges[owner, "Quiet"]).to_have_text("Running")

                later(540)  # 605 s: Quiet is stale everywhere; Flat moved 540 s ago
                for page in pages:
                    expect(badges[page, "Quiet"]).to_have_text("Stale")
                    expect(ages[page, "Quiet"]).to_have_text(re.compile(r"^no report for 10 min"))
                    expect(badges[page, "Flat"]).to_have_text("Running")
        finally:
            for page in pages:
                page.context.close()
    assert watch.dialogs == []
    assert watch.unexpected() == []


def test_the_pages_judge_stalls_as_the_server_does(new_page):
    page = new_page()
    page.goto("/")
    judged = page.evaluate(
        """async () => {
          const { Motion, motionOf, staleAfterMs, stallOf } = await import("/static/stalls.js");
          const at = (s) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
          const now = Date.UTC(2026, 0, 1, 0, 0, 100);
          const task = (created, updated, current, finished = null) => ({
            created_at: at(created),
            finished_at: finished,
            progress: updated == null ? null : { updated_at: at(updated), current },
          });
          const judge = (t, movedAt) => stallOf(t, movedAt, now, 60_000);
          const motion = new Motion();
          motion.note("a", task(0, 20, 1));
          motion.note("a", task(0, 90, 1)); // a report, its count unchanged
          const flatSince = motion.movedAt("a");
          motion.note("a", task(0, 95, 2));
          const step = (created, current, finished = null) => ({
            created_at: at(created), finished_at: finished, progress: { current },
          });
          return {
            thresholds: [
              staleAfterMs(null),
              staleAfterMs([{ events: ["completed"], stalled_after: 60 }]),
              staleAfterMs([
                { events: ["stalled"], stalled_after: 900 },
                { events: ["completed", "stalled"], stalled_after: 120 },
                { events: ["failed"], stalled_after: 60 },
              ]),
            ],
            neverReported: judge(task(39, null, null), null),
            neverReportedYet: judge(task(41, null, null), null),
            silent: judge(task(0, 30, 1), Date.parse(at(30))),
            flat: judge(task(0, 90, 1), flatSince),
            moving: judge(task(0, 95, 2), motion.movedAt("a")),
            finished: judge(task(0, 1, 1, at(2)), Date.parse(at(1))),
            flatSince: flatSince === Date.parse(at(20)),
            parent: [
              motionOf(task(0, 1, 0), [step(1, 3), step(2, 5)]),
              motionOf(task(0, 1, 0), [step(1, 3), step(2, 6)]),
              motionOf(task(0, 1, 1), [step(1, 3, at(9)), step(2, 6)]),
            ],
          };
        }"""
    )
    default = CreateChannel(url="ntfys://ntfy.sh/t").stalled_after
    assert judged["thresholds"] == [default * 1000, default * 1000, 120_000]
    assert judged["neverReported"] == {"reason": "silent", "forMs": 61_000}
    assert judged["neverReportedYet"] is None
    assert judged["silent"] == {"reason": "silent", "forMs": 70_000}
    assert judged["flat"] == {"reason": "flat", "forMs": 80_000}
    assert judged["moving"] is None
    assert judged["finished"] is None
    assert judged["flatSince"] is True
    assert len(set(judged["parent"])) == 3, "a step moving or finishing moves its parent"


# Failures

DANGER = "rgb(207, 34, 46)"  # --danger in the light palette


def test_a_failed_command_and_a_client_exception_show_failed_with_their_error(
    new_page, api, server, tmp_path
):
    space = api.space("Nightly jobs", "🌙")
    running = api.task(space, "Still copying")
    api.report(running, current=3, end=10)
    page = new_page(permissions=("notifications",))
    page.goto(f"/spaces/{space}")
    expect(page).to_have_title("(30%) Nightly jobs")
    page.get_by_role("button", name="Notify me").click()

    env = environment(HEADWAY_URL=server.url, HEADWAY_SPACE=space)
    command = "import sys; print('no such table: users'); sys.exit(3)"
    run = subprocess.run(
        ["headway", "run", "--title", "Migrate", "--", sys.executable, "-c", command],
        env=env,
        capture_output=True,
        timeout=30,
    )
    assert run.returncode == 3, run.stderr
    migrate = task_card(page, "Migrate")
    expect(migrate.locator(".badge")).to_have_text("Failed")
    expect(migrate.locator(".task-error")).to_have_text("exit code 3")
    expect(migrate.locator(".task-log")).to_have_text("no such table: users")
    expect(migrate).to_have_class(re.compile(r"\bfailed\b"))
    expect(migrate.locator(".task-facts")).to_contain_text(re.compile(r"took .+, failed "))
    expect(page).to_have_title("(30%) ✗ 1 failed · Nightly jobs")
    expect(page.locator("#announcer p").last).to_have_text("Migrate failed: exit code 3.")
    assert page.evaluate("window.__notifications") == [
        {"title": "Migrate failed", "body": "exit code 3 (Nightly jobs)"}
    ]
    colours = migrate.evaluate(
        """card => ({
          badge: getComputedStyle(card.querySelector(".badge")).color,
          fill: getComputedStyle(card.querySelector(".bar-fill")).backgroundColor,
          border: getComputedStyle(card).borderLeftColor,
        })"""
    )
    assert colours == {"badge": DANGER, "fill": DANGER, "border": DANGER}

    script = (
        "import headway\n"
        "with headway.Client().task('Import') as task:\n"
        "    task.report(2, 5)\n"
        "    raise ValueError('bad row 3')\n"
    )
    client = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=30
    )
    assert client.returncode == 1 and "ValueError: bad row 3" in client.stderr
    imported = task_card(page, "Import")
    expect(imported.locator(".badge")).to_have_text("Failed")
    expect(imported.locator(".task-error")).to_have_text("ValueError: bad row 3")
    expect(page).to_have_title("(30%) ✗ 2 failed · Nightly jobs")

    api.report(running, done=True)
    expect(task_card(page, "Still copying").locator(".badge")).to_have_text("Finished")
    expect(task_card(page, "Still copying").locator(".task-error")).to_be_hidden()
    expect(page).to_have_title("✗ 2 failed · Nightly jobs")
    # A number or an empty string in `error` is just a value.
    for title, error in (("Zero", 0), ("Empty", "")):
        api.report(api.task(space, title), values={"error": error}, done=True)
        expect(task_card(page, title).locator(".badge")).to_have_text("Finished")
    expect(page).to_have_title("✗ 2 failed · Nightly jobs")


def test_a_parent_with_a_failed_step_shows_failed_and_names_it(new_page, api, shots):
    space = api.space("Releases", "🚀")
    deploy = api.task(space, "Deploy", source="deploy.sh")
    steps = {
        title: api.task(space, title, parent_uuid=deploy)
        for title in ("Build image", "Run migrations", "Switch traffic")
    }
    api.report(steps["Build image"], done=True)
    share = api.client.post(f"/spaces/{space}/shares", json={}).json()["url"]
    page = new_page()
    page.goto(f"/spaces/{space}")
    viewer = new_page()
    viewer.goto(share)
    card = task_card(page, "Deploy")
    expect(card.locator(".steps-summary")).to_have_text("1 of 3 steps done")

    api.report(
        steps["Run migrations"],
        values={"exit_code": 3, "error": "exit code 3", "log": "no such table"},
        done=True,
    )
    expect(card.locator(".steps-summary")).to_have_text("2 of 3 steps done, 1 failed")
    migrations = step_card(page, "Run migrations")
    expect(migrations.locator(".badge")).to_have_text("Failed")
    expect(migrations.locator(".task-error")).to_have_text("exit code 3")
    expect(migrations.locator(".task-values dt")).to_have_text(["exit_code"])  # error shown once
    expect(card.locator(".task-head .badge").first).to_have_text("Running")  # not finished
    expect(page).to_have_title("(66%) Releases")

    api.report(steps["Switch traffic"], done=True)  # the last step finishes Deploy
    summary = "1 of 3 steps failed (Run migrations: exit code 3)"
    for shown in (page, viewer):
        card = task_card(shown, "Deploy")
        expect(card.locator(".badge").first).to_have_text("Failed")
        expect(card.locator(".task-error").first).to_have_text(summary)
        expect(step_card(shown, "Switch traffic").locator(".badge")).to_have_text("Finished")
        expect(shown).to_have_title("✗ 1 failed · Releases")
    expect(page.locator("#announcer p").last).to_have_text(f"Deploy failed: {summary}.")
    passed_fill = step_card(page, "Build image").locator(".bar-fill")
    assert passed_fill.evaluate("fill => getComputedStyle(fill).backgroundColor") != DANGER
    page.screenshot(path=shots / "failed-parent.png", full_page=True)
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=shots / "failed-parent-dark.png", full_page=True)

    read = api.client.get(f"/tasks/{deploy}").json()  # the JSON is unchanged: no new member
    assert set(read) == {
        "uuid", "space_uuid", "parent_uuid", "title", "source", "created_at", "finished_at",
        "duration", "progress", "children",
    }  # fmt: skip
    failure = failure_of(read)
    assert failure is not None and failure.message == summary


def test_a_collapsed_family_still_shows_its_failed_steps(new_page, api):
    space = api.space("Thumbnails")
    parent = api.task(space, "Render")
    steps = [api.task(space, f"Image {n}", parent_uuid=parent) for n in range(12)]
    api.report(steps[4], values={"error": "corrupt JPEG"}, done=True)
    api.report(steps[5], current=1, end=2)
    page = new_page()
    page.goto(f"/spaces/{space}")
    card = task_card(page, "Render")
    expect(card.locator(".steps-summary")).to_have_text("1 of 12 steps done, 1 failed, 1 running")
    expect(card.locator("li.step .task-title")).to_have_text(["Image 4", "Image 5"])
    expect(step_card(page, "Image 4").locator(".task-error")).to_have_text("corrupt JPEG")


def test_a_failed_task_shows_how_far_it_got_in_the_failed_colour(new_page, api):
    space = api.space("Imports")
    api.report(api.task(space, "Copied"), current=10, end=10)
    api.report(api.task(space, "Broke"), current=4, end=10, values={"error": "bad row"}, done=True)
    page = new_page()
    page.goto(f"/spaces/{space}")
    broke, copied = task_card(page, "Broke"), task_card(page, "Copied")
    expect(broke.locator(".badge")).to_have_text("Failed")
    expect(bar(broke, "Broke")).to_have_attribute("aria-valuenow", "40")
    expect(bar(broke, "Broke")).to_have_attribute("aria-valuetext", "40%, 4 of 10")
    expect(bar(copied, "Copied")).to_have_attribute("aria-valuenow", "100")

    def filled(card: Locator) -> float:
        page.wait_for_timeout(400)  # the width's transition
        return card.locator(".bar").evaluate(
            "bar => bar.firstElementChild.getBoundingClientRect().width"
            " / bar.getBoundingClientRect().width"
        )

    assert filled(broke) == pytest.approx(0.4, abs=0.01)
    assert filled(copied) == pytest.approx(1)
    fill = broke.locator(".bar-fill").evaluate("fill => getComputedStyle(fill).backgroundColor")
    assert fill == DANGER


FAILURE_CASES = [
    {"finished_at": None, "progress": {"values": {"error": "x"}}, "children": []},
    {"finished_at": "t", "progress": {"values": {"error": "x"}}, "children": []},
    {"finished_at": "t", "progress": {"values": {"error": ""}}, "children": []},
    {"finished_at": "t", "progress": {"values": {"error": 3}}, "children": []},
    {"finished_at": "t", "progress": {"values": {"error": True}}, "children": []},
    {"finished_at": "t", "progress": None, "children": []},
    {
        "finished_at": "t",
        "progress": {"values": {"error": "exit code 1"}},
        "children": [
            {"title": None, "finished_at": "t", "progress": {"values": {"error": "boom"}}},
            {"title": "Busy", "finished_at": None, "progress": {"values": {"error": "retry"}}},
        ],
    },
    {
        "finished_at": "t",
        "progress": {"values": {}},
        "children": [
            {"title": f"Step {n}", "finished_at": "t", "progress": {"values": {"error": f"e{n}"}}}
            for n in range(5)
        ]
        + [{"title": "Ok", "finished_at": "t", "progress": None}],
    },
]


def test_the_pages_judge_failure_as_the_server_does(new_page):
    page = new_page()
    page.goto("/")
    cases = [
        {**case, "children": [{**child, "created_at": f"{n:04}"} for n, child in enumerate(kids)]}
        for case in FAILURE_CASES
        for kids in [case["children"]]
    ]
    judged = page.evaluate(
        """async (cases) => {
          const { failureOf } = await import("/static/tasks.js");
          return cases.map((task) => failureOf(task, task.children)?.message ?? null);
        }""",
        cases,
    )
    expected = [getattr(failure_of(case), "message", None) for case in cases]
    assert judged == expected
    assert expected[:6] == [None, "x", None, None, None, None]


# Safety, layout, access


def test_user_text_renders_as_text_never_as_markup(new_page, api):
    space = api.space(XSS, "<")
    task = api.task(space, XSS, source=XSS)
    api.report(task, current=1, end=2, values={"log": XSS, XSS: XSS})
    page = new_page()
    page.goto(f"/spaces/{space}")
    card = task_card(page, XSS)
    expect(card.locator(".task-log")).to_have_text(XSS)
    expect(card.locator(".task-source")).to_have_text(f"from {XSS}")
    expect(card.locator(".task-values dt")).to_have_text(XSS)
    expect(card.locator(".task-values dd")).to_have_text(XSS)
    expect(page.locator("#space-title")).to_have_text(XSS)
    expect(page.locator("#space-icon")).to_have_text("<")
    expect(page).to_have_title(f"(50%) {XSS}")
    assert page.locator("main img").count() == 0
    assert page.evaluate("document.querySelector('link[rel=icon]').href").startswith(
        "data:image/svg+xml,"
    )


RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: what follows it reads right to left, unless isolated

# Every text node that holds `marker` (the announcer aside: it is read aloud, not shown)
# must sit in an element that isolates it (`unicode-bidi: isolate`, as `dir="auto"` and
# <bdi> give) and holds nothing else: the reporter's text alone, not the page's words.
UNISOLATED = """(marker) => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const wrong = [];
  for (let node = walker.nextNode(); node != null; node = walker.nextNode()) {
    if (!node.data.includes(marker) || node.parentElement.closest("#announcer")) continue;
    let box = node.parentElement;
    while (box != null && !["isolate", "plaintext"].includes(getComputedStyle(box).unicodeBidi)) {
      box = box.parentElement;
    }
    if (box == null || box.textContent !== node.data) {
      wrong.push(`${node.parentElement.className || node.parentElement.tagName}: ${node.data}`);
    }
  }
  return wrong;
}"""

# Where the words `words` are drawn in `selector`'s text: each one's line (its top) and
# left edge.
WORD_EDGES = """([selector, words]) => {
  const node = document.querySelector(selector);
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  const edges = [];
  for (let text = walker.nextNode(); text != null; text = walker.nextNode()) {
    for (const word of words) {
      const at = text.data.indexOf(word);
      if (at < 0) continue;
      const range = document.createRange();
      range.setStart(text, at);
      range.setEnd(text, at + word.length);
      const box = range.getBoundingClientRect();
      edges.push([word, Math.round(box.top), box.left]);
    }
  }
  return edges;
}"""


def test_a_bidi_override_in_reporters_text_never_reorders_the_pages_words(new_page, api):
    def odd(name: str) -> str:
        return f"{name} {RLO}deliaf 3 of 4"

    space = api.space(odd("space"), "⇄")
    parent = api.task(space, odd("parent"), source=odd("source"))
    api.report(parent, values={"log": odd("log"), odd("key"): odd("value")})
    api.task(space, odd("waiting step"), parent_uuid=parent)
    api.task(space, odd("other step"), parent_uuid=parent)
    share = api.client.post(f"/spaces/{space}/shares", json={}).json()["url"]
    page = new_page()
    page.goto(f"/spaces/{space}")
    viewer = new_page()
    viewer.goto(share)
    embed = new_page()
    embed.goto(f"{share}/embed")
    # Then, live from the stream: a failed step, named in its parent's failure.
    failing = api.task(space, odd("failing step"), parent_uuid=parent)
    api.report(failing, values={"error": odd("error"), "log": odd("step log")}, done=True)
    values = {"error": odd("own error"), "log": odd("log"), odd("key"): odd("value")}
    api.report(parent, values=values, done=True)
    for shown in (page, viewer, embed):
        expect(shown.locator(".task-error").first).to_contain_text("failing step")
        expect(shown.locator(".task-values dd").first).to_have_text(odd("value"))
        assert shown.evaluate(UNISOLATED, RLO) == [], shown.url
    assert page.get_by_text(odd("failing step"), exact=True).count() > 0

    card = page.locator("#tasks > li").first
    card.get_by_role("button", name=f"Delete {odd('parent')}", exact=True).click()
    question = card.locator(":scope > .task-confirm .task-question")
    expect(question).to_have_text(
        f"Delete “{odd('parent')}” and its 3 steps? This cannot be undone."
    )
    words = ["and", "its", "steps", "This", "cannot", "undone"]
    edges = page.evaluate(WORD_EDGES, [".task-confirm:not([hidden]) .task-question", words])
    # Read line by line, left to right, the page's words come in their order.
    assert [word for word, *_ in sorted(edges, key=lambda edge: edge[1:])] == words


def test_a_phone_never_scrolls_sideways(new_page, api, shots):
    long_word = "x" * 200
    space = api.space(long_word, "📱")
    task = api.task(space, long_word, source="s" * 200)
    values = {"log": "y" * 1024, "k" * 64: "v" * 1024, "host": "db-1"}
    api.report(task, current=123456789, end=987654321, values=values)
    parent = api.task(space, "Family")
    api.task(space, "z" * 200, parent_uuid=parent)
    page = new_page(viewport=PHONE)
    page.goto(f"/spaces/{space}")
    expect(task_card(page, long_word).locator(".task-log")).to_be_visible()
    page.get_by_role("button", name="Create a read-only link").click()
    expect(page.get_by_role("textbox", name="Read-only link")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=shots / "phone-dashboard.png", full_page=True)

    page.goto(page.get_by_role("textbox", name="Read-only link").input_value())
    expect(task_card(page, long_word)).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.goto("/")
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=shots / "phone-home.png", full_page=True)


# Where each task's parts sit: for every card (steps too), its head's box, its title's,
# badge's and Delete's, and for each shown item of its facts line whether it starts a
# line and how far its own text starts after its box (what a separator before it takes).
ROW_LAYOUT = """() => [...document.querySelectorAll("li.task")].map((card) => {
  const box = (node) => node.getBoundingClientRect().toJSON();
  const head = card.querySelector(":scope > .task-head");
  const facts = card.querySelector(":scope > .task-facts");
  const left = facts.getBoundingClientRect().left;
  const items = [...facts.children].filter((item) => item.textContent !== "");
  return {
    title: card.querySelector(".task-title").textContent,
    head: box(head),
    name: box(head.querySelector(".task-title")),
    badge: box(head.querySelector(".badge")),
    remove: head.querySelector(".task-delete") && box(head.querySelector(".task-delete")),
    facts: items.map((item, index) => {
      const text = document.createRange();
      text.selectNodeContents(item);
      const start = item.getClientRects()[0].left;
      return { index, startsLine: Math.abs(start - left) < 1,
               before: text.getClientRects()[0].left - start };
    }),
  };
})"""


def test_task_rows_keep_one_layout_at_390_and_1280_px(new_page, api, shots):
    space = api.space("Layout")
    titles = ["Tiny", "A title long enough to wrap on a phone, twice over or more", "w" * 70]
    for title in titles:
        api.report(
            api.task(space, title, source="nightly.sh"),
            current=123456789,
            end=987654321,
            values={"error": "disk full"},
            done=True,
        )
    parent = api.task(space, "Family")
    api.report(api.task(space, "Step with a longer title than most", parent_uuid=parent), current=1)
    api.task(space, "S", parent_uuid=parent)
    share = api.client.post(f"/spaces/{space}/shares", json={}).json()["url"]
    for name, viewport in (("390", PHONE), ("1280", DESKTOP)):
        page = new_page(viewport=viewport)
        page.goto(f"/spaces/{space}")
        expect(page.locator("li.task .task-delete")).to_have_count(6)
        page.wait_for_timeout(400)  # the bars' transitions
        rows = page.evaluate(ROW_LAYOUT)
        for row in rows:
            head, badge, remove = row["head"], row["badge"], row["remove"]
            # Delete ends the head's first line, the badge just before it, on every card.
            assert remove["right"] == pytest.approx(head["right"], abs=1), (name, row)
            assert remove["top"] == pytest.approx(head["top"], abs=1), (name, row)
            assert badge["right"] < remove["left"], (name, row)
            assert badge["top"] < remove["bottom"] and remove["top"] < badge["bottom"], (name, row)
            assert row["name"]["right"] <= badge["left"], (name, row)  # never under them
            for item in row["facts"]:
                # A line of facts never starts with a separator.
                assert not item["startsLine"] or item["before"] < 1, (name, row)
        wrapped = [i for row in rows for i in row["facts"] if i["startsLine"] and i["index"] > 0]
        assert wrapped or name == "1280", "the phone's facts lines should wrap here"
        page.screenshot(path=shots / f"rows-{name}.png", full_page=True)

        viewer = new_page(viewport=viewport)
        viewer.goto(share)
        expect(task_card(viewer, "Tiny")).to_be_visible()
        layout = page.locator(".layout").bounding_box()
        tasks = viewer.locator("#tasks").bounding_box()
        assert layout is not None and tasks is not None
        # The share page's tasks take the whole width the dashboard lays out.
        assert tasks["width"] == pytest.approx(layout["width"], abs=1), name
        assert viewer.evaluate(ROW_LAYOUT)[0]["facts"]
        viewer.screenshot(path=shots / f"share-{name}.png", full_page=True)


# Deleting and retention

# Records the connection indicator's every text, to tell a quiet reconnection from one
# that flashed "Reconnecting…".
RECORD_STATUSES = """(() => {
  const node = document.getElementById("connection");
  window.__statuses = [node.textContent];
  new MutationObserver(() => window.__statuses.push(node.textContent)).observe(node, {
    childList: true, characterData: true, subtree: true,
  });
})()"""


def requests_to(page: Page, *parts: str) -> list[str]:
    """The URLs `page` asks for from now on that hold one of `parts` (each request as the
    page makes it, its stream's reconnections included)."""
    seen: list[str] = []

    def note(url: str) -> None:
        if any(part in url for part in parts):
            seen.append(url)

    page.on("request", lambda request: note(request.url))
    return seen


def settle(page: Page) -> None:
    """A round trip to `page`, after which the events it sent before have arrived (the sync
    API hears a page's events only while it is called)."""
    page.evaluate("0")


def until(page: Page, check: Callable[[], bool]) -> None:
    """Waits until `check()` holds, hearing `page`'s events meanwhile."""
    wait_for(lambda: settle(page) or check())


def confirmation(card: Locator) -> Locator:
    """The question a task's Delete asks, inside `card` (and not its steps')."""
    return card.locator(":scope > .task-confirm")


def test_the_owner_deletes_a_step_and_a_task_once_confirmed(new_page, api, watch, shots):
    space = api.space("Releases")
    api.task(space, "Backup")
    deploy = api.task(space, "Deploy")
    steps = {
        title: api.task(space, title, parent_uuid=deploy)
        for title in ("Build", "Run migrations", "Push image")
    }
    api.report(steps["Build"], done=True)
    cleanup = api.task(space, "Cleanup")
    page = new_page()
    streams = requests_to(page, "/events")
    page.goto(f"/spaces/{space}")
    expect(page.locator("#connection")).to_have_text("Live")
    page.evaluate(RECORD_STATUSES)
    card = task_card(page, "Deploy")
    expect(card.locator(".steps-summary")).to_have_text("1 of 3 steps done")

    # Asked, then cancelled: by the button, and by Escape. Nothing is sent.
    page.get_by_role("button", name="Delete Backup", exact=True).click()
    backup = task_card(page, "Backup")
    expect(confirmation(backup)).to_be_visible()
    expect(confirmation(backup).locator(".task-question")).to_have_text(
        "Delete “Backup”? This cannot be undone."
    )
    expect(confirmation(backup).get_by_role("button", name="Cancel")).to_be_focused()
    confirmation(backup).get_by_role("button", name="Cancel").click()
    expect(confirmation(backup)).to_be_hidden()
    expect(page.get_by_role("button", name="Delete Backup", exact=True)).to_be_focused()
    page.get_by_role("button", name="Delete Deploy", exact=True).click()
    expect(confirmation(card).locator(".task-question")).to_have_text(
        "Delete “Deploy” and its 3 steps? This cannot be undone."
    )
    page.screenshot(path=shots / "delete-task-question.png", full_page=True)
    page.keyboard.press("Escape")
    expect(confirmation(card)).to_be_hidden()
    assert api.client.get(f"/spaces/{space}").json()["tasks"][1]["title"] == "Deploy"

    # A step: its parent counts what is left.
    step = step_card(page, "Run migrations")
    step.get_by_role("button", name="Delete Run migrations", exact=True).click()
    expect(step.locator(".task-question")).to_have_text(
        "Delete the step “Run migrations” of “Deploy”? This cannot be undone."
    )
    step.get_by_role("button", name="Delete step", exact=True).click()
    expect(step).to_have_count(0)
    expect(card.locator(".steps-summary")).to_have_text("1 of 2 steps done")
    expect(bar(card, "Deploy")).to_have_attribute("aria-valuenow", "50")
    expect(card.locator("li.step .task-title")).to_have_text(["Build", "Push image"])
    assert api.client.get(f"/tasks/{steps['Run migrations']}").status_code == 404
    assert len(api.client.get(f"/tasks/{deploy}").json()["children"]) == 2

    # A top-level task with its steps; focus goes to the task that took its place.
    until(page, lambda: len(streams) >= 2)  # the step's delete started the stream again
    expect(page.locator("#connection")).to_have_text("Live")
    page.get_by_role("button", name="Delete Deploy", exact=True).click()
    expect(confirmation(card).locator(".task-question")).to_have_text(
        "Delete “Deploy” and its 2 steps? This cannot be undone."
    )
    confirmation(card).get_by_role("button", name="Delete task", exact=True).click()
    expect(card).to_have_count(0)
    expect(page.locator("#tasks > li h3")).to_have_text(["Cleanup", "Backup"])
    expect(page.locator("li.step")).to_have_count(0)
    expect(page.locator("#tasks > li h3", has_text="Backup")).to_be_focused()
    expect(page.get_by_role("button", name="All 2")).to_be_visible()
    for uuid in (deploy, *steps.values()):
        assert api.client.get(f"/tasks/{uuid}").status_code == 404

    # The stream ended and started again (a resync): no duplicate, no error, no flash,
    # and it is live (a report shows).
    until(page, lambda: len(streams) >= 3)
    expect(page.locator("#connection")).to_have_text("Live")
    api.report(cleanup, current=2, end=4)
    expect(bar(task_card(page, "Cleanup"), "Cleanup")).to_have_attribute("aria-valuenow", "50")
    expect(page.locator("#tasks > li h3")).to_have_text(["Cleanup", "Backup"])
    expect(page.locator("#tasks > li h3", has_text="Backup")).to_be_focused()  # kept
    expect(page.locator("#gone")).to_be_hidden()
    assert "Reconnecting…" not in page.evaluate("window.__statuses")


def test_the_owner_deletes_the_space_once_its_title_is_typed(new_page, api, watch, shots):
    space = api.space("Nightly builds", "🌙")
    api.task(space, "Compile")
    watch.expect_error(r"404|MIME type")  # the other page's stream and check are refused
    pages = []
    for _ in range(2):  # the page that deletes, and another page of the space
        page = new_page()
        page.clock.install()
        asked = requests_to(page, space)
        responses: list[Response] = []
        page.on("response", lambda response, seen=responses: seen.append(response))
        page.goto(f"/spaces/{space}")
        expect(page.locator("#connection")).to_have_text("Live")
        expect(page.locator("#channel-none")).to_be_visible()
        pages.append((page, asked, responses))
    (owner, owner_asked, _), (other, other_asked, other_responses) = pages

    panel = owner.get_by_role("region", name="Delete this space")
    opener = panel.get_by_role("button", name="Delete this space…")
    field = panel.get_by_role("textbox", name="To confirm, type Nightly builds")
    expect(field).to_be_hidden()
    opener.click()
    expect(opener).to_have_attribute("aria-expanded", "true")
    expect(field).to_be_focused()
    field.fill("nightly builds")
    panel.get_by_role("button", name="Delete this space for good").click()
    expect(panel.get_by_role("alert")).to_have_text("Type “Nightly builds” exactly to confirm.")
    expect(field).to_have_attribute("aria-invalid", "true")
    panel.get_by_role("button", name="Cancel").click()
    expect(field).to_be_hidden()
    expect(opener).to_be_focused()
    assert api.client.get(f"/spaces/{space}").status_code == 200

    opener.click()
    expect(field).to_have_value("")
    field.fill(" Nightly builds ")
    owner.screenshot(path=shots / "delete-space-question.png", full_page=True)
    field.press("Enter")

    gone = owner.get_by_role("alert").filter(has_text="This space was deleted.")
    expect(gone).to_be_visible()
    expect(gone).to_be_focused()
    expect(owner.get_by_role("link", name="Create a new space")).to_be_visible()
    expect(owner.locator("aside.side")).to_be_hidden()
    expect(owner.locator(".toolbar")).to_be_hidden()
    expect(owner.locator("#retention")).to_be_hidden()
    expect(owner.locator("#tasks > li")).to_have_count(0)
    expect(owner).to_have_title("Deleted · Nightly builds")
    owner.screenshot(path=shots / "space-deleted.png", full_page=True)
    assert api.client.get(f"/spaces/{space}").status_code == 404

    # The other page: its stream ended, its reconnection got a 404, and it says so.
    expect(other.get_by_role("alert")).to_contain_text("This space was deleted.")
    expect(other.locator("#connection")).to_be_hidden()
    settle(other)
    statuses = [r.status for r in other_responses if "/events" in r.url]
    assert statuses[-1] == 404, statuses
    # Then neither page asks anything more of the space: no stream, no check, no
    # channels, however long it stays open.
    settle(owner)
    before = list(owner_asked), list(other_asked)
    for page, _, _ in pages:
        page.clock.run_for(10 * 60_000)
        settle(page)
    assert (list(owner_asked), list(other_asked)) == before


def test_an_untitled_space_is_deleted_by_typing_delete(new_page, api):
    space = api.space()
    page = new_page()
    page.goto(f"/spaces/{space}")
    page.get_by_role("button", name="Delete this space…").click()
    field = page.get_by_role("textbox", name="To confirm, type delete")
    field.fill("Untitled space")
    field.press("Enter")
    expect(page.locator("#space-delete-error")).to_have_text("Type delete to confirm.")
    field.fill("DELETE")
    field.press("Enter")
    expect(page.get_by_role("alert").filter(has_text="This space was deleted.")).to_be_visible()
    assert api.client.get(f"/spaces/{space}").status_code == 404


def test_a_share_page_deletes_nothing_and_says_when_its_link_no_longer_works(new_page, api, watch):
    space = api.space("Shared releases")
    parent = api.task(space, "Deploy")
    api.task(space, "Build", parent_uuid=parent)
    share = api.client.post(f"/spaces/{space}/shares", json={}).json()["url"]
    watch.expect_error(r"404|MIME type")  # the stream and check refused once it is gone
    viewer = new_page()
    viewer.clock.install()
    asked = requests_to(viewer, "/shared/")
    methods: list[str] = []
    viewer.on("request", lambda request: methods.append(request.method))
    viewer.goto(share)
    expect(viewer.locator("#connection")).to_have_text("Live")
    expect(step_card(viewer, "Build")).to_be_visible()
    expect(viewer.get_by_role("button", name=re.compile("delete", re.IGNORECASE))).to_have_count(0)
    expect(viewer.locator(".task-delete, .task-confirm, #space-delete-form")).to_have_count(0)
    expect(viewer.locator("#retention")).to_have_count(0)

    assert api.client.delete(f"/spaces/{space}").status_code == 204
    expect(viewer.get_by_role("alert")).to_have_text(
        "This link no longer works. It was revoked, or the space it showed was deleted."
    )
    expect(viewer.locator("#tasks > li")).to_have_count(0)
    expect(viewer).to_have_title("Link no longer works · Shared releases")
    settle(viewer)
    before = list(asked)
    viewer.clock.run_for(10 * 60_000)
    settle(viewer)
    assert list(asked) == before, "the page kept asking after the link stopped working"
    assert set(methods) == {"GET"}

    response = viewer.goto(share)
    assert response is not None and response.status == 404
    expect(viewer.get_by_role("heading", level=1)).to_have_text("This link no longer works")
    expect(viewer).to_have_title("This link no longer works · Headway")


def test_the_owner_page_says_how_long_an_idle_space_is_kept(new_page, api, browser, tmp_path):
    space = api.space("Kept")
    page = new_page()
    page.goto(f"/spaces/{space}")
    expect(page.locator("#retention")).to_have_text(
        "Spaces with no activity for 90 days are deleted; opening this page counts as activity."
    )
    from headway.app import create_app

    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'kept.db'}", rate_limits=False, run_worker=False
    ).with_(space_retention=None)
    with serving(settings, create_app(settings)) as (host, port):
        base = f"http://{host}:{port}"
        kept = httpx.post(f"{base}/spaces", json={"title": "Forever"}).json()["uuid"]
        context = browser.new_context(base_url=base, viewport=DESKTOP)
        try:
            forever = context.new_page()
            forever.goto(f"/spaces/{kept}")
            expect(forever.locator("#connection")).to_have_text("Live")
            expect(forever.locator("#retention")).to_have_count(0)
            expect(forever.get_by_text("no activity")).to_have_count(0)
        finally:
            context.close()


def test_a_retention_period_is_said_in_its_largest_whole_unit():
    assert period_words(90 * 86_400) == "90 days"
    assert period_words(86_400) == "1 day"
    assert period_words(14 * 86_400) == "14 days"
    assert period_words(36 * 3600) == "36 hours"
    assert period_words(3600) == "1 hour"
    assert period_words(5400) == "90 minutes"
    assert period_words(3601) == "3,601 seconds"


def test_keyboard_reaches_the_filter_and_every_button(new_page, api):
    space = api.space("Keyboard")
    parent = api.task(space, "Parent")
    api.task(space, "Child", parent_uuid=parent)
    page = new_page()
    page.goto(f"/spaces/{space}")
    expect(task_card(page, "Parent")).to_be_visible()
    focused = "document.activeElement.textContent.trim()"
    reached = []
    while "Create a read-only link" not in reached and len(reached) < 30:
        page.keyboard.press("Tab")
        reached.append(page.evaluate(focused))
    for name in ("Notify me", "Active 1", "Finished 0", "All 1", "Hide steps", "Copy", "OpenAPI"):
        assert name in reached, f"{name!r} is not reachable with Tab: {reached}"
    for _ in range(30):
        if page.evaluate(focused) == "Finished 0":
            break
        page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Finished 0")).to_have_attribute("aria-pressed", "true")
    expect(page.locator("#empty")).to_have_text("No finished tasks.")


# Home page


def test_the_home_page_creates_a_space_and_lands_on_its_dashboard(new_page, server, watch):
    page = new_page()
    response = page.goto("/")
    assert response is not None
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["referrer-policy"] == "no-referrer"
    watch.expect_error(r"status of 422")  # the refused icon, shown on the page below
    page.get_by_role("textbox", name="Icon", exact=True).fill("ab")
    page.get_by_role("button", name="Create space").click()
    expect(page.get_by_role("alert")).to_contain_text("icon")

    page.get_by_role("textbox", name="Title", exact=True).fill("Nightly builds")
    page.get_by_role("button", name="Rocket").click()
    page.get_by_role("button", name="Create space").click()
    page.wait_for_url(re.compile(r"/spaces/[0-9a-f-]{36}$"))
    space = page.url.rsplit("/", 1)[1]
    expect(page.get_by_role("heading", level=1)).to_have_text("🚀Nightly builds")
    expect(page.locator("#snippet-curl")).to_contain_text(f"{server.url}/spaces/{space}/tasks")
    expect(page.locator("#snippet-cli")).to_contain_text(f"HEADWAY_SPACE={space}")
    install = f'pip install "$(curl -fsS {server.url}/client)"'
    expect(page.locator("#snippet-cli")).to_contain_text(install)
    expect(page.get_by_text("This page's address is the key to this space")).to_be_visible()
    assert page.evaluate("document.querySelector('link[rel=icon]').href").startswith("data:")


def test_the_snippets_report_to_the_space_as_pasted(new_page, api, server):
    space = api.space("Snippets")
    page = new_page()
    page.goto(f"/spaces/{space}")
    snippet = {
        name: page.locator(f"#snippet-{name}").inner_text() for name in ("curl", "url", "python")
    }
    shell = subprocess.run(
        ["bash", "-c", f"set -e\n{snippet['curl']}\n{snippet['url']}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shell.returncode == 0, shell.stderr
    script = snippet["python"].replace("time.sleep(1)", "time.sleep(0)")
    python = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert python.returncode == 0, python.stderr
    titles = page.locator("#tasks > li h3")
    expect(titles).to_have_text(["backup", "backup"])
    logs = page.locator("#tasks > li .task-log")
    expect(logs).to_have_text(["copied events.csv", "copying"])
    expect(page.locator("#tasks > li .badge")).to_have_text(["Finished", "Finished"])


# Plain HTTP: negotiation, headers, files


def test_browsers_get_pages_and_other_clients_get_json(api):
    space = api.space("Negotiated")
    html = {"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    for path in ("/", f"/spaces/{space}"):
        page = api.client.get(path, headers=html)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "accept" in page.headers["vary"].lower()
        data = api.client.get(path)
        assert data.headers["content-type"].startswith("application/json")
        assert "accept" in data.headers["vary"].lower()
    assert api.client.get("/").json()["links"]["openapi"] == "/openapi.json"
    assert api.client.get(f"/spaces/{space}").json()["title"] == "Negotiated"
    missing = "00000000-0000-4000-8000-000000000000"
    for path in (f"/spaces/{missing}", f"/shared/{missing}"):
        page = api.client.get(path, headers=html)
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert api.client.get(path).json()["error"]


def test_static_files_are_served_and_shipped_with_the_package(api):
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["headway"]
    files = [*(WEB / "static").iterdir(), *(WEB / "templates").iterdir()]
    for path in files:
        relative = path.relative_to(ROOT / "headway").as_posix()
        assert any(
            fnmatch.fnmatch(relative, p) and "/" not in relative[len(p) - 1 :] for p in patterns
        ), relative
    kinds = {".css": "text/css", ".js": "javascript", ".svg": "image/svg+xml"}
    for path in (WEB / "static").iterdir():
        response = api.client.get(f"/static/{path.name}")
        assert response.status_code == 200, path.name
        assert kinds[path.suffix] in response.headers["content-type"]
        assert response.headers["cache-control"] == "no-cache"


def test_scripts_and_templates_never_turn_text_into_markup():
    markup = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function"
    )
    for script in (WEB / "static").glob("*.js"):
        assert not markup.search(script.read_text()), script.name
    for template in (WEB / "templates").glob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), f"inline script in {template.name}"
        assert not re.search(r"\sstyle=|\son[a-z]+=|<style", text), (
            f"inline style or handler in {template.name}"
        )
        assert "|safe" not in text and "autoescape false" not in text, template.name


def test_the_palette_passes_wcag_aa_in_light_and_dark():
    css = (WEB / "static" / "headway.css").read_text()
    light = dict(
        re.findall(
            r"(--[\w-]+):\s*(#[0-9a-f]{6})", css.split("@media (prefers-color-scheme: dark)")[0]
        )
    )
    dark = {
        **light,
        **dict(
            re.findall(
                r"(--[\w-]+):\s*(#[0-9a-f]{6})",
                css.split("@media (prefers-color-scheme: dark)")[1].split("\n}\n")[0],
            )
        ),
    }
    text_pairs = [
        (fg, bg)
        for fg in ("--text", "--muted", "--accent", "--ok", "--danger")
        for bg in ("--bg", "--surface", "--code")
    ] + [
        ("--danger", "--danger-bg"),
        ("--text", "--danger-bg"),
        ("--warn", "--bg"),
        ("--warn", "--surface"),
        ("--warn", "--warn-bg"),
        ("--text", "--warn-bg"),
        ("--on-accent", "--accent"),
        ("--on-danger", "--danger"),
    ]
    for name, palette in (("light", light), ("dark", dark)):
        for fg, bg in text_pairs:
            ratio = contrast(palette[fg], palette[bg])
            assert ratio >= 4.5, f"{name}: {fg} on {bg} is {ratio:.2f}:1"
        for fg in ("--accent", "--ok", "--danger"):  # a bar's fill against its track
            assert contrast(palette[fg], palette["--track"]) >= 3, f"{name}: {fg} on --track"


def contrast(first: str, second: str) -> float:
    """The WCAG contrast ratio of two #rrggbb colours."""

    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(first), luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_a_step_made_after_the_first_finished_shows_as_its_event_arrives(new_page, api):
    """Steps made one after another, as the Python client makes them: the page shows the
    second as soon as the stream brings it, without a reload and without reading the
    space again (the stream's event is all it needs)."""
    space = api.space("Releases")
    parent = api.task(space, "Publish release")
    api.report(parent, values={})  # its reporter holds it open
    first = api.task(space, "Build", parent_uuid=parent)
    api.report(first, current=1, end=1)
    page = new_page()
    page.goto(f"/spaces/{space}")
    card = task_card(page, "Publish release")
    expect(card.locator(".steps-summary")).to_have_text("1 of 1 step done")
    page.evaluate(
        """() => {
          window.__reads = 0;
          const fetched = window.fetch;
          window.fetch = (...args) => { window.__reads += 1; return fetched(...args); };
        }"""
    )
    api.task(space, "Publish", parent_uuid=parent)
    # Generous: a busy machine may take its time, but no refetch or reload is needed.
    expect(step_card(page, "Publish")).to_be_visible(timeout=15_000)
    expect(card.locator(".steps-summary")).to_have_text("1 of 2 steps done")
    assert page.evaluate("window.__reads") == 0


def test_a_step_whose_event_comes_before_its_new_parents_is_shown_with_it(new_page, api, watch):
    """A new parent and its first step, made within one round of the stream: the step's
    event comes first ("a child's event is followed by its parent's"), when the page does
    not know the parent yet. The step is shown with its parent as the parent's event
    arrives, not only at the step's next event, seconds later. The stream is the server's
    own words for those tasks, replayed in that order."""
    space = api.space("Releases")
    snapshot = api.client.get(f"/spaces/{space}").json()
    parent = api.task(space, "Publish release")
    api.report(parent, values={})
    step = api.task(space, "Build", parent_uuid=parent)
    events = [
        ("snapshot", snapshot),
        ("task", {**api.client.get(f"/tasks/{step}").json(), "children": []}),
        ("task", {**api.client.get(f"/tasks/{parent}").json(), "children": []}),
    ]
    body = "".join(
        f"event: {name}\nid: {n}\ndata: {json.dumps(data)}\n\n"
        for n, (name, data) in enumerate(events)
    )
    served = []

    def stream(route):
        if served:  # once: the page's reconnections find the server gone
            route.abort()
            return
        served.append(route.request.url)
        route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=body)

    watch.expect_error(r"net::ERR_FAILED .*/events\?")  # the reconnections refused
    page = new_page()
    page.route(re.compile(r".*/events\?.*"), stream)
    page.goto(f"/spaces/{space}")
    card = task_card(page, "Publish release")
    expect(card).to_be_visible()
    expect(step_card(page, "Build")).to_be_visible()
    expect(card.locator(".steps-summary")).to_have_text("0 of 1 step done")
    assert len(served) == 1
