"""`headway watch`: the live stream read and followed across drops, the board drawn from
it (rich's recording console), and the command itself on a real server's stream, for a
space and for a share link, as docs/client.md shows it."""

from __future__ import annotations

import http.server
import json
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from headway import Client
from headway.cli.board import Board, render
from headway.cli.watch import stream_url
from headway.client import APIError
from headway.client.events import RECONNECTING, Event, follow, parse_events

from .live_server import LiveServer, environment
from .servers import free_port
from .test_client import client_blocks

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def task_json(
    key: str,
    title: str,
    *,
    parent: str | None = None,
    current: float | None = None,
    end: float | None = None,
    values: dict | None = None,
    updated: float = 1.0,
    finished: bool = False,
    duration: int | None = None,
    share: bool = False,
    created: float | None = None,
) -> dict:
    """A task as the stream sends it (`share`: as a share link's stream does), created
    `created` seconds ago (by default, a finished one its `duration` before it finished)."""
    ran = duration if finished and duration is not None else 600
    progress = None
    if current is not None or finished:
        ratio = 1 if finished else (min(current / end, 1) if current is not None and end else None)
        progress = {
            "current": current,
            "end": end,
            "ratio": ratio,
            "values": values or {},
            "updated_at": stamp(updated),
            "aggregated": False,
        }
    names = {"id": key, "parent_id": parent} if share else {
        "uuid": key,
        "space_uuid": "s",
        "parent_uuid": parent,
    }  # fmt: skip
    return {
        **names,
        "title": title,
        "source": None,
        "created_at": stamp(created if created is not None else ran),
        "finished_at": stamp(0) if finished else None,
        "duration": duration if finished else None,
        "progress": progress,
        "children": [],
    }


def snapshot(*tasks: dict, title: str = "Nightly", icon: str | None = "🌙") -> Event:
    return Event("snapshot", json.dumps({"title": title, "icon": icon, "tasks": list(tasks)}))


def drawn(board: Board, now: datetime = NOW, width: int = 150) -> list[str]:
    console = Console(record=True, width=width, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(board, now))
    console.file.close()
    return [line.rstrip() for line in console.export_text().splitlines()]


def row(lines: list[str], title: str) -> str:
    [line] = [line for line in lines if re.search(rf"\s{re.escape(title)}(\s|$)", line)]
    return line


def test_parse_events_reads_fields_joins_data_and_skips_comments() -> None:
    lines = [
        "retry: 2000",
        "id: 0",
        "event: snapshot",
        'data: {"a":',
        "data:1}",
        "",
        ": keep-alive",
        "",
        "id: 1",
        "event: task",
        "data: {}",
        "",
        "data: no event name",
        "",
    ]
    assert list(parse_events(lines)) == [
        Event("snapshot", '{"a":\n1}', "0"),
        Event("task", "{}", "1"),
        Event("message", "no event name", "1"),
    ]


@pytest.mark.parametrize(
    ("target", "url"),
    [
        ("ab12", "http://h:1/spaces/ab12/events"),
        ("http://other/spaces/ab12", "http://other/spaces/ab12/events"),
        ("https://other/prefix/spaces/ab12/", "https://other/prefix/spaces/ab12/events"),
        ("http://other/shared/Xy_9", "http://other/shared/Xy_9/events"),
    ],
)
def test_a_space_an_address_or_a_share_link_names_its_stream(target: str, url: str) -> None:
    assert stream_url(target, "http://h:1/") == url


def test_stream_options_go_in_the_query_and_other_addresses_are_refused() -> None:
    assert stream_url("ab", "http://h", limit=5, state="active") == (
        "http://h/spaces/ab/events?limit=5&state=active"
    )
    with pytest.raises(ValueError, match="neither"):
        stream_url("http://other/tasks/ab12", "http://h")


