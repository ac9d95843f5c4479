"""The Python client against a real `headway serve`: typed results, errors that carry the
server's status and message, defaults from the environment, the asyncio client, what
importing it loads, and the Python example of docs/client.md run as written."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime

import httpx
import pytest

import headway
from headway import APIError, AsyncClient, Client, Estimate, NetworkError, NoSpaceError, Space, Task

from . import docs
from .live_server import LiveServer, environment, wait_for
from .receiver import Receiver
from .servers import free_port


@pytest.fixture
def client(server: LiveServer, served_space: str) -> Iterator[Client]:
    with Client(server.url, space=served_space, min_interval=0.05, exit_timeout=5) as client:
        yield client


def test_create_space_returns_its_uuid_title_and_icon(server: LiveServer) -> None:
    with Client(server.url) as client:
        space = client.create_space("Nightly builds", "🌙")
    assert isinstance(space, Space)
    assert uuid.UUID(space.uuid or "").version == 4
    assert (space.title, space.icon, space.tasks) == ("Nightly builds", "🌙", ())
    assert server.space(space.uuid or "")["title"] == "Nightly builds"


def test_get_space_returns_typed_tasks_with_their_steps(client: Client, served_space: str) -> None:
    parent = client.create_task("Deploy", source="deploy.sh")
    step = client.create_task("Build", parent=parent)
    client.report(step, 2, 4, values={"host": "web-1"}, log="compiling\nlinking")

    read = client.get_space()

    assert read.uuid == served_space and read.title == "Client tests"
    [task] = read.tasks
    assert (task.uuid, task.title, task.source, task.parent_uuid) == (
        parent,
        "Deploy",
        "deploy.sh",
        None,
    )
    assert isinstance(task.created_at, datetime) and task.created_at.tzinfo is not None
    assert task.progress is not None and task.progress.aggregated
    [child] = task.children
    assert (child.uuid, child.parent_uuid, child.space_uuid) == (step, parent, served_space)
    assert child.progress is not None
    assert (child.progress.current, child.progress.end, child.progress.ratio) == (2, 4, 0.5)
    assert child.progress.values == {"host": "web-1", "log": "linking"}
    assert isinstance(child.progress.updated_at, datetime)


def test_get_space_pages_with_a_cursor_it_read(client: Client) -> None:
    first, second = client.create_task("first"), client.create_task("second")
    newest = client.get_space(limit=1)
    assert [task.uuid for task in newest.tasks] == [second]
    older = client.get_space(before=newest.tasks[0].created_at)
    assert [task.uuid for task in older.tasks] == [first]


def test_report_replaces_the_whole_state_and_returns_the_task(client: Client) -> None:
    task = client.create_task("Copy")
    client.report(task, 3, 10, values={"host": "web-1"})
    answer = client.report(task, 7, 10)
    assert isinstance(answer, Task)
    assert answer.progress is not None
    assert (answer.progress.current, answer.progress.ratio) == (7, 0.7)
    assert answer.progress.values == {}
    assert not answer.finished


def test_finish_keeps_the_last_numbers(client: Client) -> None:
    task = client.create_task("Copy")
    client.report(task, 3, 10, log="copying")
    finished = client.finish(task)
    assert finished.finished and finished.duration is not None
    assert finished.progress is not None
    assert (finished.progress.current, finished.progress.end) == (3, 10)
    assert finished.progress.values == {"log": "copying"}
    assert client.get_task(task).finished_at == finished.finished_at


def test_a_refusal_raises_api_error_with_the_servers_status_and_message(client: Client) -> None:
    with pytest.raises(APIError) as unknown:
        client.get_task(str(uuid.uuid4()))
    assert unknown.value.status == 404
    assert unknown.value.message == "No such task: check the task uuid."
    assert not unknown.value.retryable

    with pytest.raises(APIError) as icon:
        client.create_space(icon="ab")
    assert icon.value.status == 422
    assert "icon" in icon.value.message

    with pytest.raises(APIError) as nested:
        client.report(client.create_task(), values={"nested": [1]})  # type: ignore[dict-item]
    assert nested.value.status == 400
    assert nested.value.message.startswith("Invalid request body")


def test_an_unreachable_server_raises_network_error() -> None:
    with (
        Client(f"http://127.0.0.1:{free_port()}", timeout=2) as client,
        pytest.raises(NetworkError, match="cannot reach"),
    ):
        client.create_space()


def test_operations_on_a_space_without_one_raise_no_space_error(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HEADWAY_SPACE", raising=False)
    with Client(server.url) as client:
        with pytest.raises(NoSpaceError):
            client.create_task("orphan")
        with pytest.raises(NoSpaceError):
            client.get_space()


def test_url_and_space_default_to_the_environment(
    server: LiveServer, served_space: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEADWAY_URL", server.url + "/")
    monkeypatch.setenv("HEADWAY_SPACE", served_space)
    with Client() as client:
        assert client.url == server.url
        task = client.create_task("from the environment")
        assert client.dashboard_url() == f"{server.url}/spaces/{served_space}"
    assert [t["uuid"] for t in server.space(served_space)["tasks"]] == [task]


def test_without_environment_the_client_talks_to_the_local_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HEADWAY_URL", raising=False)
    monkeypatch.delenv("HEADWAY_SPACE", raising=False)
    with Client() as client:
        assert (client.url, client.space) == ("http://127.0.0.1:8000", None)


async def test_async_client_does_what_the_sync_client_does(server: LiveServer) -> None:
    async with AsyncClient(server.url) as client:
        space = await client.create_space("async", "⚡")
        assert space.uuid is not None
        task = await client.create_task("Download", space=space.uuid)
        reported = await client.report(task, 5, 20, log="downloading")
        assert reported.progress is not None and reported.progress.ratio == 0.25
        finished = await client.finish(task)
        assert finished.finished
        read = await client.get_space(space.uuid)
        assert [t.uuid for t in read.tasks] == [task]
        assert (await client.get_task(task)).progress == finished.progress
        assert (await client.get_estimate(task)).remaining_s == 0
        with pytest.raises(APIError) as unknown:
            await client.get_task(str(uuid.uuid4()))
        assert unknown.value.status == 404


async def test_async_client_tasks_report_without_awaiting(server: LiveServer) -> None:
    space = server.new_space()
    client = AsyncClient(server.url, space=space, min_interval=0.05)
    async with client, client.task("async work") as task:
        task.report(1, 2, log="half way")
    # Closing the client delivered the final state.
    [read] = server.space(space)["tasks"]
    assert read["finished_at"] is not None
    assert read["progress"]["values"] == {"log": "half way"}


def test_a_task_asks_when_it_will_end(client: Client) -> None:
    """`Client.get_estimate` and `task.estimate()` read `GET /tasks/{uuid}/estimate`; a
    reporter whose task does not exist yet, or whose server is gone, answers None."""
    task = client.create_task("Copy")
    client.report(task, 1, 10)
    found = client.get_estimate(task)
    assert isinstance(found, Estimate)
    assert found.elapsed_s >= 0 and found.late is False and found.usual_p50_s is None
    assert found.rate_per_s is None  # one report: no rate yet
    with client.task("Sync") as reporter:
        reporter.report(1, 4)
        assert reporter.flush(5)
        estimate = reporter.estimate()
        assert estimate is not None and estimate.remaining_s is None
    assert reporter.flush(5)  # its finish, sent as the block ended
    finished = client.get_estimate(reporter.uuid or "")
    assert finished.remaining_s == 0 and finished.eta_at is not None
    with pytest.raises(APIError) as unknown:
        client.get_estimate(str(uuid.uuid4()))
    assert unknown.value.status == 404
    with Client(f"http://127.0.0.1:{free_port()}", timeout=1) as gone:
        assert gone.reporter(str(uuid.uuid4())).estimate() is None


def test_the_package_exports_what_it_documents() -> None:
    for name in headway.__all__:
        assert getattr(headway, name) is not None
    assert headway.Client is Client
    assert set(dir(headway)) == set(headway.__all__)
    with pytest.raises(AttributeError):
        headway.Server  # type: ignore[attr-defined]  # noqa: B018


SERVER_PACKAGES = ("starlette", "uvicorn", "sqlalchemy", "alembic", "msgspec", "redis", "mcp")


def test_importing_the_client_loads_no_server_package() -> None:
    script = (
        "import sys, headway\n"
        "assert 'httpx' not in sys.modules, 'import headway alone loads the client'\n"
        "from headway import Client\n"
        "import headway.tqdm, headway.cli\n"
        f"print(sorted(name for name in {SERVER_PACKAGES!r} if name in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def client_blocks(language: str) -> list[str]:
    """The code blocks in a language of "Report from your code" (docs/client.md)."""
    return docs.blocks(docs.page("client"), language)


@contextlib.contextmanager
def completions(server: LiveServer, space: str) -> Iterator[Receiver]:
    """A webhook of `space` on the shared server, into a receiver of its own."""
    receiver = Receiver().start()
    hook = httpx.post(f"{server.url}/spaces/{space}/webhooks", json={"url": receiver.url})
    assert hook.status_code == 201, hook.text
    try:
        yield receiver
    finally:
        receiver.stop()


def completed(receiver: Receiver, count: int) -> dict[str, list[dict]]:
    """The completion events `receiver` got, once it has `count`, by task title."""
    wait_for(lambda: len(receiver.deliveries) >= count, timeout=15)
    time.sleep(0.3)  # a second event of one task would come with the others
    by_title: dict[str, list[dict]] = defaultdict(list)
    for delivery in receiver.deliveries:
        task = json.loads(delivery.body)["data"]
        by_title[task["title"]].append(task)
    return by_title


def assert_finished_after_its_steps(parent: dict) -> None:
    """The parent finished once its last step had, never between two of them."""
    steps = parent["children"]
    assert steps and parent["finished_at"] is not None
    assert all(step["finished_at"] is not None for step in steps)
    assert parent["finished_at"] >= max(step["finished_at"] for step in steps)


def assert_one_notification_each(events: dict[str, list[dict]], parent: str, steps: list[str]):
    """One completion event per task, the parent's holding every step, each finished
    before it (it finished when its code ended, not between two steps)."""
    assert {title: len(tasks) for title, tasks in events.items()} == dict.fromkeys(
        [parent, *steps], 1
    )
    assert len(events[parent][0]["children"]) == len(steps)
    assert_finished_after_its_steps(events[parent][0])


def test_readme_python_example_runs_as_written(server: LiveServer, served_space: str) -> None:
    example = client_blocks("python")[0]
    env = environment(HEADWAY_URL=server.url, HEADWAY_SPACE=served_space)
    with completions(server, served_space) as receiver:
        result = subprocess.run(
            [sys.executable, "-c", example], env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        events = completed(receiver, 4)

    backup, deploy = server.space(served_space)["tasks"]
    assert backup["title"] == "Nightly backup" and backup["finished_at"] is not None
    assert (backup["progress"]["current"], backup["progress"]["end"]) == (3, 3)
    assert backup["progress"]["values"] == {"rows": 1000, "log": "events dumped"}
    assert deploy["title"] == "Deploy" and deploy["finished_at"] is not None
    assert [step["title"] for step in deploy["children"]] == ["Build", "Release 1.4.2"]
    assert_finished_after_its_steps(deploy)
    backup_events = events.pop("Nightly backup")
    assert len(backup_events) == 1
    assert_one_notification_each(events, "Deploy", ["Build", "Release 1.4.2"])


def test_readme_space_example_prints_the_uuid_then_the_dashboard(server: LiveServer) -> None:
    [setup] = [block for block in client_blocks("sh") if "space create" in block]
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", setup + 'echo "$HEADWAY_SPACE"'],
        env=environment(HEADWAY_URL=server.url),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    created = result.stdout.strip()
    assert uuid.UUID(created).version == 4
    assert server.space(created)["title"] == "Nightly jobs"


def test_values_given_as_keywords_raise_a_type_error_naming_values(client: Client) -> None:
    """`task.report(current=i, end=1000, docs=5)`: a TypeError that says where `docs`
    goes (`values={'docs': 5}`), raised where the call is; the job's failure, kept on its
    task, says the same, never a bare "unexpected keyword"."""
    hint = "values={'docs': 5}"
    with pytest.raises(TypeError, match=re.escape(hint)), client.task("Index") as task:
        task.report(current=1, end=1000, docs=5)  # type: ignore[call-arg]
    assert task.flush(5)
    failed = client.get_task(task.uuid or "")
    assert failed.progress is not None and hint in str(failed.progress.values["error"])
    plain = client.create_task("Plain")
    with pytest.raises(TypeError, match=re.escape(hint)):
        client.report(plain, 1, 10, docs=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=re.escape("values={'docs': 5, 'pages': 2}")):
        client.reporter(plain).finish(docs=5, pages=2)  # type: ignore[call-arg]
    client.report(plain, 2, 10, values={"docs": 5})  # as docs/client.md shows it
    assert client.get_task(plain).progress.values == {"docs": 5}  # type: ignore[union-attr]
