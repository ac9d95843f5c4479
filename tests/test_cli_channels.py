"""`headway channels test URL`: the URL checked as the server checks a channel's, a test
message sent from this machine, the outcome printed without tokens."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from headway.cli import main

from .live_server import environment
from .receivers import HTTPReceiver, SMTPReceiver


def run(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], **env: str
) -> tuple[int, str, str]:
    """`headway ARGS` in this process, with only the given HEADWAY_ variables."""
    for name in [n for n in os.environ if n.startswith("HEADWAY_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    status = main(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_a_test_message_reaches_a_local_receiver_when_private_addresses_are_allowed(
    json_receiver: HTTPReceiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = json_receiver.url() + "?+X-Token=s3cr3tt0k3n"
    status, out, err = run(
        ["channels", "test", url, "--title", "Nightly"],
        monkeypatch,
        capsys,
        HEADWAY_WEBHOOK_ALLOW_PRIVATE="true",
    )
    assert status == 0, err
    assert out.startswith(f"json://127.0.0.1:{json_receiver.port}/****?+X-Token=****: ")
    assert out.rstrip().endswith(": delivered to JSON (HTTP 200)")
    assert "s3cr3tt0k3n" not in out + err
    [arrived] = json_receiver.arrivals
    assert arrived.title == "Headway test message" and "Nightly" in arrived.message


def test_the_allow_private_flag_does_the_same(
    smtp_receiver: SMTPReceiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        ["channels", "test", "--allow-private", smtp_receiver.url()], monkeypatch, capsys
    )
    assert status == 0 and out.rstrip().endswith("delivered to E-Mail")
    assert smtp_receiver.arrivals[0].title == "Headway test message"


def test_a_private_address_is_refused_by_default_saying_how_to_allow_it(
    json_receiver: HTTPReceiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(["channels", "test", json_receiver.url()], monkeypatch, capsys)
    assert status == 1
    assert "refused: the host 127.0.0.1 resolves to a non-public address" in out
    assert "--allow-private" in err and "HEADWAY_ALLOW_PRIVATE_TARGETS=true" in err
    assert json_receiver.requests == 0


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("file:///etc/passwd", "file:// is never allowed"),
        ("kodi://media.example.com", "kodi:// (Kodi/XBMC) is not allowed"),
        ("not a url", "not an Apprise URL"),
    ],
)
def test_a_url_the_server_would_refuse_is_refused(
    url: str, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(["channels", "test", url], monkeypatch, capsys)
    assert status == 1 and out == ""
    assert err.startswith("headway: ") and said in err


def test_the_scheme_setting_applies_and_is_checked(
    json_receiver: HTTPReceiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(
        ["channels", "test", "--allow-private", json_receiver.url()],
        monkeypatch,
        capsys,
        HEADWAY_CHANNEL_SCHEMES="slack,ntfys",
    )
    assert status == 1 and "Allowed: ntfys, slack." in err
    status, _, err = run(
        ["channels", "test", json_receiver.url()],
        monkeypatch,
        capsys,
        HEADWAY_CHANNEL_SCHEMES="json,script",
    )
    assert status == 2 and "HEADWAY_CHANNEL_SCHEMES: script: never allowed" in err
    assert json_receiver.requests == 0


def test_a_receiver_that_refuses_exits_1(
    json_receiver: HTTPReceiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    json_receiver.refuse(1, status=429, retry_after="30")
    status, out, _ = run(
        ["channels", "test", "--allow-private", json_receiver.url()], monkeypatch, capsys
    )
    assert status == 1 and "answered HTTP 429; it asks to retry after 30 s" in out


# A Python where some packages cannot be imported.
WITHOUT = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    MISSING = set(sys.argv[1].split(","))

    class Uninstalled(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in MISSING:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Uninstalled())
    from headway.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)
SERVER = "starlette,uvicorn,sqlalchemy,alembic,aiosqlite,asyncpg,msgspec,regex,redis,jinja2"
SERVER += ",standardwebhooks,mcp,limits,prometheus_client"


def test_without_apprise_the_command_says_how_to_install_it() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT, "apprise", "channels", "test", "ntfys://ntfy.sh/x"],
        capture_output=True,
        text=True,
        timeout=30,
        env=environment(),
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("headway channels test needs Apprise")
    assert "pip install 'headway[server]'" in result.stderr


def test_the_command_needs_only_the_client_and_apprise(json_receiver: HTTPReceiver) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT, SERVER, "channels", "test", json_receiver.url()],
        capture_output=True,
        text=True,
        timeout=30,
        env=environment(HEADWAY_WEBHOOK_ALLOW_PRIVATE="true"),
    )
    assert result.returncode == 0, result.stderr
    assert json_receiver.arrivals[0].title == "Headway test message"
