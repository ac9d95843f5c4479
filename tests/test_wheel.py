"""The package's own wheel, built by `python -m build` from the tracked files alone (as a
fresh clone holds them) and installed into clean virtualenvs outside the checkout: it
holds every module, template, static file and migration; `headway serve` from it answers
`/up` and serves the page with its static files; and installed without extras it pulls no
server dependency."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from headway import __version__

from .live_server import LiveServer
from .support import from_wheelhouse
from .test_client_wheel import SERVER_COMMANDS, _name, _project

ROOT = Path(__file__).resolve().parent.parent
WHEEL = f"headway-{__version__}-py3-none-any.whl"
BUILD_SECONDS = 300
INSTALL_SECONDS = 600  # the server's dependencies: from the index, or the wheelhouse


def tracked_copy(destination: Path) -> Path:
    """The repository's tracked files, as they are in the working tree, copied to
    `destination`: what a fresh clone holds, without build leftovers or virtualenvs."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def _run(*command: str | Path, timeout: float, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("HEADWAY_")}
    env.pop("PYTHONPATH", None)
    env = from_wheelhouse(env)
    result = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tracked_copy(tmp_path_factory.mktemp("clone"))
    dist = tmp_path_factory.mktemp("dist")
    _run(
        sys.executable, "-m", "build", "--wheel", "--outdir", dist, source,
        timeout=BUILD_SECONDS, cwd=source,
    )  # fmt: skip
    built = dist / WHEEL
    assert built.is_file(), sorted(p.name for p in dist.iterdir())
    return built


def _venv(root: Path, *requirements: str) -> Path:
    """A clean virtualenv at `root` (outside the checkout) with `requirements` installed
    at the versions of constraints.txt, by the tests' own pip: a pip of its own, and the
    bytecode of every module installed, would cost seconds of CPU and test nothing."""
    venv = (sys.executable, "-m", "venv", "--without-pip", root)
    _run(*venv, timeout=INSTALL_SECONDS, cwd=root.parent)
    _pip(root, "install", "--quiet", "--no-compile", "--constraint", ROOT / "constraints.txt",
         *requirements, timeout=INSTALL_SECONDS)  # fmt: skip
    return root


def _pip(venv: Path, *arguments: str | Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """This virtualenv's pip, run on `venv`'s Python."""
    command = (sys.executable, "-m", "pip", "--python", venv / "bin" / "python")
    return _run(*command, "--disable-pip-version-check", *arguments, timeout=timeout, cwd=venv)


@pytest.fixture(scope="module")
def server_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv(tmp_path_factory.mktemp("server") / "venv", f"headway[server] @ {wheel.as_uri()}")


@pytest.fixture(scope="module")
def served(server_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`headway serve` of the installed wheel, in a directory of its own."""
    directory = tmp_path_factory.mktemp("served")
    # Its first start compiles every module it imports (they were installed uncompiled).
    command = [str(server_venv / "bin" / "headway")]
    with LiveServer(directory, command=command, startup_s=120) as server:
        yield server


def test_the_wheel_holds_every_module_template_static_file_and_migration(wheel: Path):
    package = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "headway").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    tracked = set(
        subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "headway"], capture_output=True, text=True
        ).stdout.split()
    )
    names = set(zipfile.ZipFile(wheel).namelist())
    assert tracked & package - names == set()
    for folder in ("web/templates", "web/static", "storage/migrations/versions"):
        assert any(name.startswith(f"headway/{folder}/") for name in names), folder
    assert "headway/storage/migrations/script.py.mako" in names


def test_headway_serve_from_the_installed_wheel_answers_up(served: LiveServer):
    up = httpx.get(f"{served.url}/up", timeout=10)
    assert up.status_code == 200
    assert up.json()["status"] == "ok"
    assert (served.directory / "headway.db").is_file()  # migrations ran from the wheel


def test_the_installed_page_loads_each_of_its_static_files(served: LiveServer):
    page = httpx.get(f"{served.url}/", headers={"accept": "text/html"}, timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assets = set(re.findall(r'(?:src|href)="(/static/[^"?]+)', page.text))
    assert any(asset.endswith(".js") for asset in assets)
    assert any(asset.endswith(".css") for asset in assets)
    for asset in assets:
        response = httpx.get(f"{served.url}{asset}", timeout=10)
        assert response.status_code == 200, asset
        assert response.content, asset


def test_installed_without_extras_it_pulls_no_server_dependency(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory
):
    client = _venv(tmp_path_factory.mktemp("client") / "venv", str(wheel))
    listed = _pip(client, "list", "--format=json", timeout=60)
    installed = {_name(row["name"]) for row in json.loads(listed.stdout)}
    server_only = {
        _name(requirement) for requirement in _project()["optional-dependencies"]["server"]
    }
    assert "headway" in installed
    assert installed & server_only == set()
    for command in SERVER_COMMANDS:
        result = subprocess.run(
            [str(client / "bin" / "headway"), command], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 1
        assert "pip install 'headway[server]'" in result.stderr
