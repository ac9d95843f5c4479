"""`headway run -- COMMAND`: run a command under a new task. Its output passes through
unchanged while its latest line (and the count it shows) is reported; its exit code is
reported and becomes `headway run`'s own."""

from __future__ import annotations

import argparse
import math
import os
import re
import selectors
import shlex
import subprocess
import sys
from typing import TYPE_CHECKING

from .output import OutputReader
from .parsers import add_space, add_url, command_parser, failed
from .signals import Forwarding, signal_name

if TYPE_CHECKING:
    from ..client import Client, Reporter

CHUNK = 65_536

DESCRIPTION = """\
Run COMMAND under a new task. Its standard output and error pass through byte for byte;
its latest line is reported as `log` (at most every --interval seconds), with a count when
the line shows one: --pattern's named groups `current` and `end`, or tqdm's or pip's bar,
`N/M`, `NN%`. While the command runs, a count at its end is reported just below it, so that
the task finishes when the command does. Then the task is finished, whatever the exit
code, with `exit_code` (and `signal`, if a signal ended the command) in its values, and
`headway run` exits with that code. A non-zero code also sets `error` (`exit code 3`,
`killed by signal 9 (SIGKILL)`), which shows the task as failed. Every signal sent to
`headway run` that it can catch (real-time signals included) is passed on to the command;
Ctrl-C in a terminal reaches the command directly; Ctrl-Z (SIGTSTP) stops both until
SIGCONT. Reporting never holds the command up: creating the task is retried with one
Idempotency-Key, and a server that does not answer gets --wait seconds at the end, then
is given up (with one warning naming what was lost).
Python commands run with PYTHONUNBUFFERED=1 (unless set) so that their lines arrive live."""


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = command_parser(
        commands,
        "run",
        "run a command under a new task",
        DESCRIPTION,
        "headway run --title 'Nightly backup' -- rsync -a --info=progress2 /data backup:/data",
    )
    run.add_argument("--title", help="the task's title (default: the command line)")
    run.add_argument("--source", help="what is reporting, e.g. a host or a job's name")
    run.add_argument("--parent", help="make the task a step of this task (its uuid)")
    run.add_argument(
        "--pattern",
        type=_pattern,
        help="a regular expression with named groups `current` and `end` to read counts",
    )
    add_space(run)
    add_url(run)
    run.add_argument(
        "--interval",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="at most one report every SECONDS (default 0.5)",
    )
    run.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long to wait at the end for reports to reach the server "
        "(default: HEADWAY_FLUSH_TIMEOUT, else 10)",
    )
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    run.set_defaults(handler=run_command)


def _pattern(text: str) -> re.Pattern[str]:
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None
    if "current" not in pattern.groupindex:
        raise argparse.ArgumentTypeError("the pattern needs a named group: (?P<current>...)")
    return pattern


def run_command(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        return failed("headway run: no command given: headway run [options] -- COMMAND", 2)
    # From the start to the last report: a signal that comes before the command runs is
    # passed on once it does, one that comes while reports are sent at the end is harmless.
    with Forwarding() as forwarding:
        return _run(args, command, forwarding)


def _run(args: argparse.Namespace, command: list[str], forwarding: Forwarding) -> int:
    from ..client import Client

    client = Client(args.url, space=args.space, min_interval=args.interval, exit_timeout=args.wait)
    reporter = None
    if client.space or args.parent:
        reporter = client.reporter(
            title=args.title or shlex.join(command), source=args.source, parent=args.parent
        )
        reporter.report()
    else:
        print("headway run: no space (--space or HEADWAY_SPACE): not reported", file=sys.stderr)
    env = {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1")}
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        message = f"cannot run {command[0]}: {exc.strerror}"
        print(f"headway run: {message}", file=sys.stderr)
        if reporter is not None:
            reporter.finish(values={"exit_code": code, "error": message}, log=message)
        client.close()
        return code
    forwarding.start(child)
    relay = Relay(reporter, args.pattern)
    relay.pass_through(child)
    returncode = child.wait()
    return _finish(client, reporter, relay, returncode)


def _finish(client: Client, reporter: Reporter | None, relay: Relay, returncode: int) -> int:
    """Report how the command ended, send what is pending (bounded), and answer the exit
    status a shell gives: the command's code, or 128 + N when signal N ended it."""
    if reporter is not None:
        relay.report(final=True)
        reporter.finish(values=exit_values(returncode))
    client.close()
    return returncode if returncode >= 0 else 128 - returncode


def exit_values(returncode: int) -> dict[str, str | int]:
    """The values that report how the command ended (`Popen.returncode`: negative when a
    signal ended it): `exit_code` as a shell shows it, and for a signal its name; `error`
    when the command failed, so that the task shows as failed."""
    if returncode == 0:
        return {"exit_code": 0}
    if returncode > 0:
        return {"exit_code": returncode, "error": f"exit code {returncode}"}
    name = signal_name(-returncode)
    return {
        "exit_code": 128 - returncode,
        "signal": name,
        "error": f"killed by signal {-returncode} ({name})",
    }


class Relay:
    """Passes a command's output through and reports what it shows."""

    def __init__(self, reporter: Reporter | None, pattern: re.Pattern[str] | None) -> None:
        self.reporter = reporter
        self.readers = {1: OutputReader(pattern), 2: OutputReader(pattern)}
        self.line: str | None = None
        self.count: tuple[float, float | None] | None = None

    def pass_through(self, child: subprocess.Popen[bytes]) -> None:
        """Copy the child's stdout and stderr to ours until both end."""
        assert child.stdout is not None and child.stderr is not None
        pipes = {child.stdout.fileno(): (child.stdout, 1), child.stderr.fileno(): (child.stderr, 2)}
        with selectors.DefaultSelector() as selector:
            for fd in pipes:
                selector.register(fd, selectors.EVENT_READ)
            while pipes:
                for key, _ in selector.select():
                    pipe, target = pipes[key.fd]
                    data = os.read(key.fd, CHUNK)
                    if data:
                        try:
                            _write_all(target, data)
                        except BrokenPipeError:
                            data = b""  # our reader left: let the command find out too
                    if not data:
                        selector.unregister(key.fd)
                        pipe.close()
                        del pipes[key.fd]
                        continue
                    self.read(target, data)

    def read(self, target: int, data: bytes) -> None:
        reading = self.readers[target].feed(data)
        if reading.line is not None:
            self.line = reading.line
        if reading.current is not None:
            self.count = (reading.current, reading.end)
        self.report()

    def report(self, *, final: bool = False) -> None:
        if self.reporter is None:
            return
        current, end = self.count or (None, None)
        if not final and current is not None and end and current >= end > 0:
            current = math.nextafter(end, 0)  # reaching `end` would finish the task
        self.reporter.report(current, end, log=self.line)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
