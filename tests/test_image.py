"""The image and the compose stack, built and run with podman the way `scripts/image` does
it for an operator (no registry: bases made here by mmdebstrap, cached between runs).

The image, built from the tracked files alone (a fresh clone): it runs as a user that is
not root; the API works through it (create, report, read, the page, a stream); stopped by
`podman stop` it ends within its timeout with exit code 0, its open stream ended; started
again on the same volume it still has its spaces; its health check turns healthy.

The compose stack (deploy/compose.yaml with local stand-ins for postgres, redis and
nginx): it comes up, a report through nginx reaches a stream opened through nginx within a
second, a completion event is delivered once with two workers running, and it goes down
cleanly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .servers import free_port
from .test_wheel import tracked_copy

# Images and a whole stack starting on a busy machine miss their time limits: by itself.
pytestmark = pytest.mark.alone

CACHE = Path(os.environ.get("HEADWAY_IMAGE_CACHE", "/var/cache/headway-images"))
IMAGE = "localhost/headway:latest"
TOOLS = ("podman", "mmdebstrap", "runc", "podman-compose")
BUILD_SECONDS = 900  # cold: two Debian bases and every wheel; cached: seconds
START_SECONDS = 60
STOP_TIMEOUT = 10  # podman stop's, before it kills
# A report reaches a stream this soon, or it was never pushed (as tests/test_events.py's
# WAIT_S: the second the service promises is bench/'s to measure).
STREAM_SECONDS = 10.0


@pytest.fixture(scope="module")
def tools() -> None:
    """podman and friends, as root; missing ones fail under CI and skip elsewhere."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    why = f"needs {', '.join(missing)} (scripts/system-packages installs them)" if missing else ""
    if not why and os.geteuid() != 0:
        why = "needs root (podman, mmdebstrap)"
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


def _env(**more: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("HEADWAY_")}
    env["CONTAINERS_CONF"] = str(CACHE / "containers.conf")
    env["HEADWAY_IMAGE_CACHE"] = str(CACHE)
    env.update(more)
    return env


def run(*command: str, timeout: float = 60, check: bool = True, **env: str):
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**env),
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result


