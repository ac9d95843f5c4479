"""Live messages on the services that edit: each creates one message and edits it in place,
reports what the service says (429's wait, refused credentials, a service down), and sends
any character so that the service shows it as written. Against local stand-ins written to
each API (tests/live_standins.py) and a real Matrix homeserver (tests/synapse.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from headway.notify.live_send import LIVE_SERVICES, LiveOutcome, LiveText, cannot_edit, post
from headway.notify.urls import ChannelURL, check_channel_url

from . import live_standins
from .live_standins import (
    DISCORD_TOKEN,
    NTFY_PASSWORD,
    SLACK_TOKEN,
    TELEGRAM_TOKEN,
    DiscordStandIn,
    NtfyStandIn,
    StandIn,
)
from .servers import free_port
from .synapse import PASSWORD, Synapse, synapse_server

ntfy_standin = live_standins.ntfy_standin
telegram_standin = live_standins.telegram_standin
discord_standin = live_standins.discord_standin
slack_standin = live_standins.slack_standin

KEY = "5eed0f1ce"
MARKUP = (
    "*bold* _it_ __u__ ~~del~~ `code` ```x``` ||spoiler|| @everyone @here <@123> <#9> "
    "<!channel> <b>&amp;</b> & < > [link](https://example.com) \\ :smile: #tag -# sub"
)
LINK = "https://headway.example/s/Ab_cD*e*"
STANDINS = ["ntfy", "telegram", "discord", "slack"]
SECRETS = (TELEGRAM_TOKEN, DISCORD_TOKEN, SLACK_TOKEN, NTFY_PASSWORD, PASSWORD, KEY)


def text(step: int, *, final: bool = False, title: str = "Deploy web") -> LiveText:
    bar = "█" * step + "░" * (10 - step)
    return LiveText(title, (f"{bar} {step * 10} %", f"{step} of 10", LINK), final)


def shown(live: LiveText, service: str) -> str:
    """The text a stand-in keeps for a message: ntfy keeps the body (the title apart)."""
    return "\n".join(live.lines) if service == "ntfy" else live.whole()


def assert_clean(outcome: LiveOutcome, channel: ChannelURL, *also: str) -> None:
    """No URL, token, password or key in the outcome's detail."""
    for secret in (channel.url, *SECRETS, *also):
        assert secret not in outcome.detail
    assert "://" not in outcome.detail and "127.0.0.1" not in outcome.detail


@pytest.fixture(params=STANDINS)
def standin(request: pytest.FixtureRequest) -> StandIn:
    return request.getfixturevalue(f"{request.param}_standin")


async def post_to(
    stand_in: StandIn,
    live: LiveText,
    *,
    ref: str | None = None,
    endpoint: str | None = None,
    timeout_s: float = 5.0,
) -> LiveOutcome:
    channel = check_channel_url(stand_in.url())  # type: ignore[attr-defined]
    service = LIVE_SERVICES[channel.scheme]
    outcome = await post(
        channel,
        live,
        key=KEY,
        ref=ref,
        allow_private=True,
        timeout_s=timeout_s,
        endpoints={service: endpoint or stand_in.base_url},
    )
    assert_clean(outcome, channel)
    return outcome


def service_of(stand_in: StandIn) -> str:
    return type(stand_in).__name__.removesuffix("StandIn").lower()


async def test_creates_one_message_then_edits_it(standin: StandIn) -> None:
    service = service_of(standin)
    created = await post_to(standin, text(1))
    assert created.ok and created.ref is not None, created
    assert created.detail.startswith("created on")
    edited = await post_to(standin, text(5), ref=created.ref)
    last = await post_to(standin, text(10, final=True), ref=edited.ref)
    assert edited.ok and last.ok, (edited, last)
    assert last.detail.startswith("edited on")
    assert list(standin.messages.values()) == [shown(text(10, final=True), service)]
    assert len([call for call in standin.calls if not call.path.endswith("/clear")]) == 3
    assert edited.ref == last.ref == created.ref  # the message is still the one created


async def test_markup_in_the_title_shows_as_written(standin: StandIn) -> None:
    service = service_of(standin)
    listed = ("1. build", " 2. test", "- lint", "> done", "# head", "-# small")
    live = LiveText(f"Deploy {MARKUP}", (*listed, *text(3).lines), final=False)
    created = await post_to(standin, live)
    assert list(standin.messages.values()) == [shown(live, service)]
    again = text(4, title=f"Deploy {MARKUP} again")
    edited = await post_to(standin, again, ref=created.ref)
    assert created.ok and edited.ok, (created, edited)
    assert list(standin.messages.values()) == [shown(again, service)]
    if isinstance(standin, NtfyStandIn):
        assert list(standin.titles.values()) == [f"Deploy {MARKUP} again"]
    if isinstance(standin, DiscordStandIn):
        body = standin.calls[0].body
        assert body["allowed_mentions"] == {"parse": []}
        assert "\\*bold\\*" in body["content"] and "\\@everyone" in body["content"]
    if service == "slack":
        sent = standin.calls[0].body["text"]
        assert "&lt;b&gt;&amp;amp;&lt;/b&gt;" in sent and sent.count("<") == 0
    if service == "telegram":
        assert all("parse_mode" not in call.body for call in standin.calls)


