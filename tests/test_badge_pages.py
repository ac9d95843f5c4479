"""Badges and the embed in a real browser (Debian's chromium, through Playwright) against a
real `headway serve`: every badge drawn as an image and its text as wide as the width
table says, the README's badge, the embed live inside an <iframe> of a page on another
origin (which may not frame the owner's dashboard), its themes and transparent
background, and the share panel's snippets."""

from __future__ import annotations

import http.server
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from . import docs, test_pages
from .browser import Watch
from .live_server import LiveServer
from .servers import free_port
from .test_pages import ROOT, WEB, Api

# The page tests' fixtures: one chromium per module, screenshots, the API, pages watched.
browser = test_pages.browser
shots = test_pages.shots
api = test_pages.api
watch = test_pages.watch
new_page = test_pages.new_page

README_BADGE = ROOT / "docs" / "badge.svg"


def share_of(api: Api, space: str) -> str:
    response = api.client.post(f"/spaces/{space}/shares", json={})
    assert response.status_code == 201, response.text
    return response.json()["uuid"]


def ids_of(api: Api, share: str) -> dict[str, str]:
    found: dict[str, str] = {}

    def walk(tasks: list[dict]) -> None:
        for task in tasks:
            found[task["title"]] = task["id"]
            walk(task["children"])

    walk(api.client.get(f"/shared/{share}").json()["tasks"])
    return found


def readme_space(api: Api) -> tuple[str, str]:
    """The space the README's badge shows, with a share link: (space, share)."""
    space = api.space("Nightly builds", "🌙")
    suite = api.task(space, "Run test suite", source="ci/test.sh")
    api.report(suite, current=1482, end=1482)
    backup = api.task(space, "Back up database", source="backup.sh")
    api.report(backup, current=620, end=1000, values={"log": "copying table orders"})
    deploy = api.task(space, "Deploy web", source="deploy.sh")
    steps = [api.task(space, title, parent_uuid=deploy) for title in ("Build", "Push", "Migrate")]
    api.report(steps[0], done=True)
    api.report(steps[1], current=2, end=6, values={"log": "pushing layer 2 of 6"})
    return space, share_of(api, space)


def test_chromium_draws_every_badge_with_the_widths_of_the_table(
    browser: Browser, api: Api, server: LiveServer, watch: Watch, shots: Path
):
    space, share = readme_space(api)
    waiting = 'Sync <mirrors> & "docs" 🚀'
    api.task(space, waiting)
    failed = api.task(space, "Lint")
    api.report(failed, done=True, values={"error": "exit code 1"})
    ids = ids_of(api, share)
    base = f"/shared/{share}"
    badges = {
        "space": f"{base}/badge.svg",
        "space-bar": f"{base}/badge.svg?bar=1",
        "space-square": f"{base}/badge.svg?style=flat-square&bar=1",
        "space-big": f"{base}/badge.svg?style=for-the-badge",
        "running": f"{base}/tasks/{ids['Back up database']}/badge.svg?bar=1",
        "parent": f"{base}/tasks/{ids['Deploy web']}/badge.svg?bar=1&style=flat-square",
        "done": f"{base}/tasks/{ids['Run test suite']}/badge.svg",
        "failed": f"{base}/tasks/{ids['Lint']}/badge.svg?style=for-the-badge",
        "waiting": f"{base}/tasks/{ids[waiting]}/badge.svg",
        "label": f"{base}/badge.svg?label=",
    }
    context = browser.new_context(base_url=server.url, device_scale_factor=2)
    page = watch.attach(context.new_page())
    try:
        # As a README shows them: images in a page of another origin.
        images = "".join(
            f'<p><img id="{name}" alt="{name}" src="{server.url}{path}"></p>'
            for name, path in badges.items()
        )
        page.set_content(f"<!doctype html><body>{images}</body>")
        for name in badges:
            image = page.locator(f"#{name}")
            expect(image).to_have_js_property("complete", True)
            assert image.evaluate("i => i.naturalWidth") > 20, name
            image.screenshot(path=shots / f"badge-{name}.png")
        # Opened on their own: each text drawn in DejaVu Sans takes about the width the
        # table gave it (its textLength), so nothing is squeezed or spread out.
        for name, path in badges.items():
            page.goto(path)
            widths = page.evaluate(
                """() => [...document.querySelectorAll('text:not([aria-hidden])')].map(t => {
                    const copy = t.cloneNode(true);
                    copy.removeAttribute('textLength');
                    t.parentNode.appendChild(copy);
                    const natural = copy.getComputedTextLength();
                    copy.remove();
                    return [t.textContent, natural, Number(t.getAttribute('textLength'))];
                })"""
            )
            for text, natural, measured in widths:
                if "for-the-badge" in path:
                    continue  # capitals in bold, spaced: measured from the regular table
                assert natural == pytest.approx(measured, rel=0.05, abs=20), (name, text)
        assert watch.unexpected() == []
    finally:
        context.close()

    # The README's badge: its space's, as the server draws it (62% and 1 step of 3).
    _, readme_share = readme_space(api)
    drawn = api.client.get(f"/shared/{readme_share}/badge.svg").content
    assert b">Nightly builds<" in drawn and ">2 running · 47%<".encode() in drawn
    if os.environ.get("HEADWAY_UPDATE_DOCS") == "1":
        README_BADGE.write_bytes(drawn)
    assert README_BADGE.read_bytes() == drawn, "HEADWAY_UPDATE_DOCS=1 redraws docs/badge.svg"
    # Shown in the README and in docs/watching.md, each by its own relative path.
    assert "](docs/badge.svg)" in docs.page("README")
    assert "](badge.svg)" in docs.page("watching")


