"""Each API operation as a request to send and the reading of its answer: the rules the
synchronous and asynchronous clients share, while they only move the bytes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from .errors import APIError
from .models import Space, Task, Value

T = TypeVar("T")

# The server's limits (README, "Limits and rules worth knowing"), applied to text the
# client writes on the caller's behalf so that a long line never costs a whole report.
MAX_TEXT = 1024
MAX_TITLE = 200


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request, and how its answer becomes a `T` or an `APIError`."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: Mapping[str, Any] | None = None
    params: Mapping[str, str] | None = None

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        return http.build_request(self.method, self.path, json=self.body, params=self.params)

    def result(self, response: httpx.Response) -> T:
        """The answer's typed result; an APIError for an error status or a foreign body."""
        if not response.is_success:
            raise api_error(response)
        try:
            data = response.json()
        except ValueError:
            raise APIError(response.status_code, "the answer is not JSON") from None
        return self.parse(data)


def api_error(response: httpx.Response) -> APIError:
    """The server's `{"error": ...}` (or what a proxy answered instead) as an APIError."""
    try:
        message = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        message = response.text.strip()[:200] or response.reason_phrase
    return APIError(
        response.status_code,
        str(message),
        retry_after=retry_after(response.headers.get("retry-after")),
    )


def retry_after(header: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date)."""
    if not header:
        return None
    try:
        return max(float(header), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def user_agent() -> str:
    from .. import __version__

    return f"headway-client/{__version__}"


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(part, safe="") for part in parts)


def _timestamp(value: datetime | str) -> str:
    if isinstance(value, str):
        return value
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def create_space(title: str | None, icon: str | None) -> Call[Space]:
    body = {name: value for name, value in (("title", title), ("icon", icon)) if value is not None}
    return Call("POST", "/spaces", Space.from_json, body=body)


def read_space(
    space: str,
    *,
    limit: int | None = None,
    before: datetime | str | None = None,
    after: datetime | str | None = None,
    state: str | None = None,
) -> Call[Space]:
    params = {}
    if limit is not None:
        params["limit"] = str(limit)
    if before is not None:
        params["before"] = _timestamp(before)
    if after is not None:
        params["after"] = _timestamp(after)
    if state is not None:
        params["state"] = state
    return Call(
        "GET", _path("spaces", space), lambda data: Space.from_json(data, space), params=params
    )


def create_task(space: str, title: str | None, source: str | None, parent: str | None) -> Call[str]:
    """Answers the new task's uuid."""
    body: dict[str, str] = {}
    if title is not None:
        body["title"] = title[:MAX_TITLE]
    if source is not None:
        body["source"] = source[:MAX_TITLE]
    if parent is not None:
        body["parent_uuid"] = parent
    return Call("POST", _path("spaces", space, "tasks"), lambda data: data["uuid"], body=body)


def read_task(task: str) -> Call[Task]:
    return Call("GET", _path("tasks", task), Task.from_json)


def report(task: str, body: Mapping[str, Any]) -> Call[Task]:
    return Call("PUT", _path("tasks", task), Task.from_json, body=body)


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
    body: dict[str, Any] = {}
    if current is not None:
        body["current"] = current
    if end is not None:
        body["end"] = end
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
    line = next((line for line in reversed(text.splitlines()) if line.strip()), "")
    return line if len(line) <= MAX_TEXT else line[: MAX_TEXT - 1] + "…"


def short_text(text: str) -> str:
    """`text` within the server's limit for a string value."""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"
