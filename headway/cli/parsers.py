"""How every subcommand's parser is built: a help text with an example, and the shared
`--url` and `--space` options with their environment defaults; a command whose packages
are not installed (`installed`) is parsed but left out of the help."""

from __future__ import annotations

import argparse
import importlib.util
import sys


def command_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str,
    example: str,
    *,
    listed: bool = True,
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` reads: usage, description, options, then examples;
    named in its parent's help only if `listed` (it still runs, to say what it needs)."""
    return commands.add_parser(
        name,
        **({"help": summary} if listed else {}),
        description=description,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", help="the Headway server (default: HEADWAY_URL, else http://127.0.0.1:8000)"
    )


def add_space(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--space", help="the space's uuid (default: HEADWAY_SPACE)")


def failed(message: str, status: int = 1) -> int:
    """Print `message` on stderr; returns `status`, the command's exit status."""
    print(message, file=sys.stderr)
    return status


def installed(*modules: str) -> bool:
    """Whether every one of `modules` can be imported, told without importing them. A
    module whose finder refuses it counts as missing."""
    try:
        return all(importlib.util.find_spec(module) is not None for module in modules)
    except (ImportError, ValueError):
        return False
