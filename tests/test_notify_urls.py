"""Channel URLs: which Apprise URLs are allowed, what they show without their tokens, and
the public-address check of the hosts their owners pick."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from headway.delivery.webhooks import RefusedAddress
from headway.domain.errors import Unprocessable
from headway.notify import guard
from headway.notify.schemes import DEFAULT_SCHEMES, NEVER_SCHEMES, parse_schemes
from headway.notify.urls import Target, apprise_module, check_channel_hosts, check_channel_url


def test_every_default_scheme_is_an_apprise_scheme_and_none_is_refused() -> None:
    apprise_module()
    from apprise.plugins import N_MGR

    assert [s for s in DEFAULT_SCHEMES if s not in N_MGR] == []
    assert set(DEFAULT_SCHEMES) & NEVER_SCHEMES == set()
    assert len(set(DEFAULT_SCHEMES)) == len(DEFAULT_SCHEMES)


@pytest.mark.parametrize(
    ("url", "scheme", "hosts"),
    [
        ("json://hooks.example.com/in", "json", (Target("hooks.example.com", 80),)),
        ("jsons://hooks.example.com:8443/in", "jsons", (Target("hooks.example.com", 8443),)),
        ("form://10.0.0.5/in", "form", (Target("10.0.0.5", 80),)),
        ("xmls://hooks.example.com/in", "xmls", (Target("hooks.example.com", 443),)),
        ("json://[::1]:8080/in", "json", (Target("::1", 8080),)),
        ("ntfys://ntfy.example.com/builds", "ntfys", (Target("ntfy.example.com", 443),)),
        ("ntfy://my-builds-topic", "ntfy", ()),  # ntfy.sh
        ("gotify://push.example.com/AbCdEf123", "gotify", (Target("push.example.com", 80),)),
        (
            "mailtos://me:pw@example.com?smtp=smtp.example.net&to=you@example.com",
            "mailtos",
            (Target("smtp.example.net", 587),),
        ),
        ("mailtos://me:pw@gmail.com", "mailtos", (Target("smtp.gmail.com", 587),)),
        (
            "matrixs://me:pw@matrix.example.org/#ops",
            "matrixs",
            (Target("matrix.example.org", 443),),
        ),
        ("mmosts://chat.example.com/abcdefghijklmno", "mmosts", (Target("chat.example.com", 443),)),
        ("zulip://bot@myorg/abcdefghijklmnopqrstuvwxyzabcdef", "zulip", ()),
        (
            "zulip://bot@chat.example.com/abcdefghijklmnopqrstuvwxyzabcdef",
            "zulip",
            (Target("chat.example.com", 443),),
        ),
        ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general", "slack", ()),
        (
            "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7F",
            "slack",
            (),
        ),
        ("https://discord.com/api/webhooks/1234567890/abcdefghijklmnop", "discord", ()),
        ("tgram://123456789:abcdefg_hijklmnop/-123456/", "tgram", ()),
        ("pover://uuuuuuuuuuuuuuuuuuuuuuuuuuuuuu@aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "pover", ()),
    ],
)
def test_a_channel_url_names_its_service_and_the_hosts_its_owner_picked(
    url: str, scheme: str, hosts: tuple[Target, ...]
) -> None:
    channel = check_channel_url(url)
    assert channel.scheme == scheme
    assert channel.hosts == hosts
    assert channel.hosted == (hosts == ())


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "windows://",
        "macosx://",
        "dbus://",
        "kde://",
        "qt://",
        "glib://",
        "gnome://",
        "syslog://",
        "rsyslog://localhost",
        "script://run.sh",
        "SCHEMA://x",
    ],
)
def test_local_desktop_log_and_script_kinds_are_refused_even_when_listed(url: str) -> None:
    listed = {*DEFAULT_SCHEMES, *NEVER_SCHEMES}
    with pytest.raises(Unprocessable) as refused:
        check_channel_url(url, listed)
    assert refused.value.status == 422
    assert "never allowed" in refused.value.message


def test_a_service_not_in_the_allowlist_is_refused_naming_it() -> None:
    with pytest.raises(Unprocessable) as refused:
        check_channel_url("kodi://media.example.com")
    assert "kodi://" in refused.value.message and "not allowed" in refused.value.message
    with pytest.raises(Unprocessable) as refused:
        check_channel_url("json://hooks.example.com/in", ["slack"])
    assert refused.value.message.endswith("Allowed: slack.")
    assert check_channel_url("kodi://media.example.com", ["kodi"]).scheme == "kodi"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("", "must be an Apprise URL"),
        ("just words", "not an Apprise URL"),
        ("nope://x", "nope:// is not one Apprise knows"),
        ("json://", "not a valid JSON URL"),
        ("gotify://push.example.com/", "not a valid Gotify URL"),
        ("https://example.com/hook", "json://"),
        ("json://" + "a" * 3000, "longer than 2048"),
    ],
)
def test_a_url_apprise_cannot_use_is_refused_saying_why(url: str, said: str) -> None:
    with pytest.raises(Unprocessable) as refused:
        check_channel_url(url)
    assert said in refused.value.message


def test_apprise_messages_that_quote_a_token_are_not_passed_on() -> None:
    """Apprise's own error for a bad Slack token quotes the token; the 422 does not."""
    with pytest.raises(Unprocessable) as refused:
        check_channel_url("slack://T1JJ3T3L2/A1BRTD4JD/s3cr3t%21token")
    assert "not a valid Slack URL" in refused.value.message
    assert "s3cr3t" not in refused.value.message


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        (
            "jsons://user:hunter2pass@hooks.example.com/in/abcdef0123456789"
            "?+Authorization=Bearer%20s3cr3tt0k3n&:apikey=payl0adk3y",
            ["hunter2pass", "abcdef0123456789", "s3cr3tt0k3n", "payl0adk3y"],
        ),
        ("forms://hooks.example.com/in?-token=qu3ryt0k3n", ["qu3ryt0k3n"]),
        (
            "ntfys://me:ntfypassw0rd@ntfy.example.com/private-topic-xyz",
            ["ntfypassw0rd", "private-topic-xyz"],
        ),
        ("ntfy://private-topic-xyz", ["private-topic-xyz"]),
        ("gotify://push.example.com/AbCdEf123456", ["AbCdEf123456"]),
        ("mailtos://me:mailpassw0rd@example.com?smtp=smtp.example.net", ["mailpassw0rd"]),
        ("matrixs://me:matrixpassw0rd@matrix.example.org/#ops", ["matrixpassw0rd"]),
        (
            "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general",
            ["TIiajkdnlazkcOXrIdevi7FQ"],
        ),
        ("https://discord.com/api/webhooks/1234567890/abcdefghijklmnop", ["abcdefghijklmnop"]),
        ("tgram://123456789:abcdefg_hijklmnop/-123456/", ["abcdefg_hijklmnop"]),
        (
            "pover://uuuuuuuuuuuuuuuuuuuuuuuuuuuuuu@aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            ["uuuuuuuuuuuuuuuuuuuuuuuuuuuuuu", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],
        ),
    ],
)
def test_the_redacted_url_shows_no_token(url: str, secrets: list[str]) -> None:
    channel = check_channel_url(url)
    for secret in secrets:
        assert secret not in channel.redacted
        assert secret not in repr(channel)
    assert channel.redacted.startswith(url.partition("://")[0] + "://")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("json://t0k3n@hooks.example.com/", "json://****@hooks.example.com/"),
        (
            "jsons://hooks.example.com/in/ab12?-X-Key=y1&format=text&bare",
            "jsons://hooks.example.com/****/****?-X-Key=****&format=****&****",
        ),
        ("ntfys://ntfy.example.com/builds", "ntfys://ntfy.example.com/****"),
        ("ntfy://builds", "ntfy://****"),
        (
            "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general",
            "slack://****/****/T...Q/****",
        ),
        (
            "https://discord.com/api/webhooks/1234567890/abcdefghijklmnop",
            "https://discord.com/****/****/****/a...p",
        ),
        ("tgram://123456789:abcdefg_hijklmnop/-123456/", "tgram://1...p/****/"),
        (
            "mailtos://me:mailpassw0rd@example.com?smtp=smtp.example.net",
            "mailtos://****:****@example.com?smtp=s...t",
        ),
        ("json://[::1]:8080/x", "json://[::1]:8080/****"),
    ],
)
def test_the_redacted_url_is_the_owners_own_with_every_token_masked(url: str, shown: str) -> None:
    """Short tokens and username-only ones too; hosts the owner chose stay readable, and
    nothing the owner did not write (Apprise's defaults) is added."""
    assert check_channel_url(url).redacted == shown


