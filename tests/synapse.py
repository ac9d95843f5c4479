"""A real Matrix homeserver for the live-message tests: Synapse from PyPI, installed once
into its own virtualenv (`.test-tools/synapse`), run on 127.0.0.1 with SQLite, rate limits
raised, one user and one room, stopped by its PID.

`synapse_server()` is a fixture's body: it yields a started `Synapse`. When Synapse cannot
be installed because the package index cannot be reached, it skips, unless `CI` is set,
where it fails: CI must run the Matrix tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from .servers import ServerError, free_port

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".test-tools" / "synapse"
SYNAPSE = "matrix-synapse==1.163.2"  # the homeserver the tests run, as pinned as the rest
SERVER_NAME = "localhost"
USER, PASSWORD = "headway", "live-messages-0"
ROOM_ALIAS_NAME = "live"

# What pip prints when the package index cannot be reached (no network, no DNS, a proxy
# that refuses): the install is skipped outside CI rather than failed.
_OFFLINE_SIGNS = (
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "NewConnectionError",
    "Failed to establish a new connection",
    "ProxyError",
    "No matching distribution found for matrix-synapse",
    "Could not find a version that satisfies the requirement matrix-synapse",
)


class SynapseOffline(ServerError):
    """Synapse is not installed and the package index cannot be reached."""


@dataclass
class Timings:
    install_s: float | None = None  # None: it was installed already
    start_s: float = 0.0


@dataclass
class Synapse:
    """A started homeserver, with one user (`USER`) logged in and one room."""

    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    token: str = ""
    room_id: str = ""
    timings: Timings = field(default_factory=Timings)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def room_alias(self) -> str:
        return f"#{ROOM_ALIAS_NAME}:{SERVER_NAME}"

    def url(self, *, room: str | None = None, scheme: str = "matrix") -> str:
        """The Apprise URL of `USER` sending to `room` (the room's alias by default)."""
        target = quote(room or self.room_alias, safe="")
        return f"{scheme}://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{target}"

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        """A client-server API call as `USER` (or with `token`); its JSON answer."""
        headers = {"Authorization": f"Bearer {token or self.token}"} if token or self.token else {}
        answer = requests.request(
            method, self.base_url + path, json=body, headers=headers, timeout=10
        )
        if answer.status_code != 200:
            raise ServerError(f"Synapse answered {method} {path}: {answer.status_code}")
        return answer.json()

    def messages(self, room_id: str | None = None) -> list[dict[str, Any]]:
        """The room's `m.room.message` events, oldest first."""
        room = quote(room_id or self.room_id, safe="")
        page = self.call("GET", f"/_matrix/client/v3/rooms/{room}/messages?dir=b&limit=200")
        events = [e for e in page["chunk"] if e.get("type") == "m.room.message"]
        return list(reversed(events))

    def shown(self, room_id: str | None = None) -> dict[str, str]:
        """What a client shows: each original message's event id and its text, that of its
        latest replacement (`m.replace`) when it has one."""
        shown: dict[str, str] = {}
        for event in self.messages(room_id):
            content = event["content"]
            relation = content.get("m.relates_to") or {}
            if relation.get("rel_type") == "m.replace":
                if relation["event_id"] in shown:
                    shown[relation["event_id"]] = content["m.new_content"]["body"]
            else:
                shown[event["event_id"]] = content["body"]
        return shown

    def start(self) -> Synapse:
        began = time.monotonic()
        log = (self.root / "stdout.log").open("wb")
        self.process = subprocess.Popen(
            [str(VENV / "bin" / "python"), "-m", "synapse.app.homeserver",
             "-c", "homeserver.yaml", "-c", "overrides.yaml"],
            cwd=self.root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"Synapse exited at start:\n{self._log_tail()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.base_url + "/_matrix/client/versions", timeout=2).ok:
                    self.timings.start_s = time.monotonic() - began
                    return self
            time.sleep(0.1)
        raise ServerError(f"Synapse did not answer in 90 s:\n{self._log_tail()}")

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL after 15 s)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def _log_tail(self) -> str:
        lines: list[str] = []
        for name in ("stdout.log", "homeserver.log"):
            with contextlib.suppress(OSError):
                lines += (self.root / name).read_text(errors="replace").splitlines()[-30:]
        return "\n".join(lines)


def install() -> float | None:
    """Install Synapse into `VENV` unless it is there; the seconds it took (None when it
    was there). Raises SynapseOffline when the index cannot be reached, ServerError for
    any other failure. Several test processes may call it at once: a lock file lets one
    install while the others wait."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with (VENV.parent / "synapse.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (VENV / ".installed").is_file() and (VENV / ".installed").read_text().startswith(
            SYNAPSE
        ):
            return None
        began = time.monotonic()
        shutil.rmtree(VENV, ignore_errors=True)  # a half-made one from an install cut short
        _run([sys.executable, "-m", "venv", str(VENV)], "creating Synapse's virtualenv")
        # No bytecode compiled ahead (seconds of CPU): the server's first start writes
        # that of the modules it imports.
        command = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--no-input",
                   "--disable-pip-version-check", "--no-compile", SYNAPSE]  # fmt: skip
        wheelhouse = os.environ.get("HEADWAY_WHEELHOUSE")
        if wheelhouse and Path(wheelhouse).is_dir():
            command += ["--find-links", wheelhouse]  # and the index still
        result = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            env={**os.environ, "PIP_NO_INPUT": "1"},
        )  # fmt: skip
        if result.returncode != 0:
            output = result.stdout + result.stderr
            shutil.rmtree(VENV, ignore_errors=True)
            if any(sign in output for sign in _OFFLINE_SIGNS):
                raise SynapseOffline(
                    "Synapse (matrix-synapse) is not installed and the package index "
                    f"cannot be reached:\n{output[-1500:]}"
                )
            raise ServerError(f"pip install matrix-synapse failed:\n{output[-3000:]}")
        (VENV / ".installed").write_text(f"{SYNAPSE} {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
        return time.monotonic() - began


def configure(root: Path, port: int) -> None:
    """Generate Synapse's configuration in `root`, and the overrides Headway's tests need
    beside it (`overrides.yaml`, read after it: its top-level keys win)."""
    _run(
        [str(VENV / "bin" / "python"), "-m", "synapse.app.homeserver",
         "--server-name", SERVER_NAME, "--config-path", str(root / "homeserver.yaml"),
         "--data-directory", str(root), "--generate-config", "--report-stats=no"],
        "generating Synapse's configuration", cwd=root,
    )  # fmt: skip
    lots = {"per_second": 1000, "burst_count": 1000}
    overrides = {
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(root / "homeserver.db")}},
        "report_stats": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "enable_registration": False,
        "rc_message": lots,
        "rc_registration": lots,
        "rc_login": {"address": lots, "account": lots, "failed_attempts": lots},
        "rc_joins": {"local": lots, "remote": lots},
        "rc_invites": {"per_room": lots, "per_user": lots, "per_issuer": lots},
        "rc_admin_redaction": lots,
        "rc_room_creation": lots,
    }
    # JSON is YAML: no YAML library needed on this side.
    (root / "overrides.yaml").write_text(json.dumps(overrides, indent=2))


def make_synapse() -> Synapse:
    """Install (once), configure and start a homeserver; register `USER`, log in, create a
    room with the alias `#live:localhost`."""
    installed_s = install()
    root = Path(tempfile.mkdtemp(prefix="headway-synapse-"))
    server = Synapse(root, free_port())
    server.timings.install_s = installed_s
    configure(root, server.port)
    server.start()
    try:
        _run(
            [str(VENV / "bin" / "register_new_matrix_user"), "-c", "homeserver.yaml",
             "-u", USER, "-p", PASSWORD, "--no-admin", server.base_url],
            "registering the test user", cwd=root,
        )  # fmt: skip
        login = server.call(
            "POST",
            "/_matrix/client/v3/login",
            {
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": USER},
                "password": PASSWORD,
            },
        )
        server.token = login["access_token"]
        created = server.call(
            "POST",
            "/_matrix/client/v3/createRoom",
            {"room_alias_name": ROOM_ALIAS_NAME, "preset": "private_chat", "name": "Live"},
        )
        server.room_id = created["room_id"]
    except BaseException:
        server.stop()
        raise
    return server


def synapse_server() -> Iterator[Synapse]:
    """A fixture's body: a started `Synapse`, stopped (and its files removed) afterwards.
    Offline with Synapse not installed: skipped, or failed when `CI` is set."""
    try:
        server = make_synapse()
    except SynapseOffline as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Matrix tests: {exc}")
        pytest.skip(str(exc).splitlines()[0])
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


def _run(command: list[str], what: str, cwd: Path | None = None) -> None:
    result = subprocess.run(
        command, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise ServerError(f"{what} failed:\n{(result.stdout + result.stderr)[-3000:]}")