def podman(*args: str, timeout: float = 60, check: bool = True):
    return run("podman", *args, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def clone(tools: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tracked_copy(tmp_path_factory.mktemp("clone"))


def prebuilt() -> bool:
    """Whether `scripts/test` builds the images meanwhile (from a copy of the tracked files,
    in $HEADWAY_TEST_IMAGES: `scripts/image build`, then `stand-ins`): then wait for
    that build, and fail as it failed."""
    directory = os.environ.get("HEADWAY_TEST_IMAGES")
    if not directory:
        return False
    status = Path(directory) / "build.status"
    deadline = time.monotonic() + BUILD_SECONDS
    while not status.is_file():
        assert time.monotonic() < deadline, f"the images were not built in {BUILD_SECONDS} s"
        time.sleep(1)
    log = (Path(directory) / "build.log").read_text(errors="replace")
    assert status.read_text().strip() == "0", f"scripts/image build, stand-ins:\n{log}"
    return True


@pytest.fixture(scope="module")
def image(clone: Path) -> str:
    """The image, built by `scripts/image build` from a fresh clone (by `scripts/test`
    meanwhile, or here)."""
    if not prebuilt():
        run(str(clone / "scripts" / "image"), "build", timeout=BUILD_SECONDS, HEADWAY_IMAGE=IMAGE)
    return IMAGE


def wait_up(url: str, timeout: float = START_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/up", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url}/up did not answer 200 in {timeout} s"
        time.sleep(0.2)


class Container:
    """`podman run -d` of the image, its port 8000 on 127.0.0.1, /data a named volume."""

    def __init__(self, image: str) -> None:
        tag = uuid.uuid4().hex[:8]
        self.name, self.volume = f"headway-test-{tag}", f"headway-test-{tag}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        podman(
            "run", "--detach", "--name", self.name, "--publish", f"127.0.0.1:{self.port}:8000",
            "--volume", f"{self.volume}:/data", image,
        )  # fmt: skip
        try:
            wait_up(self.url)
        except BaseException:
            self.remove()  # no container left behind by one that never came up
            raise

    def inspect(self, field: str) -> str:
        return podman("inspect", "--format", "{{" + field + "}}", self.name).stdout.strip()

    def remove(self) -> None:
        podman("rm", "--force", "--time", "0", self.name, check=False)
        podman("volume", "rm", "--force", self.volume, check=False)


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[Container]:
    running = Container(image)
    try:
        yield running
    finally:
        running.remove()


def events(response: httpx.Response) -> Iterator[tuple[str, str]]:
    """(event, data) of a live stream, as they arrive."""
    kind, data = "", ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and kind:
            yield kind, data
            kind, data = "", ""


def report_reaches_stream(url: str, space: str, task: str, current: int) -> float:
    """Open the space's stream, then report `current` to `task`; seconds from the report
    to the stream's event showing it."""
    with (
        httpx.Client(timeout=10) as client,
        client.stream("GET", f"{url}/spaces/{space}/events") as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        arrived = events(stream)
        assert next(arrived)[0] == "snapshot"
        sent = time.monotonic()
        reported = client.put(f"{url}/tasks/{task}", json={"current": current, "end": 100})
        assert reported.status_code == 200, reported.text
        for kind, data in arrived:
            if kind == "task" and f'"current":{current},' in data:
                return time.monotonic() - sent
    pytest.fail("the stream ended before the report arrived")


def test_the_image_runs_as_a_user_that_is_not_root(image: str):
    assert podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() == (
        "headway"
    )
    ids = podman("run", "--rm", image, "id", "-u").stdout.strip()
    assert ids != "0"


def test_the_image_keeps_its_database_in_the_volume_data(image: str):
    config = podman("image", "inspect", "--format", "{{json .Config}}", image).stdout
    assert '"/data":{}' in config
    assert "HEADWAY_DATABASE_URL=sqlite:////data/headway.db" in config


def test_the_api_works_through_the_image(container: Container):
    url = container.url
    space = httpx.post(f"{url}/spaces", json={"title": "Image"}, timeout=10).json()["uuid"]
    task = httpx.post(f"{url}/spaces/{space}/tasks", json={"title": "Deploy"}, timeout=10)
    assert task.status_code == 201, task.text
    task_uuid = task.json()["uuid"]
    assert report_reaches_stream(url, space, task_uuid, 42) < STREAM_SECONDS
    read = httpx.get(f"{url}/tasks/{task_uuid}", timeout=10).json()
    assert read["progress"]["current"] == 42
    page = httpx.get(f"{url}/spaces/{space}", headers={"accept": "text/html"}, timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert httpx.get(f"{url}/static/headway.css", timeout=10).status_code == 200


def test_its_health_check_turns_healthy(container: Container):
    assert podman("healthcheck", "run", container.name).returncode == 0
    assert container.inspect(".State.Health.Status") == "healthy"


def test_podman_stop_ends_it_with_0_and_a_restart_keeps_its_spaces(container: Container):
    url = container.url
    space = httpx.post(f"{url}/spaces", json={"title": "Kept"}, timeout=10).json()["uuid"]
    ended = threading.Event()

    def watch() -> None:  # a stream open while the container stops: it is ended, cleanly
        with httpx.stream("GET", f"{url}/spaces/{space}/events", timeout=30) as stream:
            for _ in stream.iter_lines():
                pass
        ended.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(0.5)
    started = time.monotonic()
    podman("stop", "--time", str(STOP_TIMEOUT), container.name, timeout=STOP_TIMEOUT + 30)
    took = time.monotonic() - started
    assert took < STOP_TIMEOUT, f"podman stop took {took:.1f} s"
    assert container.inspect(".State.ExitCode") == "0"
    watcher.join(5)
    assert ended.is_set(), "the open stream was not ended cleanly"

    podman("start", container.name)
    wait_up(url)
    kept = httpx.get(f"{url}/spaces/{space}", timeout=10)
    assert kept.status_code == 200
    assert kept.json()["title"] == "Kept"


def test_its_size(image: str):
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
    print(f"\n{image}: {size / 1e6:.0f} MB")
    assert size < 450e6  # 413 MB on Debian bookworm: its python3, 188 MB of wheels


# The compose stack.

# As a container's first process, Python would ignore SIGTERM: `compose stop` would wait
# its 10 s out and kill it.
RECEIVER = """
import http.server, signal, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        print("delivered", self.headers.get("webhook-id"), flush=True)
        self.send_response(204)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("", 8080), Hook)
print("listening", flush=True)
server.serve_forever()
"""


@pytest.fixture(scope="module")
def stack(image: str, clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """deploy/compose.yaml up with the stand-ins, plus a webhook receiver on its network
    (and private targets allowed, for it), nginx on a free port of 127.0.0.1."""
    if not prebuilt():
        run(str(clone / "scripts" / "image"), "stand-ins", timeout=BUILD_SECONDS)
    override = tmp_path_factory.mktemp("compose") / "receiver.yaml"
    private = {"environment": {"HEADWAY_ALLOW_PRIVATE_TARGETS": "true"}}
    receiver = {
        "image": image,
        "healthcheck": {"test": ["NONE"]},
        "tmpfs": ["/data"],  # as the stack's own services: no anonymous volume left
        "command": ["python3", "-c", RECEIVER],
    }
    services = {"headway": private, "worker": private, "receiver": receiver}
    override.write_text(json.dumps({"services": services}))  # JSON is YAML
    project = f"headway-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    # deploy/compose.yaml as Debian's podman-compose reads it (nginx's fixed address left
    # out: Headway there believes no X-Forwarded-For).
    run(str(clone / "scripts" / "image"), "podman-file")
    passwords = {
        "HEADWAY_POSTGRES_PASSWORD": uuid.uuid4().hex,
        "HEADWAY_REDIS_PASSWORD": uuid.uuid4().hex,
    }
    files = [
        "-f", str(clone / "deploy" / "compose.podman.yaml"),
        "-f", str(clone / "deploy" / "stand-ins" / "compose.yaml"),
        "-f", str(override),
    ]  # fmt: skip

    def compose(*args: str, timeout: float = 300, check: bool = True):
        return run(
            "podman-compose", "--project-name", project, *files, *args,
            timeout=timeout, check=check, HEADWAY_COMPOSE_LISTEN=f"127.0.0.1:{port}",
            **passwords,
        )  # fmt: skip

    network = f"{project}_default"
    bridge, gateway = new_network(network)
    try:
        own_address(bridge, gateway)
        compose("up", "--detach")
        url = f"http://127.0.0.1:{port}"
        try:
            wait_up(url, timeout=120)
            # The workers find the receiver by name before the tests begin (a lookup that
            # failed would cost a delivery's whole attempt).
            for worker in (1, 2):
                resolves(_container(project, "worker", worker), "receiver", within_s=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{doings(project)}") from None
        yield {"url": url, "project": project, "compose": compose}
    finally:
        compose("down", "--volumes", timeout=120, check=False)
        # podman-compose leaves the project's network: each run would add a bridge.
        podman("network", "rm", "--force", network, check=False)
        run("ip", "link", "delete", bridge, check=False)


def new_network(network: str) -> tuple[str, str]:
    """Make `network` (podman-compose then uses it as it is): its bridge's name and its
    gateway's address with the subnet's prefix."""
    podman("network", "create", network)
    found = podman(
        "network", "inspect", network, "--format",
        "{{.NetworkInterface}} {{range .Subnets}}{{.Gateway}} {{.Subnet}}{{end}}",
    ).stdout.split()  # fmt: skip
    return found[0], f"{found[1]}/{found[2].split('/')[1]}"


def own_address(bridge: str, gateway: str) -> None:
    """Make the network's bridge before its first container, with an address of its own.

    A Linux bridge left to itself takes the lowest address among its ports, so it changes
    as containers join; a container that learned the gateway's address before a change
    sends to one no longer there until its ARP entry is stale (15 to 45 s): no name
    resolves in it, nginx finds no upstream. Debian 12's netavark makes such bridges, and
    uses one that exists (then adding no address to it). A bridge given an address keeps
    it."""
    run("ip", "link", "add", "name", bridge, "type", "bridge")
    address = "02:" + ":".join(f"{byte:02x}" for byte in os.urandom(5))  # locally administered
    run("ip", "link", "set", "dev", bridge, "address", address, "up")
    run("ip", "address", "add", gateway, "dev", bridge)


def _container(project: str, service: str, number: int = 1) -> str:
    return f"{project}_{service}_{number}"


def resolves(container: str, name: str, *, within_s: float) -> None:
    """Wait until `name` resolves inside `container` (AssertionError after `within_s`)."""
    lookup = f"import socket; socket.getaddrinfo({name!r}, 80)"
    deadline = time.monotonic() + within_s
    while podman("exec", container, "python3", "-c", lookup, check=False).returncode != 0:
        assert time.monotonic() < deadline, f"{name} did not resolve in {container}"
        time.sleep(0.5)


def doings(project: str) -> str:
    """What the stack's containers were doing: their states and their logs' last lines."""
    states = podman("ps", "--all", "--filter", f"name={project}", check=False).stdout
    logs = [
        (name, podman("logs", "--tail", "15", _container(project, *name), check=False))
        for name in (("migrate",), ("headway",), ("worker", 1), ("worker", 2), ("nginx",))
    ]
    return states + "".join(
        f"\n--- {'_'.join(map(str, name))}:\n{found.stdout}{found.stderr}" for name, found in logs
    )


def test_the_stack_migrates_then_serves_through_nginx(stack: dict):
    project = stack["project"]
    migrate = _container(project, "migrate")
    state = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", migrate)
    assert state.stdout.split() == ["exited", "0"]
    for worker in (1, 2):
        running = podman(
            "inspect", "--format", "{{.State.Running}}", _container(project, "worker", worker)
        )
        assert running.stdout.strip() == "true"
    page = httpx.get(stack["url"] + "/", headers={"accept": "text/html"}, timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")


def test_a_report_through_nginx_reaches_a_stream_through_nginx_within_a_second(stack: dict):
    url = stack["url"]
    space = httpx.post(f"{url}/spaces", json={"title": "Stack"}, timeout=10).json()["uuid"]
    task = httpx.post(f"{url}/spaces/{space}/tasks", json={}, timeout=10).json()["uuid"]
    for current in (1, 2, 3):
        assert report_reaches_stream(url, space, task, current) < STREAM_SECONDS


def test_a_completion_is_delivered_once_with_two_workers(stack: dict):
    url, project = stack["url"], stack["project"]

    def logged() -> list[str]:
        return podman("logs", _container(project, "receiver")).stdout.splitlines()

    # The receiver listens before the completion, so that its first attempt delivers it
    # (a failed one would be tried again 10 s later).
    deadline = time.monotonic() + 60
    while "listening" not in logged():
        assert time.monotonic() < deadline, "the receiver did not listen within 60 s"
        time.sleep(0.2)
    space = httpx.post(f"{url}/spaces", json={"title": "Hooks"}, timeout=10).json()["uuid"]
    hook = httpx.post(
        f"{url}/spaces/{space}/webhooks", json={"url": "http://receiver:8080/hook"}, timeout=10
    )
    assert hook.status_code == 201, hook.text
    task = httpx.post(f"{url}/spaces/{space}/tasks", json={}, timeout=10).json()["uuid"]
    assert httpx.put(f"{url}/tasks/{task}", json={"done": True}, timeout=10).status_code == 200

    def deliveries() -> list[str]:
        return [line.split()[1] for line in logged() if line.startswith("delivered ")]

    deadline = time.monotonic() + 30
    while not deliveries():
        assert time.monotonic() < deadline, f"no delivery within 30 s\n{doings(project)}"
        time.sleep(0.2)
    time.sleep(3)  # time enough for a second worker to deliver it again, were it to
    delivered = deliveries()
    assert len(delivered) == 1, delivered


def test_the_stack_goes_down_cleanly(stack: dict):
    project = stack["project"]
    stack["compose"]("stop", timeout=120)
    for service in ("headway", "worker", "postgres", "redis", "nginx"):
        code = podman("inspect", "--format", "{{.State.ExitCode}}", _container(project, service))
        assert code.stdout.strip() == "0", f"{service}\n{doings(project)}"
    stack["compose"]("down", "--volumes", timeout=120)
    left = podman("ps", "--all", "--quiet", "--filter", f"name={project}_").stdout
    assert left.strip() == ""
