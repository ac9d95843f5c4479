"""Badges of a share link, on every backend (over ASGI): an SVG badge of the space and of
each task in every state, valid XML with its text escaped and cut, never a uuid of the
space or its tasks; its options, ETag and cache headers; 404 for a revoked or unknown
link; the Shields endpoint JSON checked against Shields' documented schema; the colours'
contrast; the width table; and `headway badge`."""

from __future__ import annotations

import base64
import dataclasses
import hmac
import io
import json
import re
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import msgspec
import pytest

from headway.badges import colours, svg
from headway.badges.states import STALLED_AFTER_S, space_badge, task_badge
from headway.cli import main as headway
from headway.cli.badge import share_link
from headway.config import Settings
from headway.domain.estimates import Estimate
from headway.domain.jobs import Usual
from headway.domain.schemas import CreateChannel
from headway.domain.tasks import parse_ts

from .live_server import serving
from .test_events import new_space, new_task, watching
from .test_shares import assert_no_uuid

SVG_NS = "{http://www.w3.org/2000/svg}"
IMAGE = {"accept": "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"}
MARKUP = "<i>&\"q\" 'x' 🚀</i>"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The shared settings, with progress kept a day as by default (not the suite's
    60 s): the clock moves past a stall's 10 minutes and progress must stay."""
    return dataclasses.replace(settings, progress_ttl=86_400)


async def share_of(client, space: str) -> str:
    created = await client.post(f"/spaces/{space}/shares", json={})
    assert created.status_code == 201
    return created.json()["uuid"]


async def ids_by_title(client, share: str) -> dict[str, str]:
    """Each task's id under the link (steps too), by title."""
    found: dict[str, str] = {}

    def walk(tasks: list[dict[str, Any]]) -> None:
        for task in tasks:
            found[task["title"]] = task["id"]
            walk(task["children"])

    walk((await client.get(f"/shared/{share}")).json()["tasks"])
    return found


def texts(svg_bytes: bytes) -> tuple[ET.Element, list[str]]:
    """The parsed SVG and its drawn texts (shadows left out), in order."""
    root = ET.fromstring(svg_bytes)
    assert root.tag == f"{SVG_NS}svg"
    drawn = [
        node.text or "" for node in root.iter(f"{SVG_NS}text") if node.get("aria-hidden") != "true"
    ]
    return root, drawn


async def badge(client, path: str, **params: str) -> tuple[ET.Element, list[str], str]:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/svg+xml"
    root, drawn = texts(response.content)
    title = root.find(f"{SVG_NS}title")
    assert title is not None
    return root, drawn, title.text or ""


