"""The client's commands: `headway space create`, `headway task create`, `headway report`.
Each sends one request (a create may be tried again: see `BaseClient`); an error prints
the server's message and exits 1. The client is imported when one of them runs, so that
the server's commands start without it."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from .parsers import add_space, add_url, command_parser, failed

if TYPE_CHECKING:
    from ..client import Client, Task
    from ..client.models import Value

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    create_space = _create_command(
        commands,
        "space",
        "Create a space and print its uuid (the credential: keep it) and its dashboard's "
        "address, or both as JSON with --json.",
        "S=$(headway space create --title 'Nightly builds' --icon 🌙 --json | jq -r .uuid)",
    )
    create_space.add_argument("--title", help="the space's title")
    create_space.add_argument("--icon", help="one character, e.g. an emoji")
    create_space.add_argument("--json", action="store_true", help="print JSON")
    add_url(create_space)
    create_space.set_defaults(handler=_client_command(_space_create))

    create_task = _create_command(
        commands,
        "task",
        "Create a task in a space (a step of --parent if given) and print its uuid.",
        "T=$(headway task create --title Deploy --space $S)",
    )
    create_task.add_argument("--title", help="the task's title")
    create_task.add_argument("--source", help="what is reporting, e.g. a host or a script")
    create_task.add_argument("--parent", help="make the task a step of this task (its uuid)")
    add_space(create_task)
    create_task.add_argument("--json", action="store_true", help='print {"uuid": ...}')
    add_url(create_task)
    create_task.set_defaults(handler=_client_command(_task_create))

    report = command_parser(
        commands,
        "report",
        "report a task's progress",
        "Replace a task's whole state: what is not given is cleared (except with --done "
        "alone, which finishes the task keeping its last numbers). A --value that reads as "
        "a number or true/false is sent as one, anything else as text.",
        "headway report $T --current 3 --end 10 --value host=web-1 --log 'copying assets'",
    )
    report.add_argument("task", metavar="TASK", help="the task's uuid")
    report.add_argument("--current", type=_number, help="how far the task is (a count)")
    report.add_argument("--end", type=_number, help="the count at which it is done")
    report.add_argument(
        "--value",
        action="append",
        type=_value,
        default=[],
        metavar="KEY=VALUE",
        help="an extra value (repeat for several)",
    )
    report.add_argument("--log", help="the latest line of output")
    report.add_argument("--done", action="store_true", help="finish the task")
    add_url(report)
    report.set_defaults(handler=_client_command(_report))


def _create_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    noun: str,
    description: str,
    example: str,
) -> argparse.ArgumentParser:
    """`headway NOUN create`, NOUN's only command."""
    group = commands.add_parser(noun, help=f"create a {noun}")
    nested = group.add_subparsers(dest=f"{noun}_command", required=True, metavar="create")
    return command_parser(nested, "create", f"create a {noun}", description, example)


def _client_command(
    run: Callable[[argparse.Namespace, Client], int],
) -> Callable[[argparse.Namespace], int]:
    """`run` with a client for `--url`; a client error printed, exit status 1."""

    def handler(args: argparse.Namespace) -> int:
        from ..client import Client, HeadwayError

        with Client(args.url) as client:
            try:
                return run(args, client)
            except HeadwayError as exc:
                return failed(f"headway: {exc}")

    return handler


def _space_create(args: argparse.Namespace, client: Client) -> int:
    space = client.create_space(args.title, args.icon)
    assert space.uuid is not None
    url = client.dashboard_url(space.uuid)
    if args.json:
        answer = {"uuid": space.uuid, "title": space.title, "icon": space.icon, "url": url}
        print(json.dumps(answer, ensure_ascii=False))
    else:
        print(space.uuid, url, sep="\n")
    return 0


def _task_create(args: argparse.Namespace, client: Client) -> int:
    uuid = client.create_task(args.title, space=args.space, source=args.source, parent=args.parent)
    print(json.dumps({"uuid": uuid}) if args.json else uuid)
    return 0


def _report(args: argparse.Namespace, client: Client) -> int:
    values = dict(args.value) or None
    task = client.report(
        args.task, args.current, args.end, values=values, log=args.log, done=args.done
    )
    print(describe(task))
    return 0


def describe(task: Task) -> str:
    """One line about a task: `Deploy: 3/10 (30%), finished`."""
    progress = task.progress
    parts = []
    if progress is not None and progress.current is not None:
        count = f"{progress.current:g}"
        if progress.end is not None:
            count += f"/{progress.end:g}"
        parts.append(count)
    if progress is not None and progress.ratio is not None:
        parts.append(f"({progress.ratio:.0%})")
    text = f"{task.title or 'untitled'}: {' '.join(parts) or 'no count'}"
    return text + (", finished" if task.finished else "")


def _number(text: str) -> float:
    if not _NUMBER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    number = float(text)
    return int(number) if number.is_integer() and "e" not in text.lower() else number


def _value(text: str) -> tuple[str, Value]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    value: Value = raw
    if raw in ("true", "false"):
        value = raw == "true"
    elif _NUMBER.fullmatch(raw):
        value = _number(raw)
    return key, value