def test_the_board_draws_bars_steps_counts_rates_ages_and_marks() -> None:
    board = Board()
    parent = task_json("p", "Deploy", current=1, end=2)
    parent["progress"]["aggregated"] = True
    parent["children"] = [
        task_json("c1", "Build", parent="p", finished=True, current=5, end=5, duration=75),
        task_json("c2", "Upload", parent="p", current=45, end=100, updated=2,
                  values={"rate": 5.0, "unit": "files", "log": "sending chunk 45"}),
    ]  # fmt: skip
    board.apply(
        snapshot(
            parent,
            task_json(
                "f",
                "Backup",
                finished=True,
                current=3,
                end=10,
                duration=4000,
                values={"exit_code": 2, "error": "exit code 2", "log": "rsync: error"},
            ),
            task_json("n", "Counting", current=12, updated=30),
            task_json("w", "Waiting", created=30),
        )
    )
    lines = drawn(board)
    assert lines[0].strip() == "🌙 Nightly"
    assert "live · 6 tasks · 1 failed ·" in lines[-1]
    titles = ("Waiting", "Counting", "Deploy", "Build", "Upload", "Backup")  # newest first
    assert [lines.index(row(lines, title)) for title in titles] == list(range(2, 8))
    assert re.search(r"^…\s+Deploy\s.*50%\s+1/2", row(lines, "Deploy"))
    assert re.search(r"^✓\s{4}Build\s.*100%\s+5/5\s+took 1 min 15 s", row(lines, "Build"))
    upload = row(lines, "Upload")
    said = r"^…\s{4}Upload\s.*45%\s+45/100\s+5 files/s\s+about 11 s\s+2\.0 s ago\s+sending"
    assert re.search(said, upload)
    backup = row(lines, "Backup")
    assert re.search(r"^✗\s+Backup\s.*30%\s+3/10\s+took 1 h 6 min.*\sexit code 2$", backup)
    assert re.search(r"^…\s+Counting\s.*\s12\s+30 s ago$", row(lines, "Counting"))
    assert re.search(r"^…\s+Waiting\s+waiting$", row(lines, "Waiting"))  # nothing reported yet


def test_a_failed_task_is_marked_with_how_it_failed_and_its_parent_names_it() -> None:
    board = Board()
    parent = task_json("p", "Deploy", current=1, end=3)
    parent["progress"]["aggregated"] = True
    parent["children"] = [
        task_json("c1", "Build image", parent="p", finished=True, current=1, end=1),
        task_json("c2", "Run migrations", parent="p", current=2, end=5,
                  values={"log": "migrating", "error": "retrying"}),  # active: not failed
        task_json("c3", "Switch traffic", parent="p"),
    ]  # fmt: skip
    board.apply(
        snapshot(
            parent,
            task_json("z", "Exit code only", finished=True, values={"exit_code": 1}),
            task_json("e", "Empty error", finished=True, values={"error": "", "log": "fine"}),
        )
    )
    lines = drawn(board)
    assert re.search(r"^…\s{4}Run migrations\s.*migrating$", row(lines, "Run migrations"))
    assert re.search(r"^✓\s+Exit code only\s", row(lines, "Exit code only"))  # only error decides
    assert re.search(r"^✓\s+Empty error\s.*fine$", row(lines, "Empty error"))
    assert "failed" not in lines[-1]

    failed = task_json(
        "c2",
        "Run migrations",
        parent="p",
        finished=True,
        current=2,
        end=5,
        values={"exit_code": 3, "error": "exit code 3", "log": "no such table"},
    )
    board.apply(Event("task", json.dumps(failed)))
    for step in ("c3", "p"):  # the last step finishes, then its parent (an event of its own)
        title = "Switch traffic" if step == "c3" else "Deploy"
        done = task_json(
            step,
            title,
            parent="p" if step == "c3" else None,
            finished=True,
            current=3 if step == "p" else None,
            end=3 if step == "p" else None,
        )
        board.apply(Event("task", json.dumps(done)))
    lines = drawn(board)
    assert re.search(r"^✗\s{4}Run migrations\s.*\sexit code 3$", row(lines, "Run migrations"))
    assert re.search(r"^✓\s{4}Switch traffic\s", row(lines, "Switch traffic"))
    assert re.search(
        r"^✗\s+Deploy\s.*\s1 of 3 steps failed \(Run migrations: exit code 3\)$",
        row(lines, "Deploy"),
    )
    assert "· 1 failed ·" in lines[-1]