async def test_badges_of_every_state_are_svg_and_show_no_uuid(client, space, make_task, clock):
    share = await share_of(client, space)
    done = await make_task(title="Backup")
    await client.put(f"/tasks/{done}", json={"current": 1})
    clock.advance(200)
    await client.put(f"/tasks/{done}", json={"done": True})
    waiting = await make_task(title="Waiting")
    running = await make_task(title="Deploy")
    await client.put(f"/tasks/{running}", json={"current": 62, "end": 100})
    counting = await make_task(title="Counting")
    await client.put(f"/tasks/{counting}", json={"current": 1234})
    failed = await make_task(title="Tests")
    await client.put(f"/tasks/{failed}", json={"done": True, "values": {"error": "exit code 3"}})
    parent = await make_task(title="Release")
    step_ok = await make_task(title="Build", parent_uuid=parent)
    step_bad = await make_task(title="Run migrations", parent_uuid=parent)
    await client.put(f"/tasks/{step_ok}", json={"done": True})
    ids = await ids_by_title(client, share)
    base = f"/shared/{share}/tasks"
    secrets = [space, share, waiting, running, counting, done, failed, parent, step_ok, step_bad]

    expected = {
        "Waiting": ["Waiting", "waiting"],
        "Deploy": ["Deploy", "62%"],
        "Counting": ["Counting", "1,234 so far"],
        "Backup": ["Backup", "done in 3 min 20 s"],
        "Tests": ["Tests", "failed"],
        "Release": ["Release", "1 of 2 steps"],
    }
    for title, words in expected.items():
        response = await client.get(f"{base}/{ids[title]}/badge.svg")
        assert response.status_code == 200
        assert_no_uuid(response.text + json.dumps(dict(response.headers)), *secrets)
        _, drawn, _ = await badge(client, f"{base}/{ids[title]}/badge.svg")
        assert drawn == words, title
    _, drawn, title = await badge(client, f"/shared/{share}/badge.svg")
    assert drawn == ["Test space", "4 running · 56% · 1 failed"]  # 62% and 1 step of 2
    assert "Tests: exit code 3" in title

    # A parent whose step failed has failed, and its tooltip names the step.
    await client.put(f"/tasks/{step_bad}", json={"done": True, "values": {"error": "exit 3"}})
    _, drawn, title = await badge(client, f"{base}/{ids['Release']}/badge.svg")
    assert drawn == ["Release", "failed"]
    assert "1 of 2 steps failed (Run migrations: exit 3)" in title
    _, drawn, _ = await badge(client, f"{base}/{ids['Run migrations']}/badge.svg")
    assert drawn == ["Run migrations", "failed"]

    # Ten minutes without a report: stalled (the silent rule), and the space says so.
    clock.advance(STALLED_AFTER_S + 1)
    for title in ("Waiting", "Deploy", "Counting"):
        _, drawn, tooltip = await badge(client, f"{base}/{ids[title]}/badge.svg")
        assert drawn == [title, "stalled"]
        assert re.search(r"\(no report for 10 min( \d+ s)?\)", tooltip)  # the clock moved on
    _, drawn, _ = await badge(client, f"/shared/{share}/badge.svg")
    assert drawn == ["Test space", "62% · 3 stalled · 2 failed"]
    await client.put(f"/tasks/{running}", json={"current": 70, "end": 100})
    _, drawn, _ = await badge(client, f"{base}/{ids['Deploy']}/badge.svg")
    assert drawn == ["Deploy", "70%"]
    _, drawn, _ = await badge(client, f"/shared/{share}/badge.svg")
    assert drawn == ["Test space", "1 running · 70% · 2 stalled · 2 failed"]


async def test_a_space_badge_sums_up_its_tasks(client, space, make_task):
    share = await share_of(client, space)
    path = f"/shared/{share}/badge.svg"
    assert (await badge(client, path))[1] == ["Test space", "no tasks"]
    first = await make_task(title="a")
    second = await make_task(title="b")
    assert (await badge(client, path))[1] == ["Test space", "2 waiting"]
    await client.put(f"/tasks/{first}", json={"current": 1, "end": 4})
    await client.put(f"/tasks/{second}", json={"current": 3, "end": 5})
    root, drawn, _ = await badge(client, path, bar="1")
    assert drawn == ["Test space", "2 running · 42%"]  # the mean of 25% and 60%, rounded down
    await client.put(f"/tasks/{first}", json={"done": True})
    await client.put(f"/tasks/{second}", json={"done": True})
    root, drawn, _ = await badge(client, path, label="")
    assert drawn == ["all done"]
    fills = [rect.get("fill") for rect in root.iter(f"{SVG_NS}rect")]
    assert colours.BACKGROUND["done"] in fills and colours.LABEL not in fills


async def test_text_is_escaped_cut_and_measured(client, space, make_task):
    share = await share_of(client, space)
    task = await make_task(title=MARKUP)
    long = await make_task(title="W" * 200)
    ids = await ids_by_title(client, share)
    response = await client.get(f"/shared/{share}/tasks/{ids[MARKUP]}/badge.svg")
    assert b"<i>" not in response.content and b"&quot;q&quot;" in response.content
    root, drawn = texts(response.content)
    assert drawn == [MARKUP, "waiting"]
    label_text = next(root.iter(f"{SVG_NS}text"))
    assert float(label_text.get("textLength", 0)) / 10 == pytest.approx(
        svg.text_width(MARKUP), abs=1
    )
    _, drawn, _ = await badge(client, f"/shared/{share}/tasks/{ids['W' * 200]}/badge.svg")
    assert drawn[0].endswith("…") and drawn[0].startswith("WWW")
    assert svg.text_width(drawn[0]) <= svg.MAX_TEXT_PX
    # Characters XML cannot hold (a control character in a label) become U+FFFD.
    root, drawn, _ = await badge(client, f"/shared/{share}/badge.svg", label="a\x01b")
    assert drawn[0] == "a\ufffdb"
    assert task and long


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