def test_parse_schemes_reads_a_setting_and_refuses_the_never_allowed() -> None:
    assert parse_schemes(" slack, NTFYS ,,json ") == {"slack", "ntfys", "json"}
    with pytest.raises(ValueError, match="file, script: never allowed"):
        parse_schemes("slack,script,file")
    with pytest.raises(ValueError, match="not a URL scheme"):
        parse_schemes("slack,no way")


async def test_a_private_host_is_refused_unless_private_addresses_are_allowed() -> None:
    for url in ("json://127.0.0.1:9/in", "json://localhost:9/in", "json://[::1]:9/in"):
        channel = check_channel_url(url)
        with pytest.raises(RefusedAddress, match="non-public address"):
            await check_channel_hosts(channel, allow_private=False)
        assert await check_channel_hosts(channel, allow_private=True) == {}


def dns(answers: dict[str, list[str]]) -> Any:
    """A resolver answering from `answers`, as a DNS server under test would."""

    async def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in answers[host]
        ]

    return resolve


async def test_a_public_host_is_pinned_to_the_address_it_was_checked_at() -> None:
    channel = check_channel_url("mailtos://me:pw@example.com?smtp=smtp.example.net")
    resolve = dns({"smtp.example.net": ["93.184.216.34", "2606:2800:220:1::1"]})
    pins = await check_channel_hosts(channel, allow_private=False, resolve=resolve)
    assert pins == {"smtp.example.net": ipaddress.ip_address("93.184.216.34")}