RETRY_AFTER = {"ntfy": None, "telegram": 7.0, "discord": 7.5, "slack": 7.0}


async def test_rate_limited_reports_the_wait_asked(standin: StandIn) -> None:
    service = service_of(standin)
    created = await post_to(standin, text(1))
    standin.rate_limit(1, retry_after=7.5 if service == "discord" else 7)
    limited = await post_to(standin, text(2), ref=created.ref)
    assert not limited.ok and not limited.refused
    assert limited.status == 429 and limited.retry_after_s == RETRY_AFTER[service]
    assert limited.ref == created.ref  # an edit that failed keeps the reference
    if RETRY_AFTER[service] is not None:
        assert "retry after" in limited.detail
    again = await post_to(standin, text(2), ref=limited.ref)
    assert again.ok, again
    assert list(standin.messages.values()) == [shown(text(2), service)]


async def test_refused_credentials_give_the_message_up(standin: StandIn) -> None:
    standin.refuse_credentials()
    refused = await post_to(standin, text(1))
    assert not refused.ok and refused.refused and refused.ref is None
    assert refused.status == (200 if service_of(standin) == "slack" else 401)
    assert "given up" in refused.detail


async def test_a_service_down_is_a_failure_without_address(standin: StandIn) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    down = await post_to(standin, text(1), endpoint=closed)
    assert not down.ok and not down.refused and down.ref is None
    assert "could not connect" in down.detail


async def test_no_answer_within_the_timeout(standin: StandIn) -> None:
    standin.hang()
    hung = await post_to(standin, text(1), timeout_s=0.5)
    # Whichever fires first on a busy machine, the request's read timeout (the budget's
    # rest) or the budget itself: "no answer in time" or "no answer within 0.5 s".
    assert not hung.ok and not hung.refused and "no answer" in hung.detail


async def test_an_unreadable_reference_is_given_up(standin: StandIn) -> None:
    for ref in ("not json", '{"service": "elsewhere"}', json.dumps({"service": "slack"})):
        outcome = await post_to(standin, text(1), ref=ref)
        assert not outcome.ok and outcome.refused and outcome.ref == ref
    assert standin.calls == []


async def test_telegram_same_text_counts_as_edited(telegram_standin: StandIn) -> None:
    created = await post_to(telegram_standin, text(1))
    same = await post_to(telegram_standin, text(1), ref=created.ref)
    assert same.ok and same.ref == created.ref and "unchanged" in same.detail
    assert same.status == 400


async def test_ntfy_replaces_under_one_sequence_id(ntfy_standin: NtfyStandIn) -> None:
    created = await post_to(ntfy_standin, text(1))
    retried = await post_to(ntfy_standin, text(1))  # the first publish, retried
    edited = await post_to(ntfy_standin, text(5), ref=retried.ref)
    final = await post_to(ntfy_standin, text(10, final=True), ref=edited.ref)
    assert created.ref == retried.ref == final.ref
    assert created.ref == '{"service":"ntfy","sequence_id":"headway-5eed0f1ce"}'
    assert [(c.method, c.path) for c in ntfy_standin.calls] == [
        ("POST", "/headway-live/headway-5eed0f1ce"),
        ("POST", "/headway-live/headway-5eed0f1ce"),
        ("POST", "/headway-live/headway-5eed0f1ce"),
        ("PUT", "/headway-live/headway-5eed0f1ce/clear"),
        ("POST", "/headway-live/headway-5eed0f1ce"),
    ]
    assert ntfy_standin.priorities == {"headway-5eed0f1ce": ["low", "low", "low", "default"]}


CAN_EDIT = [
    "ntfy://my-topic",
    "ntfys://ntfy.example.com/builds",
    "tgram://123456789:AABBCCDDEEFFGGHHIIJJKKLLMMNNOOPPQQR/-1001234",
    "discord://123456/abcdefTOKEN",
    "slack://xoxb-1234-1234-abc123/#general",
    "matrix://user:pass@matrix.example/#room",
    "matrixs://token123@matrix.example/!room:matrix.example",
]


@pytest.mark.parametrize("url", CAN_EDIT)
def test_the_five_services_can_keep_a_live_message(url: str) -> None:
    assert cannot_edit(check_channel_url(url)) is None