async def test_a_title_cannot_turn_the_servers_words_around(client, space, make_task):
    """A title or an error holding bidi controls (U+202E, an isolate's end...) shows in
    the tooltip without them: the server's own words read as written."""
    share = await share_of(client, space)
    turned = "\u2069\u202eDeploy"
    task = await make_task(title=turned)
    await client.put(f"/tasks/{task}", json={"values": {"error": "\u202ebad"}, "done": True})
    ids = await ids_by_title(client, share)
    for path in (f"/shared/{share}/tasks/{ids[turned]}/badge.svg", f"/shared/{share}/badge.svg"):
        _, _, title = await badge(client, path)
        assert not set(title) & set(BIDI), title
        assert title in ("Deploy: failed: bad", "Test space: 1 failed (Deploy: bad)")


async def test_options_style_bar_and_label(client, space, make_task):
    share = await share_of(client, space)
    task = await make_task(title="Deploy")
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 4})
    ids = await ids_by_title(client, share)
    path = f"/shared/{share}/tasks/{ids['Deploy']}/badge.svg"
    flat, _, _ = await badge(client, path)
    assert flat.get("height") == "20" and flat.find(f"{SVG_NS}clipPath") is not None
    square, _, _ = await badge(client, path, style="flat-square")
    assert square.get("height") == "20" and square.find(f"{SVG_NS}clipPath") is None
    big, drawn, _ = await badge(client, path, style="for-the-badge", label="Ship it")
    assert big.get("height") == "28" and drawn == ["SHIP IT", "25%"]
    barred, _, _ = await badge(client, path, bar="1")
    rects = list(barred.iter(f"{SVG_NS}rect"))
    running = colours.BACKGROUND["running"]
    track = next(r for r in rects if r.get("fill") == colours.track(running))
    fill = next(r for r in rects if r.get("fill") == running)
    assert float(fill.get("width")) == pytest.approx(float(track.get("width")) / 4, abs=0.1)
    assert (await client.get(path, params={"v": "2"})).status_code == 200  # cache busters
    for params in ({"style": "plastic"}, {"bar": "yes"}, {"label": "x" * 201}):
        refused = await client.get(path, params=params)
        assert refused.status_code == 400 and set(refused.json()) == {"error"}
    twice = await client.get(f"{path}?style=flat&style=flat")
    assert twice.status_code == 400


