"""The client served by the server itself: `GET /client` and its wheel over HTTP, then the
line of docs/client.md (and the README) `pip install "$(curl -fsS http://HOST:PORT/client)"`
run against a real `headway serve` into a fresh virtualenv, and the `headway` command it
installs."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import uuid
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from headway import __version__
from headway.app import create_app
from headway.config import Settings

from .conftest import running
from .live_server import LiveServer, serving
from .support import from_wheelhouse
from .test_client import client_blocks

ROOT = Path(__file__).resolve().parent.parent
WHEEL = f"headway-{__version__}-py3-none-any.whl"
DIST_INFO = f"headway-{__version__}.dist-info"
INSTALL_SECONDS = 300  # a fresh virtualenv, then httpx and rich from PyPI
COMMAND_SECONDS = 30
SERVER_COMMANDS = ("serve", "worker", "migrate")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalized (PEP 503)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


@contextlib.asynccontextmanager
async def _app(**settings: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app, started (the wheel's downloads are rated) and driven over ASGI."""
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(database_url=f"sqlite:///{folder}/client.db", **settings))
        transport = httpx.ASGITransport(app=app)
        async with (
            running(app),
            httpx.AsyncClient(transport=transport, base_url="http://testserver") as client,
        ):
            yield client


async def _wheel() -> zipfile.ZipFile:
    async with _app() as client:
        response = await client.get(f"/client/{WHEEL}")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    return zipfile.ZipFile(io.BytesIO(response.content))


async def test_client_answers_the_address_of_this_versions_wheel():
    async with _app() as client:
        response = await client.get("/client")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == f"http://testserver/client/{WHEEL}\n"


async def test_client_address_starts_with_the_public_url_when_set():
    async with _app(public_url="https://progress.example.com/headway/") as client:
        response = await client.get("/client")
    assert response.text == f"https://progress.example.com/headway/client/{WHEEL}\n"


async def test_neither_the_address_nor_the_wheel_may_be_kept_by_a_cache():
    async with _app() as client:
        for path in ("/client", f"/client/{WHEEL}"):
            assert (await client.get(path)).headers["cache-control"] == "no-store"


