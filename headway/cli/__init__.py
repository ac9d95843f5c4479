"""The `headway` command: the server's commands (`serve`, `worker`, `migrate`), the
client's (`space create`, `task create`, `report`, `run`), `watch`, `badge` and
`channels test`.
Each group lives in its own module; server modules are imported only when a server
command runs."""

from __future__ import annotations

import argparse

from .. import __version__
from . import badge, channels, client, run, server, watch
from .parsers import installed

DESCRIPTION = """\
Headway: progress reporting for scripts, jobs, devices and agents, over plain HTTP.
Client commands talk to HEADWAY_URL (default http://127.0.0.1:8000) or --url, in the
space HEADWAY_SPACE or --space. `headway COMMAND --help` shows each command's options."""

# `headway serve` leads them where the server is installed.
EXAMPLES = (
    "export HEADWAY_SPACE=$(headway space create --title Nightly --json | jq -r .uuid)",
    "headway run --title 'Backup' -- ./backup.sh",
    "headway watch",
)


def parser() -> argparse.ArgumentParser:
    """The whole command line; server commands are named only where the server is
    installed (see `server.SERVER_MODULES`)."""
    examples = (*(["headway serve"] if installed(*server.SERVER_MODULES) else []), *EXAMPLES)
    root = argparse.ArgumentParser(
        prog="headway",
        description=DESCRIPTION,
        epilog="examples:\n" + "\n".join(f"  {line}" for line in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--version", action="version", version=f"headway {__version__}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (server, client, run, watch, badge, channels):
        group.add_commands(commands)
    return root


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = parser().parse_args(argv)
    status: int = args.handler(args)
    return status