def test_a_finished_row_says_its_length_to_the_microsecond() -> None:
    board = Board()
    quick = {**task_json("q", "Quick", finished=True, duration=1), "created_at": stamp(1.94)}
    second = {**task_json("s", "Second", finished=True, duration=0), "created_at": stamp(0.999)}
    board.apply(snapshot(quick, second))
    lines = drawn(board)
    assert re.search(r"\stook 1\.9 s\s", row(lines, "Quick"))
    assert re.search(r"\stook 1\.0 s\s", row(lines, "Second"))


def test_task_events_update_rows_add_tasks_and_steps_and_measure_rates() -> None:
    board = Board()
    board.apply(snapshot(task_json("t", "Copy", current=10, end=100, updated=10)))
    board.apply(Event("task", json.dumps(task_json("t", "Copy", current=30, end=100, updated=0))))
    board.apply(Event("task", json.dumps(task_json("u", "Later"))))
    board.apply(Event("task", json.dumps(task_json("s", "Its step", parent="u", current=1))))
    lines = drawn(board)
    # 20 more in 10 s: 2 a second, 35 s to go for the 70 left.
    assert re.search(r"Copy\s.*30%\s+30/100\s+2 /s\s+about 35 s\s+just now", row(lines, "Copy"))
    assert lines.index(row(lines, "Its step")) == lines.index(row(lines, "Later")) + 1
    assert "3 tasks" in lines[-1]

    board.apply(Event(RECONNECTING, "the stream ended"))
    assert "reconnecting: the stream ended" in drawn(board)[-1]
    board.apply(snapshot(task_json("t", "Copy", current=40, end=100, updated=0), title="Again"))
    again = drawn(board)
    assert again[0].strip() == "🌙 Again" and "live · 1 task ·" in again[-1]


def test_the_servers_estimate_gives_the_time_left_counted_down_and_late() -> None:
    """`event: estimates` (the server's, from every report it received and the job's
    usual duration) is shown at once, counted down, where the board alone knows none."""
    board = Board()
    board.apply(snapshot(task_json("t", "Copy", current=30, end=100, updated=5)))
    estimate = {"rate_per_s": 0.5, "remaining_s": 300.0, "late": False, "usual": None}
    board.apply(Event("estimates", json.dumps({"t": estimate})), now=NOW)
    assert re.search(r"30/100\s+0\.5 /s\s+5 min\s", row(drawn(board), "Copy"))
    later = NOW + timedelta(seconds=150)
    assert re.search(r"\s3 min\s", row(drawn(board, later), "Copy"))  # 150 s on: 2.5 min
    late = {**estimate, "remaining_s": 30.0, "late": True}
    board.apply(Event("estimates", json.dumps({"t": late, "gone": late})), now=NOW)
    assert re.search(r"\slate · about 30 s\s", row(drawn(board), "Copy"))
    assert re.search(
        r"\slate · about 20 s\s", row(drawn(board, NOW + timedelta(seconds=10)), "Copy")
    )