class _Host(http.server.BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def host_page() -> Iterator[tuple[type[_Host], str]]:
    """A page on another origin (another port of 127.0.0.1): set `page` on the class."""

    class Host(_Host):
        page = b""

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Host)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Host, f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_the_embed_updates_live_in_a_frame_of_another_origin(
    browser: Browser, api: Api, server: LiveServer, watch: Watch, shots: Path, host_page
):
    host, host_url = host_page
    space = api.space("Render farm", "🎞")
    frames = api.task(space, "Render frames", source="farm-1")
    api.report(frames, current=10, end=40, values={"log": "frame 10"})
    share = share_of(api, space)
    embed = f"{server.url}/shared/{share}/embed?limit=5"
    host.page = (
        "<!doctype html><html><head><title>Team status</title></head>"
        "<body style='background:#ffe9a8;font-family:sans-serif'><h1>Team status</h1>"
        f'<iframe name="embed" src="{embed}" width="520" height="260"></iframe>'
        f'<iframe name="owner" src="{server.url}/spaces/{space}" width="300" height="100">'
        "</iframe>"
        f'<iframe name="shared" src="{server.url}/shared/{share}" width="300" height="100">'
        "</iframe></body></html>"
    ).encode()
    watch.expect_error(r"frame-ancestors|Refused to (display|frame)")
    context = browser.new_context(viewport={"width": 1200, "height": 700})
    page = watch.attach(context.new_page())
    try:
        page.goto(host_url)
        frame = page.frame_locator("iframe[name=embed]")
        expect(frame.locator("#connection")).to_have_text("Live")
        card = frame.locator("#tasks > li").filter(has_text="Render frames")
        expect(card.locator(".task-log")).to_have_text("frame 10")
        expect(card.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "25")
        api.report(frames, current=30, end=40, values={"log": "frame 30"})
        expect(card.locator(".task-log")).to_have_text("frame 30")
        expect(card.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "75")
        api.task(space, "Encode video")
        expect(frame.locator("#tasks > li h3")).to_have_text(["Encode video", "Render frames"])
        api.report(frames, done=True, values={"error": "disk full"})
        expect(card.locator(".badge")).to_have_text("Failed")
        expect(card.locator(".task-error")).to_have_text("disk full")
        # The owner's dashboard and the link's own page refuse to be framed.
        for name in ("owner", "shared"):
            refused = page.frame(name=name)
            assert refused is not None
            expect(page.frame_locator(f"iframe[name={name}]").locator("main")).to_have_count(0)
            assert not refused.url.startswith(server.url), refused.url
        page.screenshot(path=shots / "embed-in-a-page.png", full_page=True)
        # Revoked: the frame says so.
        api.client.delete(f"/spaces/{space}/shares/{share}")
        watch.expect_error(r"404")
        expect(frame.get_by_role("alert")).to_have_text(
            "This link no longer works: it was revoked, or the space it showed was deleted.",
            timeout=10_000,
        )
    finally:
        context.close()
    assert watch.dialogs == []


