"""`headway channels test URL`: check a notification channel's Apprise URL as the server
would and send it a test message from this machine. Apprise is imported only when the
command runs; without it the command says how to install it."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from ..config import ConfigError, Settings
from .parsers import command_parser, failed, installed

APPRISE_EXTRA = "pip install 'headway[server]' (or only: pip install apprise)"


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # Listed where Apprise is installed: without it the command only says how to get it.
    listed = installed("apprise")
    channels = commands.add_parser(
        "channels", **({"help": "try a notification channel's URL"} if listed else {})
    )
    channel_commands = channels.add_subparsers(
        dest="channels_command", required=True, metavar="test"
    )
    test = command_parser(
        channel_commands,
        "test",
        "send a test message to an Apprise URL",
        "Check an Apprise URL as the server checks a channel's (its scheme allowed, every "
        "host it names on a public address) and send it a test message directly from "
        "this machine. Prints the outcome with the URL's tokens masked; exits 0 when the "
        "service accepted the message, 1 otherwise. HEADWAY_CHANNEL_SCHEMES and "
        "HEADWAY_ALLOW_PRIVATE_TARGETS apply as on the server.",
        "headway channels test 'ntfys://ntfy.sh/my-builds'\n"
        "  headway channels test --allow-private 'json://127.0.0.1:8080/hook'",
    )
    test.add_argument("url", metavar="URL", help="the Apprise URL (quote it for the shell)")
    test.add_argument(
        "--allow-private",
        action="store_true",
        help="allow hosts on private and loopback addresses "
        "(default: HEADWAY_ALLOW_PRIVATE_TARGETS, else false)",
    )
    test.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="give up after this long (default 10)",
    )
    test.add_argument("--title", help="the space's title the message names")
    test.set_defaults(handler=_test)


def _test(args: argparse.Namespace) -> int:
    try:
        allow_private = args.allow_private or Settings.from_env().webhook_allow_private
        from ..notify.schemes import DEFAULT_SCHEMES, parse_schemes

        raw = os.environ.get("HEADWAY_CHANNEL_SCHEMES", "").strip()
        try:
            schemes = parse_schemes(raw) if raw else frozenset(DEFAULT_SCHEMES)
        except ValueError as exc:
            raise ConfigError(f"HEADWAY_CHANNEL_SCHEMES: {exc}") from None
    except ConfigError as exc:
        return failed(f"headway: {exc}", 2)
    if not args.timeout > 0:
        return failed("headway: --timeout must be above 0", 2)
    try:
        return _send(args.url, schemes, allow_private, args.timeout, args.title)
    except ModuleNotFoundError as exc:
        if (exc.name or "headway").partition(".")[0] == "headway":
            raise
        return failed(
            f"headway channels test needs Apprise (no module {exc.name!r}); "
            f"install it with: {APPRISE_EXTRA}"
        )


def _send(
    url: str, schemes: frozenset[str], allow_private: bool, timeout_s: float, title: str | None
) -> int:
    from ..domain.errors import Unprocessable
    from ..notify.send import send_test
    from ..notify.urls import check_channel_url

    try:
        channel = check_channel_url(url, schemes)
    except Unprocessable as exc:
        return failed(f"headway: {exc.message}")
    outcome = asyncio.run(
        send_test(
            url,
            allow_private=allow_private,
            timeout_s=timeout_s,
            schemes=schemes,
            space_title=title,
        )
    )
    print(f"{channel.redacted}: {outcome.detail}")
    if "refused:" in outcome.detail and not allow_private:
        print(
            "headway: private and loopback addresses are refused; --allow-private (or "
            "HEADWAY_ALLOW_PRIVATE_TARGETS=true) allows them.",
            file=sys.stderr,
        )
    return 0 if outcome.delivered else 1