def wide_board() -> Board:
    """A board whose titles and log lines are longer than a terminal is wide."""
    board = Board()
    parent = task_json(
        "p",
        "Deploy the whole application to production, region by region",
        current=1,
        end=2,
        created=900,
    )
    parent["progress"]["aggregated"] = True
    parent["children"] = [
        task_json("c1", "Build", parent="p", finished=True, current=5, end=5, duration=75),
        task_json("c2", "Upload", parent="p", current=45, end=100, updated=2,
                  values={"rate": 5.0, "unit": "files", "log": "sending chunk 45 " * 8}),
    ]  # fmt: skip
    failed = {"exit_code": 2, "error": "exit code 2", "log": "rsync: error"}
    board.apply(
        snapshot(
            parent,
            task_json("f", "Backup", finished=True, current=3, end=10, duration=4000,
                      values=failed, created=800),
            task_json("n", "Counting", current=12, updated=30, created=700),
        )
    )  # fmt: skip
    return board


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_board_fits_the_terminal_keeping_marks_and_percents(width: int) -> None:
    lines = drawn(wide_board(), width=width)
    assert all(len(line) <= width for line in lines)
    assert re.search(r"^…\s+Deploy the\s.*…\s.*\s50%(\s|$)", row(lines, "Deploy"))
    assert re.search(r"^✓\s{4}Build\s.*\s100%(\s|$)", row(lines, "Build"))
    assert re.search(r"^…\s{4}Upload\s.*\s45%(\s|$)", row(lines, "Upload"))
    assert re.search(r"^✗\s+Backup\s.*\s30%(\s|$)", row(lines, "Backup"))  # failed at 3/10
    assert re.search(r"^…\s+Counting\s.*\s12(\s|$)", row(lines, "Counting"))
    headers = lines[1].split()
    assert headers[0] == "task" and "log" in headers  # the log is cut, not dropped
    assert "sending chunk 45 sending" in row(lines, "Upload") or row(lines, "Upload").endswith("…")
    if width >= 100:
        assert "━" in row(lines, "Build") and "count" in headers and "left" in headers
    if width >= 160:
        assert headers == ["task", "progress", "count", "rate", "left", "updated", "log"]
        assert re.search(
            r"45%\s+45/100\s+5 files/s\s+about 11 s\s+2\.0 s ago\s+sending", row(lines, "Upload")
        )


def test_the_board_lists_newest_first_and_says_waiting_and_stalled() -> None:
    board = Board()
    stuck = task_json("c", "Stuck", current=2, end=4, updated=700, created=800)
    board.apply(
        snapshot(task_json("a", "Oldest", created=900), task_json("b", "Newer", created=60), stuck)
    )
    board.apply(Event("task", json.dumps(task_json("d", "Just created", created=1))))
    lines = drawn(board, width=80)
    titles = ("Just created", "Newer", "Stuck", "Oldest")
    assert [lines.index(row(lines, title)) for title in titles] == list(range(2, 6))
    assert re.search(r"^…\s+Newer\s+waiting$", row(lines, "Newer"))
    assert re.search(r"^…\s+Just created\s+waiting$", row(lines, "Just created"))
    assert re.search(r"^…\s+Oldest\s+stalled$", row(lines, "Oldest"))  # silent since 15 min
    assert re.search(r"^…\s+Stuck\s.*50% stalled\s+2/4\s+11 min 40 s ago$", row(lines, "Stuck"))
    assert "live · 4 tasks ·" in lines[-1]


def test_the_board_draws_a_share_links_tasks() -> None:
    board = Board()
    parent = task_json("Xy", "Shared job", share=True, current=0, end=1)
    parent["children"] = [task_json("Zz", "Shared step", parent="Xy", share=True, current=2, end=4)]
    board.apply(snapshot(parent, icon=None))
    board.apply(
        Event("task", json.dumps(task_json("Zz", "Shared step", parent="Xy", share=True,
                                           finished=True, current=4, end=4, duration=3)))
    )  # fmt: skip
    lines = drawn(board)
    assert lines[0].strip() == "Nightly"
    assert re.search(r"^✓\s{4}Shared step\s.*100%\s+4/4", row(lines, "Shared step"))


