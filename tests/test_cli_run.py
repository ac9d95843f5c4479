"""`headway run` as a user runs it, against a real server: output passed through byte for
byte, exit codes passed on, every signal it can catch passed on (real-time ones and job
control included) with the exit status a shell gives, counts read from tqdm's, pip's and
other progress output, a server that is down never holding the command up."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from headway.cli import main
from headway.cli.output import OutputReader, find_count

from .live_server import LiveServer, environment, wait_for
from .servers import free_port
from .test_client import client_blocks

PYTHON = sys.executable


@pytest.fixture
def env(server: LiveServer, served_space: str) -> dict[str, str]:
    return environment(HEADWAY_URL=server.url, HEADWAY_SPACE=served_space)


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], str]:
    """A Python script from its source; returns its path."""

    def write(source: str) -> str:
        path = tmp_path / f"script{len(list(tmp_path.iterdir()))}.py"
        path.write_text(textwrap.dedent(source))
        return str(path)

    return write


def headway_run(
    *args: str, env: dict[str, str], timeout: float = 30
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["headway", "run", "--interval", "0.05", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )


def only_task(server: LiveServer, served_space: str) -> dict:
    [task] = server.space(served_space)["tasks"]
    return task


def test_output_passes_through_byte_for_byte(
    script: Callable[[str], str], env: dict[str, str], server: LiveServer, served_space: str
) -> None:
    noisy = script(
        r"""
        import os, time
        out, err = 1, 2
        os.write(out, b"first line\n")
        os.write(out, b"partial")
        time.sleep(0.05)
        os.write(out, b" then the rest\r\n")
        for i in range(1, 4):
            os.write(err, b"\r%d0%%|" % i + b"#" * i + b"| %d/10" % i)
            time.sleep(0.01)
        os.write(out, b"not utf-8: \xff\xfe\x00 end\n")
        time.sleep(0.05)
        os.write(err, b"\n\x1b[31mred\x1b[0m and no newline")
        """
    )
    direct = subprocess.run([PYTHON, noisy], capture_output=True, env=env, timeout=30)
    relayed = headway_run("--", PYTHON, noisy, env=env)
    assert relayed.returncode == direct.returncode == 0
    assert relayed.stdout == direct.stdout
    assert relayed.stderr == direct.stderr
    task = only_task(server, served_space)
    assert task["title"] == f"{PYTHON} {noisy}"
    assert task["progress"]["values"] == {"exit_code": 0, "log": "red and no newline"}
    assert (task["progress"]["current"], task["progress"]["end"]) == (3, 10)


def test_the_exit_code_is_reported_and_returned(
    script: Callable[[str], str], env: dict[str, str], server: LiveServer, served_space: str
) -> None:
    failing = script(
        """
        import sys
        print("something went wrong")
        sys.exit(3)
        """
    )
    result = headway_run("--title", "Failing job", "--", PYTHON, failing, env=env)
    assert result.returncode == 3
    assert result.stdout == b"something went wrong\n"
    task = only_task(server, served_space)
    assert task["title"] == "Failing job" and task["finished_at"] is not None
    assert task["progress"]["values"] == {
        "exit_code": 3,
        "error": "exit code 3",
        "log": "something went wrong",
    }


@pytest.mark.parametrize(
    ("number", "name"),
    [(signal.SIGKILL, "SIGKILL"), (signal.SIGRTMIN + 3, "SIGRTMIN+3")],
    ids=["SIGKILL", "real-time"],
)
def test_a_command_killed_by_a_signal_is_reported_failed_with_it(
    number: int,
    name: str,
    script: Callable[[str], str],
    env: dict[str, str],
    server: LiveServer,
    served_space: str,
) -> None:
    killed = script(
        f"""
        import os
        print("about to go", flush=True)
        os.kill(os.getpid(), {int(number)})
        """
    )
    result = headway_run("--", PYTHON, killed, env=env)
    assert result.returncode == 128 + number
    assert b"Traceback" not in result.stderr
    task = only_task(server, served_space)
    assert task["finished_at"] is not None
    assert task["progress"]["values"] == {
        "exit_code": 128 + number,
        "signal": name,
        "error": f"killed by signal {int(number)} ({name})",
        "log": "about to go",
    }


def test_a_tqdm_bar_in_the_output_reports_its_count(
    script: Callable[[str], str], env: dict[str, str], server: LiveServer, served_space: str
) -> None:
    training = script(
        """
        from tqdm import tqdm
        for i in tqdm(range(100), desc="training", mininterval=0):
            if i == 45:
                break
        print("stopped early")
        """
    )
    result = headway_run("--", PYTHON, training, env=env)
    assert result.returncode == 0, result.stderr
    assert b" 45/100 [" in result.stderr
    task = only_task(server, served_space)
    assert (task["progress"]["current"], task["progress"]["end"]) == (45, 100)
    assert task["finished_at"] is not None


def test_a_pip_bar_in_the_output_reports_its_count(
    script: Callable[[str], str], env: dict[str, str], server: LiveServer, served_space: str
) -> None:
    download = script(
        """
        import sys
        print("Collecting torch")
        for done in ("3.0", "12.3"):
            sys.stdout.write(f"\\r   ━━━━━━━╸━━━━━━━━━━━━ {done}/45.6 MB 5.0 MB/s eta 0:00:07")
        sys.stdout.write("\\n")
        """
    )
    result = headway_run("--", PYTHON, download, env=env)
    assert result.returncode == 0, result.stderr
    task = only_task(server, served_space)
    assert (task["progress"]["current"], task["progress"]["end"]) == (12.3, 45.6)
    assert task["progress"]["values"]["log"].endswith("12.3/45.6 MB 5.0 MB/s eta 0:00:07")


def test_a_count_at_its_end_does_not_finish_the_task_before_the_command(
    script: Callable[[str], str],
    env: dict[str, str],
    server: LiveServer,
    served_space: str,
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    waiting = script(
        f"""
        import os, time
        print("step 10/10")
        while not os.path.exists({str(release)!r}):
            time.sleep(0.01)
        print("cleaning up")
        """
    )
    command = ["headway", "run", "--interval", "0.05", "--", PYTHON, waiting]

    def reported() -> dict | None:
        """the count 10/10 reported"""
        tasks = server.space(served_space)["tasks"]
        if tasks and (tasks[0]["progress"] or {}).get("values", {}).get("log"):
            return tasks[0]
        return None

    with subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL) as process:
        try:
            running = wait_for(reported)
            assert running["finished_at"] is None
            assert running["progress"]["end"] == 10
            assert 9.99 < running["progress"]["current"] < 10
            release.touch()
            assert process.wait(timeout=30) == 0
        finally:
            process.kill()
    task = only_task(server, served_space)
    assert task["finished_at"] is not None
    assert (task["progress"]["current"], task["progress"]["end"]) == (10, 10)
    assert task["progress"]["values"]["log"] == "cleaning up"


@pytest.mark.parametrize(
    ("sent", "code", "values"),
    [
        (signal.SIGTERM, 7, {"exit_code": 7, "error": "exit code 7", "log": "terminated"}),
        (
            signal.SIGINT,
            130,
            {
                "exit_code": 130,
                "signal": "SIGINT",
                "error": "killed by signal 2 (SIGINT)",
                "log": "KeyboardInterrupt",
            },
        ),
    ],
    ids=["SIGTERM", "SIGINT"],
)
def test_signals_sent_to_headway_run_reach_the_command(
    sent: signal.Signals,
    code: int,
    values: dict,
    script: Callable[[str], str],
    env: dict[str, str],
    server: LiveServer,
    served_space: str,
) -> None:
    patient = script(
        """
        import signal, sys, time
        def stop(signum, frame):
            print("terminated", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(30)
        """
    )
    command = ["headway", "run", "--interval", "0.05", "--", PYTHON, patient]
    with subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == b"ready\n"
            process.send_signal(sent)
            assert process.wait(timeout=10) == code
        finally:
            process.kill()
    task = only_task(server, served_space)
    assert task["finished_at"] is not None
    assert task["progress"]["values"] == values


def test_a_command_that_cannot_run_exits_127(
    env: dict[str, str], server: LiveServer, served_space: str
) -> None:
    result = headway_run("--", "no-such-command-here", env=env)
    assert result.returncode == 127
    assert result.stderr.startswith(b"headway run: cannot run no-such-command-here")
    values = only_task(server, served_space)["progress"]["values"]
    assert values["exit_code"] == 127
    assert (
        values["error"]
        == values["log"]
        == ("cannot run no-such-command-here: No such file or directory")
    )


@pytest.mark.alone  # measures time: run by itself (scripts/test)
def test_a_server_that_is_down_never_holds_up_the_command(script: Callable[[str], str]) -> None:
    quick = script('print("hello")')
    env = environment(HEADWAY_URL=f"http://127.0.0.1:{free_port()}", HEADWAY_SPACE="a" * 8)
    start = time.monotonic()
    result = headway_run("--wait", "0.5", "--", PYTHON, quick, env=env)
    # Only a hang guard: the wait (0.5 s) plus starting two Pythons, against a command held
    # until the server came back (never).
    assert time.monotonic() - start < 0.5 + 20
    assert result.returncode == 0
    assert result.stdout == b"hello\n"
    assert b"did not take a report" in result.stderr


def test_without_a_space_the_command_runs_unreported(
    script: Callable[[str], str], server: LiveServer
) -> None:
    result = headway_run("--", PYTHON, script('print("alone")'), env=environment())
    assert (result.returncode, result.stdout) == (0, b"alone\n")
    assert result.stderr == b"headway run: no space (--space or HEADWAY_SPACE): not reported\n"


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--title", "nothing", "--"]) == 2
    assert "no command given" in capsys.readouterr().err


def test_readme_run_examples_run_as_written(
    tmp_path: Path, env: dict[str, str], server: LiveServer, served_space: str
) -> None:
    backup = tmp_path / "backup.sh"
    backup.write_text('#!/bin/sh\nfor i in 1 2 3; do echo "copied $i of 3"; done\n')
    backup.chmod(0o755)
    [example] = [block for block in client_blocks("sh") if "headway run" in block]
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "copied 1 of 3\ncopied 2 of 3\ncopied 3 of 3\n" * 2
    titled, patterned = server.space(served_space)["tasks"]
    assert titled["title"] == "Nightly backup"
    assert titled["progress"]["values"] == {"exit_code": 0, "log": "copied 3 of 3"}
    assert patterned["title"] == "./backup.sh"
    assert (patterned["progress"]["current"], patterned["progress"]["end"]) == (3, 3)
    assert titled["finished_at"] and patterned["finished_at"]


@pytest.mark.parametrize(
    ("line", "count"),
    [
        (" 45%|████▌     | 45/100 [00:01<00:01, 30.0it/s]", (45, 100)),
        ("train:  67%|██████▋   | 4.50M/6.71M [00:00<00:00, 12.2MB/s]", (4_500_000, 6_710_000)),
        ("   ━━━━━━━━━━━━╸━━━━━━━━━━ 12.3/45.6 MB 5.0 MB/s eta 0:00:07", (12.3, 45.6)),
        ("   ━━━━━━━━━━━━━━━━━━━━━━━ 512.0/512.0 kB 1.2 MB/s eta 0:00:00", (512, 512)),
        ("copied 3 / 7 files", (3, 7)),
        ("[12/40] Building CXX object", (12, 40)),
        ("progress: 37%", (37, 100)),
        ("12.5% done", (12.5, 100)),
        ("backup of 2024/11/22", None),
        ("see src/lib for details", None),
        ("at 12:30/45", None),
        ("version 1.2/3", None),
        ("3/0", None),
        ("150% of the quota", None),
        ("4it [00:00, 3.2it/s]", None),
    ],
)
def test_progress_is_recognised_in_common_output(
    line: str, count: tuple[float, float] | None
) -> None:
    assert find_count(line) == count


def test_a_pattern_reads_named_groups_and_ends_are_optional() -> None:
    import re

    pattern = re.compile(r"row (?P<current>[\d,]+)(?: of (?P<end>[\d,]+))?")
    assert find_count("row 1,200 of 5,000", pattern) == (1200, 5000)
    assert find_count("row 17", pattern) == (17, None)
    assert find_count("45%|██| 45/100", pattern) is None  # the pattern alone decides


def test_lines_split_across_chunks_are_read_whole() -> None:
    reader = OutputReader()
    first = reader.feed(b"starting\n 10%|#  | 1/10\r 20%|")
    assert (first.line, first.current) == ("20%|", 20)
    second = reader.feed(b"##  | 2/10 [00:01]")
    assert (second.line, second.current, second.end) == ("20%|##  | 2/10 [00:01]", 2, 10)
    third = reader.feed(b"\n\x1b[32mdone\x1b[0m\n")
    assert (third.line, third.current, third.end) == ("done", 2, 10)
    assert reader.feed(b"\n\n").line is None


# A command that records each signal it gets (every one it can catch, or those named in
# its second argument) in the file named by its first, and exits with code 3 on those
# named in its third (comma-separated numbers).
RECORDER = """
import os, signal, sys, time

record, handled, exit_on = sys.argv[1], sys.argv[2], sys.argv[3]
handled = None if handled == "all" else {int(n) for n in handled.split(",") if n}
exit_on = {int(n) for n in exit_on.split(",") if n}


def got(number, frame):
    with open(record, "a") as out:
        out.write(f"{number}\\n")
    if number == signal.SIGTSTP:  # as a program that handles Ctrl-Z does
        os.kill(os.getpid(), signal.SIGSTOP)
    if number in exit_on:
        sys.exit(3)


for number in signal.valid_signals():
    if number in (signal.SIGKILL, signal.SIGSTOP):
        continue
    if handled is None or number in handled:
        signal.signal(number, got)
print(f"ready {os.getpid()}", flush=True)
while True:
    time.sleep(1)
"""


def recorded(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def process_state(pid: int) -> str:
    """The state letter of process `pid` (`S` sleeping, `T` stopped...)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def both_states(run_pid: int, command_pid: int) -> tuple[str, str]:
    """The states of `headway run` and of its command (in a failure's message)."""
    return process_state(run_pid), process_state(command_pid)


def recorder_args(
    script: Callable[[str], str], record: Path, handled: str, exit_on: str
) -> list[str]:
    return [PYTHON, script(RECORDER), str(record), handled, exit_on]


def start_recorder(env: dict[str, str], args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """`headway run` of the recorder (`recorder_args`), once the recorder is ready; and
    the recorder's pid."""
    command = ["headway", "run", "--interval", "0.05", "--", *args]
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert process.stdout is not None
    ready = process.stdout.readline().split()
    assert ready[:1] == [b"ready"], ready
    return process, int(ready[1])


def shell_exit_status(args: list[str], number: int, tmp_path: Path) -> int:
    """The status bash gives for the command `args` sent signal `number` once ready."""
    out = tmp_path / "shell.out"
    line = " ".join(shlex.quote(arg) for arg in args)
    program = (
        f"{line} > {out} & pid=$!; "
        f"until grep -q ready {out}; do sleep 0.01; done; "
        f"kill -n {number} $pid; wait $pid; echo $?"
    )
    result = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    return int(result.stdout)


def test_every_signal_headway_run_can_catch_reaches_the_command(
    script: Callable[[str], str],
    env: dict[str, str],
    server: LiveServer,
    served_space: str,
    tmp_path: Path,
) -> None:
    from headway.cli.signals import STOPPING, forwardable

    record = tmp_path / "signals"
    sent = [n for n in forwardable() if n not in STOPPING and n != signal.SIGTERM]
    for expected in (signal.SIGRTMIN + 6, signal.SIGRTMAX, signal.SIGWINCH, signal.SIGCONT):
        assert expected in sent
    args = recorder_args(script, record, "all", str(int(signal.SIGTERM)))
    process, pid = start_recorder(env, args)
    with process:
        try:
            for i, number in enumerate(sent):
                process.send_signal(number)
                wait_for(lambda i=i: len(recorded(record)) > i)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 3
        finally:
            process.kill()
    assert recorded(record) == [*sent, signal.SIGTERM]
    task = only_task(server, served_space)
    assert task["finished_at"] is not None
    assert task["progress"]["values"] == {
        "exit_code": 3,
        "error": "exit code 3",
        "log": f"ready {pid}",
    }


@pytest.mark.parametrize("handled", [True, False], ids=["handled", "not handled"])
def test_a_real_time_signal_reaches_the_command_and_headway_run_exits_as_a_shell_would(
    handled: bool,
    script: Callable[[str], str],
    env: dict[str, str],
    server: LiveServer,
    served_space: str,
    tmp_path: Path,
) -> None:
    number = int(signal.SIGRTMIN + 6)
    record = tmp_path / "signals"
    args = recorder_args(script, record, str(number) if handled else "", str(number))
    process, pid = start_recorder(env, args)
    with process:
        try:
            process.send_signal(number)
            code = process.wait(timeout=10)
        finally:
            process.kill()
    assert recorded(record) == ([number] if handled else [])
    record.unlink(missing_ok=True)
    assert code == shell_exit_status(args, number, tmp_path)
    task = only_task(server, served_space)
    assert task["finished_at"] is not None
    if handled:  # the command recorded it and exited with its code, 3
        assert code == 3
        assert task["progress"]["values"] == {
            "exit_code": 3,
            "error": "exit code 3",
            "log": f"ready {pid}",
        }
    else:  # the signal ended the command: 128 + N
        assert code == 128 + number
        assert task["progress"]["values"] == {
            "exit_code": 128 + number,
            "signal": "SIGRTMIN+6",
            "error": f"killed by signal {number} (SIGRTMIN+6)",
            "log": f"ready {pid}",
        }


@pytest.mark.alone  # measures time: run by itself (scripts/test)
def test_ctrl_z_stops_the_command_and_headway_run_until_sigcont(
    script: Callable[[str], str],
    env: dict[str, str],
    server: LiveServer,
    served_space: str,
    tmp_path: Path,
) -> None:
    record = tmp_path / "signals"
    args = recorder_args(script, record, "all", str(int(signal.SIGTERM)))
    process, pid = start_recorder(env, args)
    with process:
        try:
            process.send_signal(signal.SIGTSTP)
            wait_for(lambda: both_states(process.pid, pid) == ("T", "T"), timeout=15)
            process.send_signal(signal.SIGCONT)
            try:
                wait_for(lambda: "T" not in both_states(process.pid, pid), timeout=15)
            except pytest.fail.Exception:
                states = both_states(process.pid, pid)
                pytest.fail(f"after SIGCONT, (headway run, the command) are {states}")
            wait_for(lambda: recorded(record) == [signal.SIGTSTP, signal.SIGCONT])
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 3
        finally:
            process.kill()
    assert only_task(server, served_space)["finished_at"] is not None


def test_steps_run_under_a_parent_that_reported_leave_it_open_until_its_done(
    server: LiveServer, served_space: str, env: dict[str, str]
) -> None:
    """A shell job: a parent that reported that it started, each step a `headway run`;
    the parent finishes when the job says so, not when its first (or last) step ends."""

    def headway(*args: str) -> str:
        done = subprocess.run(["headway", *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    parent = headway("task", "create", "--title", "Deploy")
    headway("report", parent, "--log", "starting")
    for step in ("build", "release"):
        ran = headway_run("--parent", parent, "--title", step, "--", PYTHON, "-c", "", env=env)
        assert ran.returncode == 0, ran.stderr
        family = server.task(parent)
        assert family["finished_at"] is None
        assert all(child["finished_at"] for child in family["children"])
    headway("report", parent, "--done")
    family = server.task(parent)
    assert family["finished_at"] >= max(child["finished_at"] for child in family["children"])
