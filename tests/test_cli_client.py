"""The client's commands (`space create`, `task create`, `report`), run as a user runs
them, against a real server; every command's help; and `headway serve` without the
server installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from headway.cli import main, parser

from .live_server import LiveServer, environment
from .servers import free_port
from .test_client import client_blocks


def headway(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`headway ARGS`, the installed command, with only the given HEADWAY_ variables."""
    return subprocess.run(
        ["headway", *args], env=environment(**env), capture_output=True, text=True, timeout=30
    )


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Outcome]:
    """`headway ARGS` run in this process (faster than the command, same code), with
    only the given HEADWAY_ variables."""

    def run(*args: str, **env: str) -> Outcome:
        for name in [name for name in os.environ if name.startswith("HEADWAY_")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run


def test_space_create_prints_the_uuid_then_the_dashboard_address(server: LiveServer) -> None:
    result = headway("space", "create", "--title", "Nightly", "--icon", "🌙", "--url", server.url)
    assert result.returncode == 0, result.stderr
    created, address = result.stdout.splitlines()
    assert uuid.UUID(created).version == 4
    assert address == f"{server.url}/spaces/{created}"
    assert server.space(created) == {"title": "Nightly", "icon": "🌙", "tasks": []}


def test_space_create_json_is_one_object_for_scripts(
    server: LiveServer, cli: Callable[..., Outcome]
) -> None:
    result = cli("space", "create", "--json", HEADWAY_URL=server.url)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer == {
        "uuid": answer["uuid"],
        "title": None,
        "icon": None,
        "url": f"{server.url}/spaces/{answer['uuid']}",
    }


def test_task_create_prints_the_uuid_and_makes_steps_with_parent(
    server: LiveServer, served_space: str, cli: Callable[..., Outcome]
) -> None:
    env = {"HEADWAY_URL": server.url, "HEADWAY_SPACE": served_space}
    parent = cli("task", "create", "--title", "Deploy", "--source", "ci", **env)
    assert parent.returncode == 0, parent.stderr
    step = cli(
        "task", "create", "--title", "Build", "--parent", parent.stdout.strip(), "--json", **env
    )
    assert step.returncode == 0, step.stderr
    [task] = server.space(served_space)["tasks"]
    assert (task["uuid"], task["title"], task["source"]) == (parent.stdout.strip(), "Deploy", "ci")
    assert [child["uuid"] for child in task["children"]] == [json.loads(step.stdout)["uuid"]]


def test_task_create_in_another_space_with_space_flag(
    server: LiveServer, served_space: str, cli: Callable[..., Outcome]
) -> None:
    other = server.new_space()
    result = cli(
        "task", "create", "--space", other, HEADWAY_URL=server.url, HEADWAY_SPACE=served_space
    )
    assert result.returncode == 0, result.stderr
    assert server.space(served_space)["tasks"] == []
    assert [task["uuid"] for task in server.space(other)["tasks"]] == [result.stdout.strip()]


def test_report_sends_counts_typed_values_and_log(
    server: LiveServer, served_space: str, cli: Callable[..., Outcome]
) -> None:
    task = cli(
        "task", "create", "--title", "Copy", HEADWAY_URL=server.url, HEADWAY_SPACE=served_space
    )
    uuid_ = task.stdout.strip()
    result = cli(
        "report", uuid_, "--current", "3", "--end", "10",
        "--value", "host=web-1", "--value", "retries=2", "--value", "ok=true",
        "--value", "ratio=0.5", "--value", "note=a=b", "--log", "copying assets",
        "--url", server.url,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Copy: 3/10 (30%)\n"
    progress = server.task(uuid_)["progress"]
    assert (progress["current"], progress["end"]) == (3, 10)
    assert progress["values"] == {
        "host": "web-1",
        "retries": 2,
        "ok": True,
        "ratio": 0.5,
        "note": "a=b",
        "log": "copying assets",
    }


def test_report_done_alone_finishes_keeping_the_last_numbers(
    server: LiveServer, served_space: str, cli: Callable[..., Outcome]
) -> None:
    env = {"HEADWAY_URL": server.url, "HEADWAY_SPACE": served_space}
    task = cli("task", "create", "--title", "Copy", **env).stdout.strip()
    cli("report", task, "--current", "4", "--end", "8", **env)
    result = cli("report", task, "--done", **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Copy: 4/8 (100%), finished\n"
    read = server.task(task)
    assert read["finished_at"] is not None and read["progress"]["current"] == 4


def test_a_refusal_prints_the_servers_message_and_exits_1(server: LiveServer) -> None:
    result = headway("report", str(uuid.uuid4()), "--current", "1", HEADWAY_URL=server.url)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "headway: No such task: check the task uuid. (HTTP 404)\n"

    icon = headway("space", "create", "--icon", "too long", "--url", server.url)
    assert icon.returncode == 1
    assert icon.stderr.startswith("headway: ") and "icon" in icon.stderr


def test_an_unreachable_server_is_named_and_exits_1(cli: Callable[..., Outcome]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = cli("space", "create", HEADWAY_URL=url)
    assert result.returncode == 1
    assert result.stderr.startswith(f"headway: cannot reach {url}")


def test_a_task_needs_a_space(server: LiveServer, cli: Callable[..., Outcome]) -> None:
    result = cli("task", "create", "--title", "orphan", HEADWAY_URL=server.url)
    assert result.returncode == 1
    assert "HEADWAY_SPACE" in result.stderr


def test_bad_arguments_are_usage_errors(server: LiveServer, cli: Callable[..., Outcome]) -> None:
    for args in (
        ["report", "t", "--current", "three"],
        ["report", "t", "--value", "novalue"],
        ["run", "--pattern", "(unclosed", "--", "true"],
        ["run", "--pattern", "no groups", "--", "true"],
        ["nonsense"],
    ):
        result = cli(*args, HEADWAY_URL=server.url)
        assert result.returncode == 2, args
        assert "usage: headway" in result.stderr


def subcommands() -> list[list[str]]:
    """Every command and subcommand of `headway`, as the words that name it."""
    found = []

    def walk(command: object, words: list[str]) -> None:
        actions = getattr(command, "_subparsers", None)
        children = actions._group_actions[0].choices if actions else {}  # type: ignore[union-attr]
        if not children:
            found.append(words)
        for name, child in children.items():
            walk(child, [*words, name])

    walk(parser(), [])
    return found


def test_every_command_is_known() -> None:
    assert sorted(" ".join(words) for words in subcommands()) == [
        "badge",
        "channels test",
        "migrate",
        "report",
        "run",
        "serve",
        "space create",
        "task create",
        "watch",
        "worker",
    ]


@pytest.mark.parametrize("words", subcommands(), ids=" ".join)
def test_every_command_has_help_with_an_example(
    words: list[str], cli: Callable[..., Outcome]
) -> None:
    result = cli(*words, "--help")
    assert result.returncode == 0, result.stderr
    usage, _, rest = result.stdout.partition("\n")
    assert usage.startswith(f"usage: headway {' '.join(words)}")
    example = rest.split("\nexample:\n", 1)[1]
    assert "headway " in example


def test_python_dash_m_runs_the_same_command() -> None:
    for module in ("headway", "headway.cli"):
        result = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True
        )
        assert result.stdout == "headway 0.1.0\n"


# A Python without the server extra: its packages cannot be imported.
WITHOUT_SERVER = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    SERVER = {"starlette", "uvicorn", "sqlalchemy", "alembic", "aiosqlite", "msgspec"}

    class Uninstalled(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in SERVER:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Uninstalled())
    from headway.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize("command", ["serve", "worker", "migrate"])
def test_a_server_command_without_the_server_says_how_to_install_it(
    command: str, tmp_path: object
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_SERVER, command],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(tmp_path),
        env=environment(HEADWAY_PORT=str(free_port())),
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"headway {command} needs the server, which is not installed")
    assert result.stderr.rstrip().endswith(
        "pip install 'headway[server]', or from a clone: pip install '.[server]'"
    )


def test_client_commands_work_without_the_server(server: LiveServer) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_SERVER, "space", "create", "--url", server.url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert uuid.UUID(result.stdout.splitlines()[0])


def test_readme_report_examples_run_as_written(server: LiveServer, served_space: str) -> None:
    [example] = [block for block in client_blocks("sh") if "headway report" in block]
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example],
        env=environment(HEADWAY_URL=server.url, HEADWAY_SPACE=served_space),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    [task] = server.space(served_space)["tasks"]
    assert task["title"] == "Deploy" and task["finished_at"] is not None
    assert task["progress"]["values"] == {"host": "web-1", "log": "copying assets"}
    assert (task["progress"]["current"], task["progress"]["end"]) == (3, 10)