def test_without_a_public_url_a_host_the_server_does_not_answer_is_not_believed(tmp_path):
    """Without HEADWAY_PUBLIC_URL the address starts with the request's Host only when it
    is one the server answers (as `/mcp` decides: loopback names, the address it listens
    on, HEADWAY_MCP_ALLOWED_HOSTS); any other Host gets the address the request reached."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'client.db'}", run_worker=False)
    for allowed, listed in ((None, "localhost:*"), (("progress.test",), "progress.test")):
        with serving(settings.with_(mcp_allowed_hosts=allowed)) as (host, port):
            named = listed.replace("*", str(port))
            url = f"http://{host}:{port}/client"
            said = {
                name: httpx.get(url, headers={"host": name}).text
                for name in ("evil.example", f"evil.example:{port}", named, f"{host}:{port}")
            }
            assert said == {
                "evil.example": f"http://{host}:{port}/client/{WHEEL}\n",
                f"evil.example:{port}": f"http://{host}:{port}/client/{WHEEL}\n",
                named: f"http://{named}/client/{WHEEL}\n",
                f"{host}:{port}": f"http://{host}:{port}/client/{WHEEL}\n",
            }


@pytest.mark.parametrize(
    "path",
    [
        "/client/headway-0.0.1-py3-none-any.whl",
        "/client/headway.tar.gz",
        "/client/",
        f"/client/{WHEEL}/more",
    ],
)
async def test_any_other_file_is_a_json_404(path: str):
    async with _app() as client:
        response = await client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert set(response.json()) == {"error"}


async def test_other_methods_are_a_json_405():
    async with _app() as client:
        for path in ("/client", f"/client/{WHEEL}"):
            response = await client.post(path)
            assert response.status_code == 405
            assert set(response.json()) == {"error"}


async def test_the_wheel_is_the_same_bytes_every_time():
    async with _app() as first, _app() as second:
        one = (await first.get(f"/client/{WHEEL}")).content
        assert (await first.get(f"/client/{WHEEL}")).content == one
        assert (await second.get(f"/client/{WHEEL}")).content == one


async def test_the_wheels_record_hashes_every_file_it_holds():
    wheel = await _wheel()
    assert wheel.testzip() is None
    rows = [line.split(",") for line in wheel.read(f"{DIST_INFO}/RECORD").decode().splitlines()]
    assert [row[0] for row in rows] == wheel.namelist()
    for path, digest, size in rows:
        if path == f"{DIST_INFO}/RECORD":
            assert (digest, size) == ("", "")
            continue
        body = wheel.read(path)
        expected = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=")
        assert (digest, size) == (f"sha256={expected.decode()}", str(len(body)))


async def test_the_wheel_holds_every_module_and_no_server_only_file():
    wheel = await _wheel()
    modules = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "headway").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    names = set(wheel.namelist())
    assert {name for name in names if not name.startswith(DIST_INFO)} == modules
    assert {name for name in names if name.startswith(DIST_INFO)} == {
        f"{DIST_INFO}/{name}" for name in ("METADATA", "WHEEL", "RECORD", "entry_points.txt")
    }
    wheel_file = wheel.read(f"{DIST_INFO}/WHEEL").decode()
    assert "Root-Is-Purelib: true" in wheel_file
    assert "Tag: py3-none-any" in wheel_file
    entry_points = wheel.read(f"{DIST_INFO}/entry_points.txt").decode()
    assert entry_points == "[console_scripts]\nheadway = headway.cli:main\n"


async def test_the_wheel_requires_the_clients_dependencies_only():
    metadata = (await _wheel()).read(f"{DIST_INFO}/METADATA").decode()
    fields = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line]
    assert ["Name", "headway"] in fields
    assert ["Version", __version__] in fields
    required = [value for key, value in fields if key == "Requires-Dist"]
    project = _project()
    tqdm = [
        f'{requirement}; extra == "tqdm"'
        for requirement in project["optional-dependencies"]["tqdm"]
    ]
    assert required == [*project["dependencies"], *tqdm]
    assert [value for key, value in fields if key == "Provides-Extra"] == ["tqdm"]


# docs/client.md's line, and the command it installs, in a fresh virtualenv.


@pytest.fixture(scope="module")
def venv(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv where docs/client.md's line, as written, installed the client from
    `server`."""
    root = tmp_path_factory.mktemp("client-venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=INSTALL_SECONDS)
    [line] = [block for block in client_blocks("sh") if "/client)" in block]
    assert line.startswith("pip install ")
    line = line.replace("http://HOST:PORT", server.url).replace(
        "pip install ",
        f"{root}/bin/pip install --disable-pip-version-check --no-input --no-compile ",
        1,
    )
    installed = subprocess.run(
        ["bash", "-c", f"set -eo pipefail\n{line}"],
        capture_output=True,
        text=True,
        timeout=INSTALL_SECONDS,
        env=from_wheelhouse(_clean_env()),
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    yield root


def _clean_env() -> dict[str, str]:
    """This environment without HEADWAY_ variables or any virtualenv of the project."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("HEADWAY_")}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        entry
        for entry in env.get("PATH", "").split(os.pathsep)
        if Path(entry).resolve() != Path(sys.executable).parent.resolve()
    )
    return env


def _run(venv: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` run with the virtualenv's `bin/` first, from a folder of its own."""
    env = _clean_env()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        env=env,
        cwd=venv,
    )


def test_the_installed_command_is_the_servers_version(venv: Path):
    result = _run(venv, str(venv / "bin" / "headway"), "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"headway {__version__}\n"


def test_the_installed_client_imports(venv: Path):
    result = _run(venv, str(venv / "bin" / "python"), "-c", "from headway import Client")
    assert result.returncode == 0, result.stderr


def test_no_server_dependency_is_installed(venv: Path):
    result = _run(venv, str(venv / "bin" / "pip"), "list", "--format=json")
    assert result.returncode == 0, result.stderr
    installed = {_name(package["name"]) for package in json.loads(result.stdout)}
    server = {_name(requirement) for requirement in _project()["optional-dependencies"]["server"]}
    assert {"headway", "httpx", "rich"} <= installed
    assert installed & server == set()


def test_the_installed_command_reports_to_the_server(venv: Path, server: LiveServer):
    result = _run(venv, "headway", "space", "create", "--url", server.url, "--title", "wheel")
    assert result.returncode == 0, result.stderr
    space = str(uuid.UUID(result.stdout.splitlines()[0]))
    assert server.space(space)["title"] == "wheel"


def test_help_names_only_the_commands_that_work_without_the_server(venv: Path):
    result = _run(venv, "headway", "--help")
    assert result.returncode == 0, result.stderr
    listing = result.stdout.split("positional arguments:", 1)[1].split("options:", 1)[0]
    listed = set(re.findall(r"^ {4}(\w+) ", listing, re.MULTILINE))
    assert listed == {"space", "task", "report", "run", "watch", "badge"}
    assert "headway serve" not in result.stdout


@pytest.mark.parametrize("command", [*SERVER_COMMANDS, "channels test json://127.0.0.1/"])
def test_server_commands_say_how_to_get_the_server(venv: Path, command: str):
    result = _run(venv, "headway", *command.split())
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "pip install 'headway[server]'" in result.stderr
    if command in SERVER_COMMANDS:
        assert result.stderr == (
            f"headway {command} needs the server, which is not installed here: "
            "pip install 'headway[server]', or from a clone: pip install '.[server]'\n"
        )
