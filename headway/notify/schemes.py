"""Which Apprise schemes a channel may use: those allowed unless
HEADWAY_CHANNEL_SCHEMES says otherwise, those never allowed, and how that setting is read.
"""

from __future__ import annotations

import re

# The Apprise schemes a channel may use unless HEADWAY_CHANNEL_SCHEMES says otherwise:
# hosted chat and push services, the self-hosted servers people run for them, plain
# HTTP endpoints and e-mail. Every one sends over the network to one service.
DEFAULT_SCHEMES: tuple[str, ...] = (
    # hosted chat
    "slack",  # Slack (also its https://hooks.slack.com/... URLs)
    "discord",  # Discord (also https://discord.com/api/webhooks/...)
    "tgram",  # Telegram
    "workflow",  # Microsoft Teams through Power Automate workflows
    "workflows",
    "gchat",  # Google Chat
    "zulip",  # Zulip (zulipchat.com or a server of one's own)
    "wxteams",  # Webex
    "webex",
    # self-hosted chat
    "matrix",  # Matrix
    "matrixs",
    "mmost",  # Mattermost
    "mmosts",
    "rocket",  # Rocket.Chat
    "rockets",
    # push
    "pover",  # Pushover
    "pbul",  # Pushbullet
    "ntfy",  # ntfy (ntfy.sh or a server of one's own)
    "ntfys",
    "gotify",  # Gotify
    "gotifys",
    "signal",  # Signal through signal-cli-rest-api
    "signals",
    # plain HTTP endpoints
    "json",
    "jsons",
    "form",
    "forms",
    "xml",
    "xmls",
    # e-mail
    "mailto",
    "mailtos",
)

# Never allowed, even when HEADWAY_CHANNEL_SCHEMES lists them: they write local files,
# show desktop notifications, talk to D-Bus or a USB device, write system logs, or run
# code. A channel is set up by whoever holds a space uuid; none of that is theirs to use.
NEVER_SCHEMES: frozenset[str] = frozenset(
    {
        "file",
        "windows",
        "macosx",
        "dbus",
        "kde",
        "qt",
        "glib",
        "gio",
        "gnome",
        "growl",
        "blink1",
        "syslog",
        "rsyslog",
        "script",
        "schema",
    }
)


def parse_schemes(text: str) -> frozenset[str]:
    """The schemes a comma-separated setting (HEADWAY_CHANNEL_SCHEMES) allows.

    Raises ValueError naming any scheme that is never allowed, or that is not a scheme.
    """
    schemes = frozenset(part.strip().lower() for part in text.split(",") if part.strip())
    if refused := sorted(schemes & NEVER_SCHEMES):
        raise ValueError(
            f"{', '.join(refused)}: never allowed for channels (local files, desktops, "
            "D-Bus, system logs and scripts are not reachable from a channel)"
        )
    if odd := sorted(s for s in schemes if not re.fullmatch(r"[a-z][a-z0-9+.-]{0,31}", s)):
        raise ValueError(f"{', '.join(odd)}: not a URL scheme")
    return schemes