@pytest.mark.parametrize(
    "addresses",
    [["93.184.216.34", "10.0.0.1"], ["::ffff:127.0.0.1"], ["64:ff9b::a00:1"], ["169.254.169.254"]],
)
async def test_a_host_with_any_refused_address_is_refused(addresses: list[str]) -> None:
    channel = check_channel_url("jsons://hooks.example.com/in")
    with pytest.raises(RefusedAddress):
        await check_channel_hosts(
            channel, allow_private=False, resolve=dns({"hooks.example.com": addresses})
        )


async def test_a_refusal_names_the_host_and_the_setting_never_the_address() -> None:
    """What a resolver inside the network answers is not for the client to learn."""
    channel = check_channel_url("json://vm:8080/in")
    with pytest.raises(RefusedAddress) as refused:
        await check_channel_hosts(channel, allow_private=False, resolve=dns({"vm": ["10.1.2.3"]}))
    assert str(refused.value) == (
        "the host vm resolves to a non-public address "
        "(HEADWAY_ALLOW_PRIVATE_TARGETS=true allows private targets)"
    )


async def test_a_resolver_answer_with_a_zone_id_is_refused() -> None:
    channel = check_channel_url("json://hooks.example.com/in")
    resolve = dns({"hooks.example.com": ["2606:4700:4700::1111%eth0"]})
    with pytest.raises(RefusedAddress, match="non-public"):
        await check_channel_hosts(channel, allow_private=False, resolve=resolve)


async def test_a_hosted_service_has_nothing_to_check_before_it_connects() -> None:
    channel = check_channel_url("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general")
    assert await check_channel_hosts(channel, allow_private=False, resolve=dns({})) == {}


async def test_the_check_looks_names_up_away_from_the_default_executor() -> None:
    """With every thread of the loop's default executor busy (as when requests fill it),
    the check still answers: its lookups run on the sending threads."""
    loop = asyncio.get_running_loop()
    busy = ThreadPoolExecutor(1)
    loop.set_default_executor(busy)
    release = threading.Event()
    blocker = loop.run_in_executor(None, release.wait, 30)
    try:
        channel = check_channel_url("json://localhost:9/in")
        async with asyncio.timeout(5):
            with pytest.raises(RefusedAddress):
                await check_channel_hosts(channel, allow_private=False)
        names = await guard.run(lambda: threading.current_thread().name)
        assert names.startswith("headway-notify")
    finally:
        release.set()
        await blocker


def test_channels_stored_before_the_new_masks_are_masked_anew_by_their_migration(tmp_path):
    """Forms stored by an earlier server (a username-only token shown, Apprise's
    defaults added) are made again from each URL; a hidden host stays hidden."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    from headway.storage.database import MIGRATIONS

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    stored = {
        "a": ("json://t0k3n@hooks.example.com/", "json://t0k3n@hooks.example.com/?method=POST"),
        "b": ("ntfy://my-secret-topic", "ntfy://m...c/"),
    }
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0011")
        connection.execute(sa.text("INSERT INTO spaces (uuid, created_at_us) VALUES ('s', 1)"))
        for uuid, (url, redacted) in stored.items():
            connection.execute(
                sa.text(
                    "INSERT INTO channels (uuid, space_uuid, url, redacted, on_completed, "
                    "on_failed, on_stalled, steps, stalled_after_s, created_at_us) VALUES "
                    "(:uuid, 's', :url, :redacted, true, false, false, false, 600, 1)"
                ),
                {"uuid": uuid, "url": url, "redacted": redacted},
            )
        command.upgrade(config, "head")
        masked = dict(connection.execute(sa.text("SELECT uuid, redacted FROM channels")).all())
    engine.dispose()
    assert masked == {"a": "json://****@hooks.example.com/", "b": "ntfy://m...c"}