async def test_etag_cache_control_and_304(client, space, make_task):
    share = await share_of(client, space)
    task = await make_task(title="Deploy")
    path = f"/shared/{share}/badge.svg"
    first = await client.get(path)
    etag = first.headers["etag"]
    max_age = int(re.fullmatch(r"max-age=(\d+)", first.headers["cache-control"]).group(1))
    assert 0 < max_age <= 60  # image proxies (GitHub's camo) refresh within a minute
    assert first.headers["content-security-policy"] == "default-src 'none'"
    same = await client.get(path, headers={"if-none-match": etag})
    assert same.status_code == 304 and same.content == b"" and same.headers["etag"] == etag
    weak = await client.get(path, headers={"if-none-match": f'"other", W/{etag}'})
    assert weak.status_code == 304
    await client.put(f"/tasks/{task}", json={"current": 1, "end": 2})
    changed = await client.get(path, headers={"if-none-match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag


async def test_a_revoked_or_unknown_link_or_task_is_404(client, space, make_task):
    share = await share_of(client, space)
    task = await make_task(title="Deploy")
    ids = await ids_by_title(client, share)
    task_path = f"/shared/{share}/tasks/{ids['Deploy']}"
    for path in (f"/shared/{share}/badge.svg", f"{task_path}/badge.svg"):
        assert (await client.get(path)).status_code == 200
    unknown = f"/shared/{share}/tasks/{ids['Deploy']}x"
    for path in (f"{unknown}/badge.svg", f"{unknown}/shields.json", f"/shared/{task}/badge.svg"):
        gone = await client.get(path)
        assert gone.status_code == 404 and set(gone.json()) == {"error"}
        assert_no_uuid(gone.text, space, task)
    await client.delete(f"/tasks/{task}")
    assert (await client.get(f"{task_path}/badge.svg")).status_code == 404
    assert (await client.delete(f"/spaces/{space}/shares/{share}")).status_code == 204
    for path in (
        f"/shared/{share}/badge.svg",
        f"{task_path}/badge.svg",
        f"/shared/{share}/shields.json",
        f"{task_path}/shields.json",
        f"/shared/{share}/embed",
        "/shared/not-a-uuid/badge.svg",
    ):
        gone = await client.get(path)
        assert gone.status_code == 404, path
        assert gone.headers["content-type"] == "application/json"
        assert set(gone.json()) == {"error"}
    # A browser's <img> gets a grey "not found" badge, still a 404, never cached.
    image = await client.get(f"/shared/{share}/badge.svg", headers=IMAGE)
    assert image.status_code == 404 and image.headers["cache-control"] == "no-store"
    assert texts(image.content)[1] == ["progress", "not found"]
    page = await client.get(f"/shared/{share}/embed", headers={"accept": "text/html"})
    assert page.status_code == 404 and "This link no longer works" in page.text


def shields_schema() -> dict[str, Any]:
    """Shields' endpoint badge schema, from its documented fields
    (shields.io/badges/endpoint-badge): schemaVersion always 1; label required (may be
    empty); message required, not empty; color, labelColor, namedLogo, logoSvg,
    logoColor, logoWidth, logoSize, style and cacheSeconds (at least 300) optional;
    isError a boolean. Nothing else."""
    text = {"type": "string"}
    return {
        "type": "object",
        "required": ["schemaVersion", "label", "message"],
        "additionalProperties": False,
        "properties": {
            "schemaVersion": {"const": 1},
            "label": text,
            "message": {"type": "string", "minLength": 1},
            "color": text,
            "labelColor": text,
            "isError": {"type": "boolean"},
            "namedLogo": text,
            "logoSvg": text,
            "logoColor": text,
            "logoWidth": {"type": "number"},
            "logoSize": {"enum": ["auto"]},
            "style": {"enum": ["plastic", "flat", "flat-square", "for-the-badge", "social"]},
            "cacheSeconds": {"type": "integer", "minimum": 300},
        },
    }


async def test_the_shields_endpoint_json_follows_shields_schema(client, space, make_task):
    share = await share_of(client, space)
    failed = await make_task(title="Tests")
    await client.put(f"/tasks/{failed}", json={"done": True, "values": {"error": "exit 1"}})
    running = await make_task(title="Deploy")
    await client.put(f"/tasks/{running}", json={"current": 1, "end": 2})
    ids = await ids_by_title(client, share)
    answers = {
        "space": await client.get(f"/shared/{share}/shields.json"),
        "failed": await client.get(f"/shared/{share}/tasks/{ids['Tests']}/shields.json"),
        "running": await client.get(
            f"/shared/{share}/tasks/{ids['Deploy']}/shields.json",
            params={"label": "", "style": "for-the-badge"},
        ),
    }
    for name, answer in answers.items():
        assert answer.status_code == 200, name
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["cache-control"].startswith("max-age=")
        jsonschema.validate(answer.json(), shields_schema())
        assert_no_uuid(answer.text, space, share, failed, running)
    space_json = answers["space"].json()
    assert space_json["label"] == "Test space"
    assert space_json["message"] == "1 running · 50% · 1 failed"
    assert space_json["isError"] is True
    assert answers["failed"].json()["color"] == colours.BACKGROUND["failed"].removeprefix("#")
    running_json = answers["running"].json()
    assert running_json["label"] == "" and running_json["message"] == "50%"
    assert running_json["style"] == "for-the-badge" and running_json["isError"] is False
    assert re.fullmatch(r"[0-9a-f]{6}", running_json["color"])


def test_every_colour_keeps_wcag_aa_contrast_with_the_text():
    def contrast(first: str, second: str) -> float:  # WCAG 2, written again here
        def luminance(colour: str) -> float:
            channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
            r, g, b = (
                c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels
            )
            return 0.2126 * r + 0.7152 * g + 0.0722 * b

        high, low = sorted((luminance(first), luminance(second)), reverse=True)
        return (high + 0.05) / (low + 0.05)

    backgrounds = [colours.LABEL]
    for state in colours.STATES:
        backgrounds += [colours.BACKGROUND[state], colours.track(colours.BACKGROUND[state])]
    for background in backgrounds:
        assert contrast(colours.TEXT, background) >= 4.5, background
        assert colours.contrast(colours.TEXT, background) == pytest.approx(
            contrast(colours.TEXT, background)
        )
    assert len(set(colours.BACKGROUND.values())) == len(colours.STATES)


def test_text_is_measured_with_pybadges_width_table():
    from badgepy.precalculated_text_measurer import PrecalculatedTextMeasurer

    spec_path = Path(__import__("importlib").util.find_spec("badgepy").origin).parent
    with (spec_path / "default-widths.json").open(encoding="utf-8") as table:
        measurer = PrecalculatedTextMeasurer.from_json(table)
    for text in ("Deploy", "AVATAR Wolf", "3 running · 42%", "done in 3 min", MARKUP, "ÆØÅ"):
        assert svg.text_width(text) == pytest.approx(measurer.text_width(text) / 10)
    assert svg.text_width("iiii") < svg.text_width("MMMM")
    assert svg.cut("short") == "short"


def test_the_badge_states_judge_stalls_by_the_channels_default():
    defaults = {field.name: field.default for field in msgspec.structs.fields(CreateChannel)}
    assert defaults["stalled_after"] == STALLED_AFTER_S
    created = "2026-11-22T01:00:00.000000Z"
    start = parse_ts(created)
    task = {"title": "t", "created_at": created, "finished_at": None, "progress": None}
    assert task_badge(task, start).state == "waiting"
    assert task_badge(task, start + STALLED_AFTER_S * 1_000_000).state == "stalled"
    # A parent lives as long as its steps report or finish.
    parent = {
        **task,
        "progress": {
            "current": 1,
            "end": 2,
            "ratio": 0.5,
            "values": {},
            "updated_at": None,
            "aggregated": True,
        },
        "children": [{"finished_at": "2026-11-22T01:09:00.000000Z", "progress": None}],
    }
    assert task_badge(parent, start + STALLED_AFTER_S * 1_000_000).message == "1 of 2 steps"
    assert space_badge(None, [], start)[:4] == ("progress", "no tasks", "waiting", None)


def test_a_running_badge_says_its_time_left_or_that_it_runs_late():
    created = "2026-11-22T01:00:00.000000Z"
    now = parse_ts(created) + 60_000_000
    progress = {"current": 62, "end": 100, "ratio": 0.62, "values": {}, "aggregated": False}
    task = {
        "title": "Nightly ETL",
        "created_at": created,
        "finished_at": None,
        "progress": {**progress, "updated_at": "2026-11-22T01:00:59.000000Z"},
    }
    usual = Usual(720.0, 800.0, 5)
    on_time = Estimate(60.0, 1.0, 250.0, now + 250_000_000, "blend", usual, False)
    badge = task_badge(task, now, estimate=on_time)
    assert badge.message == "62% · 4 min left"
    assert badge.title == "Nightly ETL: 62% · 4 min left (usually 12 min)"
    late = Estimate(60.0, 1.0, 900.0, now + 900_000_000, "blend", usual, True)
    assert task_badge(task, now, estimate=late).message == "62% · late"
    soon = Estimate(60.0, 1.0, 20.0, now, "rate", None, False)
    assert task_badge(task, now, estimate=soon).message == "62% · under a minute left"
    unknown = Estimate(60.0, None, None, None, None, None, False)
    assert task_badge(task, now, estimate=unknown).message == "62%"


async def test_a_shared_task_badge_and_its_shields_say_the_time_left(client, space, clock):
    task = (await client.post(f"/spaces/{space}/tasks", json={"title": "Copy"})).json()["uuid"]
    for current in range(0, 30, 2):  # 2 a second: 35 s left at 28 of 100
        await client.put(f"/tasks/{task}", json={"current": current, "end": 100})
        clock.advance(1)
    share = (await client.post(f"/spaces/{space}/shares", json={})).json()["uuid"]
    task_id = (await client.get(f"/shared/{share}")).json()["tasks"][0]["id"]
    shields = await client.get(f"/shared/{share}/tasks/{task_id}/shields.json")
    assert shields.json()["message"] == "28% · under a minute left"
    badge = await client.get(f"/shared/{share}/tasks/{task_id}/badge.svg")
    assert "28% · under a minute left" in badge.text


def test_a_done_badge_says_its_length_to_the_microsecond():
    created = "2026-11-22T01:00:00.000000Z"
    done = {"title": "t", "created_at": created, "progress": None, "children": []}
    quick = {**done, "finished_at": "2026-11-22T01:00:01.940000Z", "duration": 1}
    second = {**done, "finished_at": "2026-11-22T01:00:00.999000Z", "duration": 0}
    assert task_badge(quick, parse_ts(created)).message == "done in 1.9 s"
    assert task_badge(second, parse_ts(created)).message == "done in 1.0 s"


def run_headway(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = headway(list(args))
    return status, out.getvalue(), err.getvalue()


def test_headway_badge_prints_the_markdown_of_a_share_link():
    share = str(uuid.uuid4())
    link = f"https://headway.example.com/shared/{share}"
    status, out, _ = run_headway("badge", f"{link}/embed")
    assert status == 0
    assert out == f"[![progress]({link}/badge.svg)]({link})\n"
    status, out, _ = run_headway("badge", link, "--task", "pR8Sp", "--bar", "--label", "Deploy")
    assert out == f"[![Deploy]({link}/tasks/pR8Sp/badge.svg?label=Deploy&bar=1)]({link})\n"
    status, out, _ = run_headway("badge", link, "--shields", "--style", "for-the-badge")
    shields = "https://img.shields.io/endpoint?url=" + f"{link}/shields.json".replace(
        ":", "%3A"
    ).replace("/", "%2F")
    assert out == f"[![progress]({shields}&style=for-the-badge)]({link})\n"
    status, out, _ = run_headway("badge", link, "--embed")
    frame = f'<iframe src="{link}/embed" title="progress" width="480" height="320"></iframe>'
    assert out == frame + "\n"
    status, out, _ = run_headway("badge", share, "--url", "http://127.0.0.1:9000")
    assert f"http://127.0.0.1:9000/shared/{share}/badge.svg" in out


def test_headway_badge_needs_no_server_packages():
    from .test_cli_client import WITHOUT_SERVER

    blocked = WITHOUT_SERVER.replace(
        '"msgspec"}', '"msgspec", "badgepy", "regex", "jinja2", "redis", "apprise"}'
    )
    assert blocked != WITHOUT_SERVER
    share = str(uuid.uuid4())
    result = subprocess.run(
        [sys.executable, "-c", blocked, "badge", share, "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"[![progress](http://127.0.0.1:9/shared/{share}/badge.svg)")


def test_headway_badge_refuses_a_space_address_without_repeating_it():
    space = str(uuid.uuid4())
    status, out, err = run_headway("badge", f"https://headway.example.com/spaces/{space}")
    assert status == 2 and out == ""
    assert "read-only links" in err and space not in err
    with pytest.raises(ValueError):
        share_link("https://headway.example.com/shared/not-a-uuid", "http://x")


async def test_only_the_embed_may_be_framed(client, space):
    from headway.web.pages import CONTENT_SECURITY_POLICY

    share = await share_of(client, space)
    html = {"accept": "text/html"}
    embed = await client.get(f"/shared/{share}/embed", headers=html)
    assert embed.status_code == 200 and embed.headers["content-type"].startswith("text/html")
    policy = embed.headers["content-security-policy"]
    assert "frame-ancestors *" in policy and "x-frame-options" not in embed.headers
    assert policy == CONTENT_SECURITY_POLICY.replace("frame-ancestors 'none'", "frame-ancestors *")
    assert embed.headers["referrer-policy"] == "no-referrer"
    assert_no_uuid(embed.text.replace(share, ""), space)
    for path in ("/", f"/spaces/{space}", f"/shared/{share}"):
        page = await client.get(path, headers=html)
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
        assert page.headers["x-frame-options"] == "DENY", path
    themed = await client.get(
        f"/shared/{share}/embed", params={"theme": "dark", "transparent": "1", "limit": "3"}
    )
    assert 'data-theme="dark"' in themed.text and 'class="transparent"' in themed.text
    assert 'data-limit="3"' in themed.text
    for params in ({"theme": "blue"}, {"transparent": "yes"}, {"limit": "0"}, {"limit": "51"}):
        refused = await client.get(f"/shared/{share}/embed", params=params)
        assert refused.status_code == 400 and set(refused.json()) == {"error"}, params


@pytest.mark.parametrize(
    "path",
    [
        "/shared/{share}/tasks//badge.svg",
        "/shared/{share}/tasks/{id}/x/badge.svg",
        "/shared/{share}/task/{id}/badge.svg",
        "/shared//badge.svg",
        "/shared/{share}/badge.svg/",
        "/shared/{share}/tasks/{id}/badge.svgz",
    ],
)
async def test_the_badges_routes_take_only_their_own_paths(app, client, space, make_task, path):
    """Each parameter of a badge's route is one whole, non-empty path segment, and
    anything else is a JSON 404."""
    share = await share_of(client, space)
    await make_task(title="Deploy")
    task_id = (await ids_by_title(client, share))["Deploy"]
    assert app.table.find("GET", f"/shared/{share}/tasks/{task_id}/badge.svg") is not None
    assert app.table.find("GET", f"/shared/{share}/badge.svg") is not None
    wrong = path.format(share=share, id=task_id)
    assert app.table.find("GET", wrong) is None
    assert app.table.matching(wrong) == []
    response = await client.get(wrong)
    assert response.status_code == 404 and set(response.json()) == {"error"}


async def test_a_badge_takes_the_ids_the_links_stream_shows(settings):
    """The ids of a link's stream (its snapshot, and a task created since) name the same
    tasks in badge.svg and shields.json; an id keyed by the link's uuid alone (without the
    server's secret) names none."""
    with serving(settings.with_(run_worker=False)) as (host, port):
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as http:
            space = await new_space(http, "Nightly")
            first = await new_task(http, space, title="Deploy")
            await http.put(f"/tasks/{first}", json={"current": 1, "end": 4})
            share = await share_of(http, space)
            async with watching(http, f"/shared/{share}/events") as watcher:
                [shown] = (await watcher.snapshot())["tasks"]
                _, drawn, _ = await badge(http, f"/shared/{share}/tasks/{shown['id']}/badge.svg")
                assert drawn == ["Deploy", "25%"]
                later = await new_task(http, space, title="Backup")  # after the first look
                [event] = await watcher.task_events(1)
            assert event["title"] == "Backup"
            task_path = f"/shared/{share}/tasks/{event['id']}"
            _, drawn, _ = await badge(http, f"{task_path}/badge.svg")
            assert drawn == ["Backup", "waiting"]
            shields = await http.get(f"{task_path}/shields.json")
            assert shields.status_code == 200 and shields.json()["message"] == "waiting"
            assert_no_uuid(shields.text, space, share, first, later)
            unkeyed = hmac.new(uuid.UUID(share).bytes, first.encode(), "sha256").digest()[:16]
            old = base64.urlsafe_b64encode(unkeyed).rstrip(b"=").decode()
            assert old != shown["id"]
            refused = await http.get(f"/shared/{share}/tasks/{old}/badge.svg")
            assert refused.status_code == 404


async def test_a_revoke_or_delete_made_elsewhere_ends_the_badges_within_a_second(
    settings, app, client, space, make_task, clock
):
    """A revoke or a space's delete that no change feed told this instance of (another
    instance, no Redis) is 404 once what the badges keep (a second at most) is old; one
    made here is 404 at once."""
    from headway.storage import deletes
    from headway.storage.database import Database

    await make_task(title="Deploy")
    revoked = await share_of(client, space)
    other_space = (await client.post("/spaces", json={"title": "Other"})).json()["uuid"]
    await make_task(other_space, title="Backup")
    deleted = await share_of(client, other_space)
    paths = {}
    for share in (revoked, deleted):
        [task_id] = (await ids_by_title(client, share)).values()
        paths[share] = [
            f"/shared/{share}/badge.svg",
            f"/shared/{share}/shields.json",
            f"/shared/{share}/tasks/{task_id}/badge.svg",
            f"/shared/{share}/tasks/{task_id}/shields.json",
        ]
        for path in paths[share]:
            assert (await client.get(path)).status_code == 200, path
    db = Database(settings.database_url)
    try:
        async with db.write() as st:
            await st.rows("DELETE FROM shares WHERE uuid = ?", (revoked,))
            await deletes.delete_space(st, other_space, clock.now_us())
    finally:
        await db.close()
    clock.advance(1.001)
    for share in (revoked, deleted):
        for path in paths[share]:
            gone = await client.get(path)
            assert gone.status_code == 404 and set(gone.json()) == {"error"}, path
    # Made here: at once, with no time passing.
    share = await share_of(client, space)
    [task_id] = (await ids_by_title(client, share)).values()
    badge_path = f"/shared/{share}/tasks/{task_id}/badge.svg"
    assert (await client.get(badge_path)).status_code == 200
    assert (await client.delete(f"/spaces/{space}")).status_code == 204
    for path in (badge_path, f"/shared/{share}/badge.svg", f"/shared/{share}/embed"):
        assert (await client.get(path)).status_code == 404, path
