"""Each API operation as a request to send and the reading of its answer: the rules the
synchronous and asynchronous clients share, while they only move the bytes."""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from .errors import APIError
from .models import Estimate, Space, Task, Value

T = TypeVar("T")
H = TypeVar("H", httpx.Client, httpx.AsyncClient)

# The server's limits (docs/walkthrough.md, "Limits and rules worth knowing"), applied to text the
# client writes on the caller's behalf so that a long line never costs a whole report.
MAX_TEXT = 1024
MAX_TITLE = 200
# The longest wait a Retry-After may ask of the client: a longer one, `inf` included, is
# read as this, so that no answer can hold a report (or the thread sending it) back for long.
MAX_RETRY_AFTER = 60.0
IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request, and how its answer becomes a `T` or an `APIError`.

    A create carries an idempotency `key`, sent as the `Idempotency-Key` header: the same
    call sent again (after a lost answer, a 429 or a 5xx) carries the same key, so that the
    server answers the first answer again instead of creating a second task."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: Mapping[str, Any] | None = None
    params: Mapping[str, str] | None = None
    key: str | None = None

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        headers = {IDEMPOTENCY_HEADER: self.key} if self.key is not None else None
        return http.build_request(
            self.method, self.path, json=self.body, params=self.params, headers=headers
        )

    def result(self, response: httpx.Response) -> T:
        """The answer's typed result; an APIError for an error status or a foreign body."""
        if not response.is_success:
            raise api_error(response)
        try:
            return self.parse(response.json())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise APIError(response.status_code, "the answer is not Headway's JSON") from None


def new_key() -> str:
    """A fresh idempotency key: random, one per logical create."""
    return secrets.token_urlsafe(24)


def api_error(response: httpx.Response) -> APIError:
    """The server's `{"error": ...}` (or what a proxy answered instead) as an APIError."""
    try:
        message = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        message = response.text.strip()[:200] or response.reason_phrase
    wait = retry_after(response.headers.get("retry-after"))
    return APIError(response.status_code, str(message), retry_after=wait)


def retry_after(header: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: a number of seconds or an HTTP date in
    any zone (`-0000` and zone names included), clamped to 0-MAX_RETRY_AFTER (`inf` and
    dates far ahead are MAX_RETRY_AFTER; negative numbers and past dates 0). None when
    absent or unreadable (garbage, `nan`): the caller's own backoff decides. Never raises."""
    text = (header or "").strip()
    if not text or len(text) > 64:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
            if when.tzinfo is None:  # `-0000`: UTC, with no claim about the local zone
                when = when.replace(tzinfo=UTC)
            seconds = (when - (now or datetime.now(UTC))).total_seconds()
        except Exception:  # whatever the date parser makes of garbage
            return None
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def user_agent() -> str:
    from .. import __version__

    return f"headway-client/{__version__}"


def http_client(cls: type[H], url: str, timeout: float) -> H:
    """A `cls` (`httpx.Client` or `httpx.AsyncClient`) for the server at `url`."""
    return cls(base_url=url, timeout=timeout, headers={"user-agent": user_agent()})


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(part, safe="") for part in parts)


def _given(**fields: Any) -> dict[str, Any]:
    """`fields` but those that are None, in order."""
    return {name: value for name, value in fields.items() if value is not None}


def _param(value: datetime | str | int) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return str(value)


def create_space(title: str | None, icon: str | None, key: str | None = None) -> Call[Space]:
    """`key`: the create's idempotency key (a new one if not given)."""
    body = _given(title=title, icon=icon)
    return Call("POST", "/spaces", Space.from_json, body=body, key=key or new_key())


def read_space(
    space: str,
    *,
    limit: int | None = None,
    before: datetime | str | None = None,
    after: datetime | str | None = None,
    state: str | None = None,
) -> Call[Space]:
    given = _given(limit=limit, before=before, after=after, state=state)
    params = {name: _param(value) for name, value in given.items()}
    return Call(
        "GET", _path("spaces", space), lambda data: Space.from_json(data, space), params=params
    )


def create_task(
    space: str,
    title: str | None,
    source: str | None,
    parent: str | None,
    key: str | None = None,
) -> Call[str]:
    """Answers the new task's uuid. `key`: the create's idempotency key (a new one if not
    given)."""
    body = _given(
        title=None if title is None else title[:MAX_TITLE],
        source=None if source is None else source[:MAX_TITLE],
        parent_uuid=parent,
    )
    path = _path("spaces", space, "tasks")
    return Call("POST", path, lambda data: str(data["uuid"]), body=body, key=key or new_key())


def read_task(task: str) -> Call[Task]:
    return Call("GET", _path("tasks", task), Task.from_json)


def read_estimate(task: str) -> Call[Estimate]:
    return Call("GET", _path("tasks", task, "estimate"), Estimate.from_json)


def report(task: str, body: Mapping[str, Any]) -> Call[Task]:
    return Call("PUT", _path("tasks", task), Task.from_json, body=body)


def misplaced_values(call: str, unknown: Mapping[str, object]) -> TypeError:
    """The error of a report given its values as keywords (`docs=5`), as Python's own but
    naming where they go: `values={'docs': 5}`. Raised where the call is (a mistake in
    the code, not a report the server refused), so a job that fails of it says how to
    fix it."""
    names = ", ".join(repr(name) for name in unknown)
    return TypeError(
        f"{call}() got an unexpected keyword argument{'s' if len(unknown) > 1 else ''} {names}:"
        f" a task's own values go in values=, as in {call}(..., values={dict(unknown)!r})"
    )


def report_body(
    current: float | None = None,
    end: float | None = None,
    values: Mapping[str, Value] | None = None,
    log: str | None = None,
    done: bool = False,
) -> dict[str, Any]:
    """The whole new state of a task. `log` becomes `values["log"]`, cut to its last
    non-empty line and the server's 1,024 characters. Only `done` gives `{"done": true}`,
    which finishes the task keeping its last numbers."""
    body = _given(current=current, end=end)
    if values or log is not None:
        merged = dict(values or {})
        line = None if log is None else last_line(log)
        if line:
            merged["log"] = line
        body["values"] = merged
    if done:
        body["done"] = True
    return body


def last_line(text: str) -> str:
    """The last non-empty line of `text`, at most MAX_TEXT characters (cut with "…")."""
    return short_text(next((line for line in reversed(text.splitlines()) if line.strip()), ""))


def short_text(text: str) -> str:
    """`text` within the server's limit for a string value."""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"