@dataclass(frozen=True)
class Refusal:
    """An answer a stream's request may get instead of the stream, the way Headway refuses
    (a JSON error, with `retry_after` as its Retry-After if given)."""

    status: int
    retry_after: str | None = None


class StreamServer:
    """A stand-in for the live stream on `port`: each connection gets the next script of
    events (then the connection ends, or, with `hold`, stays open until the server stops)
    or the next refusal, or a 404 once none is left. `arrivals` holds when each request
    came (time.monotonic())."""

    def __init__(
        self, scripts: list[list[bytes] | Refusal], port: int | None = None, *, hold: bool = False
    ) -> None:
        self.scripts = scripts
        self.hold = hold
        self.stopping = threading.Event()
        self.connections = 0
        self.arrivals: list[float] = []
        self.port = port or free_port()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                owner.arrivals.append(time.monotonic())
                owner.connections += 1
                script = owner.scripts.pop(0) if owner.scripts else Refusal(404)
                if isinstance(script, Refusal):
                    message = "No such space." if script.status == 404 else "Refused."
                    body = json.dumps({"error": message}).encode()
                    self.send_response(script.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    if script.retry_after is not None:
                        self.send_header("retry-after", script.retry_after)
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in script:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                if owner.hold:
                    owner.stopping.wait()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)

    def __enter__(self) -> StreamServer:
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def test_follow_reconnects_when_the_stream_drops_and_stops_on_a_404() -> None:
    first = [b"retry: 2000\n", b"id: 0\nevent: snapshot\n", b'data: {"title":"one"}\n\n']
    second = [b": keep-alive\n", b'id: 0\nevent: snapshot\ndata: {"title":"two"}\n\n']
    with StreamServer([first, second]) as server:
        events = follow(f"http://127.0.0.1:{server.port}/spaces/s/events", backoff=(0.01, 0.05))
        assert next(events) == Event("snapshot", '{"title":"one"}', "0")
        assert next(events) == Event(RECONNECTING, "the stream ended", retry_in=0.01)
        assert next(events) == Event("snapshot", '{"title":"two"}', "0")
        assert next(events).event == RECONNECTING
        with pytest.raises(APIError) as gone:
            next(events)
        assert (gone.value.status, gone.value.message) == (404, "No such space.")
        assert server.connections == 3


def test_follow_waits_out_a_server_that_is_down() -> None:
    port = free_port()
    events = follow(f"http://127.0.0.1:{port}/spaces/s/events", backoff=(0.01, 0.05))
    assert next(events).event == RECONNECTING
    assert next(events).event == RECONNECTING
    with StreamServer([[b'event: snapshot\ndata: {"title":"up"}\n\n']], port=port):
        found = next(event for event in events if event.event != RECONNECTING)
    assert found == Event("snapshot", '{"title":"up"}')


ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")