def test_the_embed_follows_its_theme_and_can_be_transparent(new_page, api: Api, shots: Path):
    space = api.space("Overlay")
    task = api.task(space, "Speedrun")
    api.report(task, current=3, end=10, values={"log": "level 3"})
    share = share_of(api, space)
    colour = "getComputedStyle(document.body).color"
    background = "getComputedStyle(document.documentElement).backgroundColor"
    page: Page = new_page()
    for theme, scheme, text in (
        ("light", "dark", "rgb(31, 35, 40)"),  # forced, whatever the system says
        ("dark", "light", "rgb(230, 237, 243)"),
    ):
        page.emulate_media(color_scheme=scheme)
        page.goto(f"/shared/{share}/embed?theme={theme}")
        expect(page.locator("#connection")).to_have_text("Live")
        assert page.evaluate(colour) == text
        page.screenshot(path=shots / f"embed-{theme}.png")
    page.emulate_media(color_scheme="dark")
    page.goto(f"/shared/{share}/embed?theme=auto&transparent=1")
    expect(page.locator("#connection")).to_have_text("Live")
    assert page.evaluate(colour) == "rgb(230, 237, 243)"  # the system's dark
    assert page.evaluate(background) == "rgba(0, 0, 0, 0)"
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgba(0, 0, 0, 0)"
    expect(page.locator("#tasks > li .task-log")).to_have_text("level 3")
    expect(page.locator(".task-values")).to_be_hidden()


def test_the_share_panel_offers_badge_shields_and_iframe_snippets(new_page, api: Api, server):
    space = api.space('Nightly "builds"')
    api.task(space, "Backup")
    page = new_page(permissions=("clipboard-read", "clipboard-write"))
    page.goto(f"/spaces/{space}")
    page.get_by_role("button", name="Create a read-only link").click()
    link = page.get_by_role("textbox", name="Read-only link").input_value()
    page.get_by_text("Badge and embed").click()
    markdown = page.get_by_role("textbox", name="Badge, in Markdown")
    expect(markdown).to_have_value(f'[![Nightly "builds"]({link}/badge.svg)]({link})')
    shields = page.get_by_role("textbox", name="Shields badge address").input_value()
    assert shields == "https://img.shields.io/endpoint?url=" + re.sub(
        r"[:/]", lambda m: "%3A" if m[0] == ":" else "%2F", f"{link}/shields.json"
    )
    frame = page.get_by_role("textbox", name="Live view, to frame in a page").input_value()
    assert frame == (
        f'<iframe src="{link}/embed" title="Nightly &#34;builds&#34;" '
        'width="480" height="320"></iframe>'
    )
    page.get_by_role("button", name="Copy: Badge, in Markdown").click()
    assert page.evaluate("navigator.clipboard.readText()") == markdown.input_value()
    badge = page.get_by_role("img", name="This link's badge")
    expect(badge).to_have_js_property("complete", True)
    assert badge.evaluate("i => i.naturalWidth") > 20


def test_the_embed_palettes_are_the_pages_own():
    def palette(css: str) -> dict[str, str]:
        return dict(re.findall(r"(--[\w-]+):\s*(#[0-9a-f]{6})", css))

    pages = (WEB / "static" / "headway.css").read_text()
    light = palette(pages.split("@media (prefers-color-scheme: dark)")[0])
    dark = palette(pages.split("@media (prefers-color-scheme: dark)")[1].split("\n}\n")[0])
    embed = (WEB / "static" / "embed.css").read_text()
    assert palette(embed.split(':root[data-theme="light"]')[1].split("}")[0]) == light
    assert palette(embed.split(':root[data-theme="dark"]')[1].split("}")[0]) == dark