def test_what_cannot_keep_a_live_message_says_why() -> None:
    plain = cannot_edit(check_channel_url("json://hooks.example.com/hook"))
    assert plain is not None and "ntfy, Telegram, Discord, Slack" in plain and "Matrix" in plain
    webhook = "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"
    slack = cannot_edit(check_channel_url(webhook))
    assert slack is not None and "bot token" in slack and "xoxb-" in slack
    t2bot = cannot_edit(check_channel_url("matrix://" + "a" * 64))
    assert t2bot is not None and "t2bot" in t2bot and "cannot edit" in t2bot
    no_chat = cannot_edit(check_channel_url(f"tgram://{TELEGRAM_TOKEN}"))
    assert no_chat is not None and "chat id" in no_chat
    no_room = cannot_edit(check_channel_url("matrix://user:pass@matrix.example"))
    assert no_room is not None and "room" in no_room


async def test_a_url_that_cannot_edit_is_refused_without_a_request(
    slack_standin: StandIn,
) -> None:
    webhook = "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"
    channel = check_channel_url(webhook)
    outcome = await post(
        channel, text(1), key=KEY, ref=None, allow_private=True,
        endpoints={"slack": slack_standin.base_url},
    )  # fmt: skip
    assert not outcome.ok and outcome.refused and "bot token" in outcome.detail
    assert slack_standin.calls == []


# Matrix, against Synapse: one homeserver for the module's tests.


@pytest.fixture(scope="module")
def synapse() -> Iterator[Synapse]:
    yield from synapse_server()


async def post_matrix(
    server: Synapse, live: LiveText, *, ref: str | None = None, url: str | None = None
) -> LiveOutcome:
    channel = check_channel_url(url or server.url())
    outcome = await post(channel, live, key=KEY, ref=ref, allow_private=True, timeout_s=10)
    token = json.loads(ref or "{}").get("token") or json.loads(outcome.ref or "{}").get("token")
    assert_clean(outcome, channel, *([token] if token else []))
    return outcome


def replacements(server: Synapse, event_id: str) -> list[dict[str, Any]]:
    return [
        event["content"]
        for event in server.messages()
        if (event["content"].get("m.relates_to") or {}).get("event_id") == event_id
    ]


async def test_matrix_creates_one_message_then_edits_it(synapse: Synapse) -> None:
    live = text(1, title=f"Deploy {MARKUP}")
    created = await post_matrix(synapse, live)
    assert created.ok and created.ref is not None, created
    retried = await post_matrix(synapse, live)  # the first send, retried: taken once
    event_id = json.loads(created.ref)["event"]
    assert json.loads(retried.ref or "{}")["event"] == event_id
    edited = await post_matrix(synapse, text(5), ref=created.ref)
    final = text(10, final=True, title=f"Deploy {MARKUP}")
    last = await post_matrix(synapse, final, ref=edited.ref)
    assert edited.ok and last.ok, (edited, last)
    assert synapse.shown()[event_id] == final.whole()
    originals = [e for e in synapse.messages() if e["event_id"] == event_id]
    assert [e["content"]["body"] for e in originals] == [live.whole()]
    edits = replacements(synapse, event_id)
    assert [e["body"] for e in edits] == [f"* {text(5).whole()}", f"* {final.whole()}"]
    assert all(e["m.relates_to"]["rel_type"] == "m.replace" for e in edits)
    assert "formatted_body" not in edits[-1]["m.new_content"]
    assert json.loads(last.ref or "{}")["rev"] == 3


async def test_matrix_logs_in_again_when_its_token_is_revoked(synapse: Synapse) -> None:
    alias_alone = synapse.url(room="#live")  # its server is the user's
    created = await post_matrix(synapse, text(1), url=alias_alone)
    assert json.loads(created.ref or "{}")["room"] == synapse.room_id
    token = json.loads(created.ref or "{}")["token"]
    synapse.call("POST", "/_matrix/client/v3/logout", {}, token=token)
    edited = await post_matrix(synapse, text(2), ref=created.ref, url=alias_alone)
    assert edited.ok, edited
    assert json.loads(edited.ref or "{}")["token"] != token
    assert synapse.shown()[json.loads(created.ref or "{}")["event"]] == text(2).whole()


async def test_matrix_refusals_give_the_message_up(synapse: Synapse) -> None:
    wrong = synapse.url().replace(f":{PASSWORD}@", ":not-the-password@")
    refused = await post_matrix(synapse, text(1), url=wrong)
    assert not refused.ok and refused.refused and refused.status == 403
    assert "M_FORBIDDEN" in refused.detail
    nowhere = await post_matrix(synapse, text(1), url=synapse.url(room="#nowhere:localhost"))
    assert not nowhere.ok and nowhere.refused and nowhere.status == 404


async def test_matrix_by_room_id_and_access_token(synapse: Synapse) -> None:
    url = f"matrix://{synapse.token}@127.0.0.1:{synapse.port}/{synapse.room_id}"
    created = await post_matrix(synapse, text(1), url=url)
    assert created.ok and "token" not in json.loads(created.ref or "{}"), created
    edited = await post_matrix(synapse, text(2), ref=created.ref, url=url)
    assert edited.ok
    assert synapse.token not in edited.detail
    assert synapse.shown()[json.loads(created.ref or "{}")["event"]] == text(2).whole()
