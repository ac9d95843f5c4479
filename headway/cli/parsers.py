"""How every subcommand's parser is built: a help text with an example, and the shared
`--url` and `--space` options with their environment defaults."""

from __future__ import annotations

import argparse


def command_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str,
    example: str,
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` reads: usage, description, options, then examples."""
    return commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="the Headway server (default: HEADWAY_URL, else http://127.0.0.1:8000)",
    )


def add_space(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--space", help="the space's uuid (default: HEADWAY_SPACE)")
