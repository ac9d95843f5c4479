"""The signals `headway run` passes on to its command: every one it can catch, real-time
signals included, handled so that none ever ends `headway run` itself; and their names
(`SIGTERM`, `SIGRTMIN+6`), made without `signal.Signals(n)`, which raises for real-time
signals."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from types import FrameType
from typing import Any


def _numbers(names: str) -> frozenset[int]:
    """The numbers of the signals named (space-separated) that this system has."""
    return frozenset(int(getattr(signal, name)) for name in names.split() if hasattr(signal, name))


# Signals left alone: those no process can catch, the news of the command's own end
# (SIGCHLD), faults of `headway run` itself (a handler would run after the fault, over
# and over), and those Python ignores so that a write fails instead (SIGPIPE, SIGXFSZ).
LEFT_ALONE = _numbers(
    "SIGKILL SIGSTOP SIGCHLD SIGSEGV SIGBUS SIGFPE SIGILL SIGTRAP SIGSYS SIGABRT SIGPIPE SIGXFSZ"
)
# Job control: passed on, then `headway run` stops too (as a shell expects of the job it
# stopped) until a SIGCONT, which it passes on in turn.
STOPPING = _numbers("SIGTSTP SIGTTIN SIGTTOU")
# What the keyboard sends to a terminal's whole foreground process group, command included.
KEYBOARD = frozenset({int(signal.SIGINT), int(signal.SIGQUIT), int(signal.SIGTSTP)})


def forwardable() -> list[int]:
    """The numbers of every signal passed on, in order: all this system has but LEFT_ALONE."""
    return sorted(int(number) for number in signal.valid_signals() if number not in LEFT_ALONE)


def signal_name(number: int) -> str:
    """`SIGTERM`; a real-time signal, which has no name of its own, as `SIGRTMIN+3`
    (`SIGRTMIN` and `SIGRTMAX` are names); a number this system does not know as `SIG99`."""
    try:
        return signal.Signals(number).name
    except ValueError:
        low = getattr(signal, "SIGRTMIN", None)
        if low is not None and low < number <= signal.SIGRTMAX:
            return f"SIGRTMIN+{number - low}"
        return f"SIG{number}"


class Forwarding:
    """While in its block, every signal `headway run` can catch is passed on to the command:
    `start(child)` names it once it runs, and signals that came before are passed on then.
    When `headway run` is in its terminal's foreground, the keyboard's signals (Ctrl-C,
    Ctrl-\\, Ctrl-Z) reach the command directly and are not sent a second time. A handler
    never raises: a signal never ends `headway run`, which goes on waiting for the
    command and exits as it did. The previous handlers are back on leaving the block."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self._keyboard = _in_terminal_foreground()
        self._before: list[int] = []  # arrived before the command ran
        self._previous: dict[int, Any] = {}  # the handlers replaced

    def __enter__(self) -> Forwarding:
        for number in forwardable():
            try:
                self._previous[number] = signal.signal(number, self._handle)
            except (OSError, ValueError, RuntimeError):  # refused here: left as it was
                continue
        return self

    def start(self, child: subprocess.Popen[bytes]) -> None:
        """Pass signals on to `child` from now on, those that came before first."""
        self.child = child
        before, self._before = self._before, []
        for number in before:
            self._send(number)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        try:
            if not (self._keyboard and number in KEYBOARD):
                if self.child is None:
                    self._before.append(number)
                else:
                    self._send(number)
            if number in STOPPING:
                os.kill(os.getpid(), signal.SIGSTOP)
        except Exception:  # a signal must never end `headway run`
            pass

    def _send(self, number: int) -> None:
        assert self.child is not None
        with contextlib.suppress(OSError):  # it ended meanwhile: nothing to pass on
            self.child.send_signal(number)

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            with contextlib.suppress(OSError, ValueError, RuntimeError, TypeError):
                signal.signal(number, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()


def _in_terminal_foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError):
        return False
