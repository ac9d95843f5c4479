"""`headway badge URL`: the Markdown of a share link's badge (or of one of its tasks), to
paste in a README; with `--shields`, Shields' badge of the link's endpoint; with
`--embed`, an `<iframe>` of its live view. Made from the URL alone: nothing is fetched."""

from __future__ import annotations

import argparse
import os
import uuid
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from .parsers import add_url, command_parser, failed

STYLES = ("flat", "flat-square", "for-the-badge")
SHIELDS_ENDPOINT = "https://img.shields.io/endpoint"
ALT = "progress"

DESCRIPTION = """\
Print the Markdown of a share link's badge: an SVG that always shows the space's progress
("3 running · 42%", "all done", "1 failed"), or with --task that of one task ("62%",
"done in 3 min", "failed"). URL is a share link (http://host/shared/<id>, or any address
under it) or a share link's id on --url or HEADWAY_URL. Badges come only from share
links: a space's own address is its key, never to be shown."""


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    badge = command_parser(
        commands,
        "badge",
        "print the Markdown of a share link's badge",
        DESCRIPTION,
        "headway badge https://headway.example.com/shared/3f9c0e5e-0d7b-4c8e-9d0a-6b1f2c3d4e5f",
    )
    badge.add_argument("link", metavar="URL", help="a share link, or its id")
    badge.add_argument("--task", metavar="ID", help="one task's badge, by its id under the link")
    badge.add_argument("--label", help="the left text (default: the title)")
    badge.add_argument("--style", choices=STYLES, default="flat", help="default: flat")
    badge.add_argument("--bar", action="store_true", help="draw a bar inside the badge")
    shown = badge.add_mutually_exclusive_group()
    shown.add_argument(
        "--shields", action="store_true", help="Shields' badge of the link's endpoint instead"
    )
    shown.add_argument(
        "--embed", action="store_true", help="an <iframe> of the link's live view instead"
    )
    add_url(badge)
    badge.set_defaults(handler=badge_command)


def share_link(target: str, base_url: str) -> str:
    """The share link's address (`scheme://host/shared/<id>`) of a share link, an address
    under one, or a share link's id on `base_url`. ValueError for anything else."""
    if "://" not in target:
        return f"{base_url.rstrip('/')}/shared/{_share_id(target)}"
    parts = urlsplit(target)
    segments = parts.path.split("/")
    if "spaces" in segments:
        raise ValueError(
            "that is a space's own address, its key: badges come from read-only links. "
            "Create one on the space's page (Create a read-only link) or with "
            "POST /spaces/{space_uuid}/shares."
        )
    if "shared" not in segments or segments.index("shared") + 1 >= len(segments):
        raise ValueError("give a share link: http://host/shared/<id>")
    share = _share_id(segments[segments.index("shared") + 1])
    prefix = "/".join(segments[: segments.index("shared")])
    return urlunsplit((parts.scheme, parts.netloc, f"{prefix}/shared/{share}", "", ""))


def _share_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise ValueError("a share link's id is a UUID, as its address shows it") from None


def snippet(
    link: str,
    *,
    task: str | None = None,
    label: str | None = None,
    style: str = "flat",
    bar: bool = False,
    shields: bool = False,
    embed: bool = False,
) -> str:
    """What `headway badge` prints for the share link `link` (see `share_link`)."""
    if embed:
        return f'<iframe src="{link}/embed" title="{ALT}" width="480" height="320"></iframe>'
    under = f"{link}/tasks/{quote(task, safe='')}" if task else link
    options = {"label": label} if label is not None else {}
    if style != "flat":
        options["style"] = style
    alt = (label or ALT).replace("[", "").replace("]", "")
    if shields:
        image = f"{SHIELDS_ENDPOINT}?{urlencode({'url': f'{under}/shields.json', **options})}"
    else:
        if bar:
            options["bar"] = "1"
        image = f"{under}/badge.svg" + (f"?{urlencode(options)}" if options else "")
    return f"[![{alt}]({image})]({link})"


def badge_command(args: argparse.Namespace) -> int:
    from ..client.client import DEFAULT_URL

    try:
        link = share_link(args.link, args.url or os.environ.get("HEADWAY_URL") or DEFAULT_URL)
    except ValueError as exc:
        return failed(f"headway badge: {exc}", 2)
    options = ("task", "label", "style", "bar", "shields", "embed")
    print(snippet(link, **{name: getattr(args, name) for name in options}))
    return 0