class Terminal:
    """A command whose output rich takes for a terminal's (it redraws in place), and the
    text it drew."""

    def __init__(self, command: str, env: dict[str, str]) -> None:
        # A terminal that can redraw: rich draws a live display only at its end on a
        # "dumb" one, and the machine's own TERM may say so (a chroot's, CI's).
        terminal = {
            "TTY_COMPATIBLE": "1",
            "TTY_INTERACTIVE": "1",
            "COLUMNS": "150",
            "TERM": "xterm-256color",
        }
        self.process = subprocess.Popen(
            ["bash", "-c", command],
            env={**env, **terminal},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.output = b""

    def wait_for(self, pattern: str, timeout: float = 10.0) -> None:
        """Read until the text drawn so far matches `pattern` (a regular expression)."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text, flags=re.MULTILINE):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"never drawn: {pattern!r} in:\n{self.text[-3000:]}"
            ready, _, _ = select.select([self.process.stdout], [], [], remaining)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                assert chunk, f"exited with {self.process.wait()}:\n{self.text[-3000:]}"
                self.output += chunk

    @property
    def text(self) -> str:
        return ESCAPE.sub("", self.output.decode("utf-8", "replace"))

    def interrupt(self) -> int:
        """Ctrl-C; the exit status."""
        self.process.send_signal(signal.SIGINT)
        assert self.process.stdout is not None
        self.output += self.process.stdout.read()
        return self.process.wait(timeout=10)

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def test_readme_watch_examples_show_a_space_and_a_share_link_live(
    server: LiveServer, terminals: list[Terminal]
) -> None:
    space = server.new_space("Nightly jobs")
    share = httpx.post(f"{server.url}/spaces/{space}/shares", json={}, timeout=10).json()
    env = environment(
        HEADWAY_URL=server.url, HEADWAY_SPACE=space, SHARE_LINK=f"{server.url}{share['url']}"
    )
    [example] = [block for block in client_blocks("sh") if "headway watch" in block]
    lines = example.strip().splitlines()
    assert len(lines) == 2
    with Client(server.url, space=space) as client:
        deploy = client.create_task("Deploy")
        build = client.create_task("Build", parent=deploy)
        client.report(build, 3, 10, log="compiling")
        for round_, line in enumerate(lines):
            terminal = Terminal(line, env)
            terminals.append(terminal)
            terminal.wait_for(r"Nightly jobs")
            terminal.wait_for(r"^…\s+Deploy\s")
            terminal.wait_for(rf"^…\s+Build\s.*{3 + round_}0%\s+{3 + round_}/10\s.*compiling")
            client.report(build, 4 + round_, 10, log="compiling")
            terminal.wait_for(rf"{4 + round_}/10")
        client.report(build, 10, 10, log="linked")  # the last step: Deploy finishes too
        terminal.wait_for(r"^✓\s+Deploy\s.*100%")
        terminal.wait_for(r"^✓\s+Build\s.*100%\s+10/10.*linked")
        assert [terminal.interrupt() for terminal in terminals] == [0, 0]


def test_watch_follows_reports_as_they_come(server: LiveServer, terminals: list[Terminal]) -> None:
    space = server.new_space("Live")
    terminal = Terminal(f"headway watch {server.url}/spaces/{space}", environment())
    terminals.append(terminal)
    terminal.wait_for(r"live · 0 tasks")
    with Client(server.url, space=space, min_interval=0.05) as client:
        with client.task("Upload") as task:
            task.report(1, 4, log="first part")
            terminal.wait_for(r"^…\s+Upload\s.*25%\s+1/4.*first part")
            task.report(3, 4, log="third part")
            terminal.wait_for(r"^…\s+Upload\s.*75%\s+3/4.*third part")
        terminal.wait_for(r"^✓\s+Upload\s.*100%")
    assert terminal.interrupt() == 0


def test_watch_shows_a_failed_command_and_the_parent_that_holds_it(
    server: LiveServer, terminals: list[Terminal], tmp_path: Path
) -> None:
    space = server.new_space("Releases")
    terminal = Terminal(f"headway watch {server.url}/spaces/{space}", environment())
    terminals.append(terminal)
    terminal.wait_for(r"live · 0 tasks")
    with Client(server.url, space=space) as client:
        deploy = client.create_task("Deploy")
        build = client.create_task("Build image", parent=deploy)
        script = tmp_path / "migrate.sh"
        script.write_text("#!/bin/sh\necho 'no such table: users'\nexit 3\n")
        script.chmod(0o755)
        run = subprocess.run(
            ["headway", "run", "--parent", deploy, "--title", "Run migrations", "--", str(script)],
            env=environment(HEADWAY_URL=server.url),
            capture_output=True,
            timeout=30,
        )
        assert run.returncode == 3, run.stderr
        client.finish(build)  # the last step: Deploy finishes, one step failed
    terminal.wait_for(r"^✗\s{4}Run migrations\s.*\sexit code 3\s*$")
    terminal.wait_for(r"^✗\s+Deploy\s.*\s1 of 2 steps failed \(Run migrations: exit code 3\)\s*$")
    terminal.wait_for(r"live · \d+ tasks · 1 failed")
    assert terminal.interrupt() == 0


def test_watch_of_an_unknown_space_prints_the_servers_message(server: LiveServer) -> None:
    result = subprocess.run(
        ["headway", "watch", "00000000-0000-4000-8000-000000000000", "--url", server.url],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("headway watch: No such space")


class PtyTerminal:
    """A command on a pseudo-terminal `columns` wide (rich asks the terminal, as it does
    for a person), and the text it drew, frame after frame."""

    def __init__(self, command: str, env: dict[str, str], columns: int) -> None:
        import fcntl
        import pty
        import struct
        import termios

        self.master, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        env = {name: value for name, value in env.items() if name not in ("COLUMNS", "LINES")}
        self.process = subprocess.Popen(
            ["bash", "-c", command],
            env={**env, "TERM": "xterm-256color"},
            stdin=follower,
            stdout=follower,
            stderr=follower,
            start_new_session=True,
        )
        os.close(follower)
        self.output = b""

    def wait_for(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """Read until the text drawn so far matches `pattern`; the match."""
        deadline = time.monotonic() + timeout
        while not (found := re.search(pattern, self.text, flags=re.MULTILINE)):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"never drawn: {pattern!r} in:\n{self.text[-3000:]}"
            ready, _, _ = select.select([self.master], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the command ended: the terminal closed
                    chunk = b""
                assert chunk, f"exited with {self.process.wait()}:\n{self.text[-3000:]}"
                self.output += chunk
        return found

    @property
    def text(self) -> str:
        return ESCAPE.sub("", self.output.decode("utf-8", "replace")).replace("\r", "")

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        os.close(self.master)


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_watch_on_a_terminal_counts_down_and_keeps_its_bars_and_logs(
    server: LiveServer, columns: int
) -> None:
    """On a real terminal 80, 100 and 160 columns wide: a step 20 s or so from its end
    counts down in seconds, a step that failed at 1/4 is drawn a quarter full, and with
    long titles and log lines the bar column stays and the log keeps a useful width."""
    space = server.new_space("Releases")
    with Client(server.url, space=space) as client:
        release = client.create_task("Release the whole application, region by region")
        client.report(release)  # its reporter holds it open
        migration = client.create_task("DB migration", parent=release)
        client.report(migration, 1, 4)
        client.report(migration, 1, 4, values={"error": "exit code 3"}, done=True)
        upload = client.create_task("Upload", parent=release)
        log = "sending chunk 10 of 100 to the mirror in the next region " * 3
        client.report(upload, 0, 100, log=log)
        time.sleep(1.2)  # the server's rate needs two reports a second apart
        client.report(upload, 10, 100, log=log)  # 9 times the time between left: ~11 s
    terminal = PtyTerminal(f"headway watch {server.url}/spaces/{space}", environment(), columns)
    try:
        found = terminal.wait_for(r"^…\s{4}Upload\s.*\sabout (\d+) s\s.*$")
        upload_row = found.group(0)
        assert 0 < int(found.group(1)) < 60
        assert "━" in upload_row  # the bar column stays
        shown_log = re.search(r"sending chunk.*$", upload_row)
        assert (
            shown_log is not None and len(shown_log.group(0)) >= {80: 20, 100: 28, 160: 50}[columns]
        )
        failed = terminal.wait_for(r"^✗\s{4}DB migration\s.*$").group(0)
        assert re.search(r"\s25%\s", failed) and "━" in failed
        assert re.search("[╸╺]", failed), failed  # a bar that stops part way, not a full one
        frame = terminal.text.split("Releases")[-1]
        assert all(len(line) <= columns for line in frame.splitlines()), frame
    finally:
        terminal.close()
