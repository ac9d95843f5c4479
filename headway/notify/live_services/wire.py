"""What the live services share: a live message's text and a post's outcome, the protocol
each service module follows, and one post's HTTP exchange on a sending thread, whose
outcomes never hold a token or the channel's URL."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ...delivery.policy import held_retry_after_s
from .. import guard
from ..send import parse_retry_after

MAX_ANSWER_BYTES = 1 << 20  # an answer is a small JSON document; more is not read


@dataclass(frozen=True)
class LiveText:
    """A live message's text, as plain text: the services that render markup are sent it
    escaped, so that every character shows as written."""

    title: str
    lines: tuple[str, ...]  # the body's lines: the bar, counts, log line, time left, link
    final: bool  # the task finished (or failed): the last text, sent to alert

    def whole(self) -> str:
        """The title and the lines, one to a line."""
        return "\n".join((self.title, *self.lines))


@dataclass(frozen=True)
class LiveOutcome:
    """What one post did. `ref` is the message's reference (JSON text) to edit it next time:
    after a failed edit, the one passed in. `detail` is a sentence for the channel's
    deliveries list, with no URL or token. `retry_after_s`: the service asked to wait
    (clamped to 0-6 h). `refused`: the credentials were refused or the target is gone
    (401, 403, 404, Slack's invalid_auth...): give this message up."""

    ok: bool
    ref: str | None
    detail: str
    retry_after_s: float | None = None
    refused: bool = False
    status: int | None = None


@dataclass(frozen=True)
class Answer:
    """A service's answer: its status, its JSON body (None when not JSON) and its
    Retry-After in seconds."""

    status: int
    body: Any
    retry_after_s: float | None

    @property
    def fields(self) -> dict[str, Any]:
        """The body when it is a JSON object, else an empty one."""
        return self.body if isinstance(self.body, dict) else {}

    @property
    def success(self) -> bool:
        return 200 <= self.status < 300


class NoAnswer(Exception):
    """A request got no answer (the attempt's `failure` says why, without the URL)."""


class LiveService(Protocol):
    """One service's module: why a URL cannot keep a live message, and the pair that
    creates the message and edits it. Both run on a sending thread inside `exchange`."""

    NAME: str
    REF_FIELDS: tuple[str, ...]

    def unfit(self, plugin: Any) -> str | None: ...

    def create(self, exchange: Exchange, plugin: Any, text: LiveText, key: str) -> LiveOutcome: ...

    def edit(
        self, exchange: Exchange, plugin: Any, text: LiveText, key: str, ref: dict[str, Any]
    ) -> LiveOutcome: ...


class Exchange:
    """One post's requests: on this sending thread's attempt (`guard.attempt`), with no
    redirect, each inside what is left of the post's deadline; and the outcomes made of
    their answers, scrubbed of every secret the channel holds."""

    def __init__(
        self,
        name: str,
        attempt: guard.Attempt,
        *,
        deadline: float,
        endpoint: str | None,
        ref: str | None,
        secrets: list[str],
    ) -> None:
        import requests

        self.name = name  # the service, as the details name it
        self.attempt = attempt
        self.deadline = deadline
        self.endpoint = endpoint.rstrip("/") if endpoint else None  # a base URL replacing the own
        self.ref = ref  # the reference passed in: kept by a failed edit
        self.secrets = [secret for secret in secrets if len(secret) >= 4]
        self.session = requests.Session()

    def call(
        self,
        method: str,
        url: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> Answer:
        """One request; its answer, or NoAnswer."""
        import requests

        left = max(self.deadline - time.monotonic(), 0.1)
        try:
            response = self.session.request(
                method, url, json=json_body, data=data, headers=headers, params=params,
                auth=auth, timeout=(left, left), allow_redirects=False, stream=True,
            )  # fmt: skip
            with response:
                raw = self._read(response)
        except requests.RequestException as exc:
            raise NoAnswer(self.attempt.failure or type(exc).__name__) from None
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        wait = parse_retry_after(response.headers.get("retry-after"))
        return Answer(response.status_code, body, wait)

    def done(self, ref: dict[str, Any], answer: Answer, verb: str) -> LiveOutcome:
        """The outcome of a post the service took (`verb`: created, edited...)."""
        detail = f"{verb} on {self.name} (HTTP {answer.status})"
        text = json.dumps(ref, separators=(",", ":"))
        return LiveOutcome(True, text, detail, None, False, answer.status)

    def failed(
        self,
        answer: Answer | None,
        reason: str | None = None,
        *,
        refused: bool = False,
        wait: Any = None,
    ) -> LiveOutcome:
        """The outcome of a post the service did not take: `reason` is the service's own
        word for it (an error code, a description), `wait` the seconds it asked to wait in
        its body (anything but a number: its Retry-After)."""
        if answer is None:
            return LiveOutcome(False, self.ref, self.scrub(f"{self.name}: {reason}"), None, refused)
        if isinstance(wait, int | float):
            wait = held_retry_after_s(float(wait))
        else:
            wait = answer.retry_after_s
        words = f" ({reason[:160]})" if reason else ""
        asks = f"; it asks to retry after {wait:g} s" if wait is not None else ""
        gives_up = "; given up" if refused else ""
        detail = f"{self.name} answered HTTP {answer.status}{words}{asks}{gives_up}"
        return LiveOutcome(False, self.ref, self.scrub(detail), wait, refused, answer.status)

    def scrub(self, detail: str) -> str:
        """`detail` with every secret of the channel masked (a service may echo one)."""
        for secret in self.secrets:
            detail = detail.replace(secret, "****")
        return detail

    def close(self) -> None:
        self.session.close()

    def _read(self, response: Any) -> bytes:
        """The answer's body, at most MAX_ANSWER_BYTES, read before the deadline."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_content(16384):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES or time.monotonic() > self.deadline:
                break
        return b"".join(chunks)


def cut(text: str, limit: int, measure: Callable[[str], int] = len) -> str:
    """`text` within `limit` as `measure` counts it, cut with an ellipsis when longer."""
    if measure(text) <= limit:
        return text
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits with the ellipsis
        middle = (low + high + 1) // 2
        if measure(text[:middle] + "…") <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low] + "…"


def utf16_units(text: str) -> int:
    """Length as Telegram and JavaScript count it (an emoji outside the BMP is two)."""
    return len(text.encode("utf-16-le")) // 2


def utf8_bytes(text: str) -> int:
    return len(text.encode())
