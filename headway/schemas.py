"""Request and response models shared by REST, MCP and the OpenAPI description.

Request bodies are decoded straight into these structs, so a limit written here is
enforced everywhere the body is accepted and published in the OpenAPI document.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from .domain import Report
from .errors import BadRequest, HeadwayError, Unprocessable

MAX_BODY = 65_536
MAX_TEXT = 200
MAX_VALUES = 64
MAX_KEY = 64
MAX_VALUE_TEXT = 1_024
MAX_ICON = 64  # code points: the one grapheme cluster of an icon fits the icon column

Text = Annotated[str, Meta(max_length=MAX_TEXT)]
UuidText = Annotated[str, Meta(max_length=64)]
Count = Annotated[int, Meta(ge=0)] | Annotated[float, Meta(ge=0)]
ValueKey = Annotated[str, Meta(min_length=1, max_length=MAX_KEY)]
Value = Annotated[str, Meta(max_length=MAX_VALUE_TEXT)] | int | float | bool
Values = Annotated[dict[ValueKey, Value], Meta(max_length=MAX_VALUES)]


class CreateSpace(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces`."""

    title: Text | None = None
    icon: (
        Annotated[str, Meta(description="One character, counted in grapheme clusters.")] | None
    ) = None


class CreateTask(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces/{space_uuid}/tasks`."""

    title: Text | None = None
    source: Annotated[Text, Meta(description="What is reporting.")] | None = None
    parent_uuid: (
        Annotated[
            UuidText, Meta(description="Makes the new task a step of an existing top-level task.")
        ]
        | None
    ) = None


class ReportBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `PUT /tasks/{task_uuid}`: the task's whole new state."""

    current: Annotated[Count, Meta(description="A count, not a percentage.")] | UnsetType | None = (
        UNSET
    )
    end: (
        Annotated[Count, Meta(description="Omit for a count with no total.")] | UnsetType | None
    ) = UNSET
    values: (
        Annotated[Values, Meta(description="Flat extras; omitted clears them; `log`: one line.")]
        | UnsetType
        | None
    ) = UNSET
    done: (
        Annotated[bool, Meta(description="Finishes the task. Alone, keeps the last numbers.")]
        | UnsetType
    ) = UNSET


class CreateWebhook(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of `POST /spaces/{space_uuid}/webhooks`."""

    url: Annotated[str, Meta(max_length=2048, description="An http(s) URL on a public address.")]


# --- Responses (for the OpenAPI description; the service returns plain dicts) -------------


class ProgressOut(msgspec.Struct):
    current: int | float | None
    end: int | float | None
    ratio: Annotated[float, Meta(ge=0, le=1)] | None
    values: dict[str, str | int | float | bool]
    updated_at: Annotated[str, Meta(extra_json_schema={"format": "date-time"})] | None
    aggregated: bool


class TaskOut(msgspec.Struct):
    uuid: str
    space_uuid: str
    parent_uuid: str | None
    title: str | None
    source: str | None
    created_at: Annotated[str, Meta(extra_json_schema={"format": "date-time"})]
    finished_at: Annotated[str, Meta(extra_json_schema={"format": "date-time"})] | None
    duration: Annotated[int, Meta(description="Whole seconds, set once at completion.")] | None
    progress: ProgressOut | None
    children: list[TaskOut]


class SpaceCreated(msgspec.Struct):
    uuid: Annotated[str, Meta(description="The space's credential: keep it like an API token.")]
    title: str | None
    icon: str | None


class SpaceOut(msgspec.Struct):
    title: str | None
    icon: str | None
    tasks: list[TaskOut]


class TaskCreated(msgspec.Struct):
    uuid: str


class WebhookCreated(msgspec.Struct):
    uuid: str
    url: str
    secret: Annotated[str, Meta(description="`whsec_` + base64; shown only here.")]


class WebhookOut(msgspec.Struct):
    uuid: str
    url: str


class ErrorOut(msgspec.Struct):
    error: str


# --- Decoding ---------------------------------------------------------------------------

_report_decoder = msgspec.json.Decoder(ReportBody)
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def decode_create(body: bytes, model: type[msgspec.Struct]) -> Any:
    """Decode a create body into `model`; any problem is a 422 naming it."""
    decoder = _decoders.get(model)
    if decoder is None:
        decoder = _decoders[model] = msgspec.json.Decoder(model)
    decoded = _decode(decoder, body, Unprocessable)
    for name in decoded.__struct_fields__:
        value = getattr(decoded, name)
        # PostgreSQL text cannot hold NUL; refuse it on every backend alike.
        if isinstance(value, str) and "\x00" in value:
            raise Unprocessable(f"{name} must not contain the NUL character (\\u0000).")
    return decoded


def decode_report(body: bytes, *, what: str = "request body") -> Report:
    """Decode a `PUT` report body; any problem is a 400 naming it."""
    parsed: ReportBody = _decode(_report_decoder, body, BadRequest, what)
    return Report(current=parsed.current, end=parsed.end, values=parsed.values, done=parsed.done)


def _decode(
    decoder: msgspec.json.Decoder[Any],
    body: bytes,
    error: type[HeadwayError],
    what: str = "request body",
) -> Any:
    if not body.strip():
        raise error("The request body must be a JSON object, for example {}.")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError: test it first
        raise error(f"Invalid {what}: {_describe(exc)}.") from None
    except msgspec.DecodeError as exc:
        raise error(f"The request body is not valid JSON: {_describe(exc)}.") from None


def _describe(exc: Exception) -> str:
    text = str(exc)
    if text.startswith("Expected `bool | int | float | str`, got") and "$.values[" in text:
        return "values must be a flat object of numbers, strings or booleans (at $.values[...])"
    text = text.replace("Expected `object`, got", "expected a JSON object, got")
    text = text.replace("Object contains unknown field", "unknown member")
    text = text.replace("Number out of range", "a number is out of range")
    return text


def report_from_query(params: list[tuple[str, str]]) -> Report:
    """A report from `GET /tasks/{uuid}/report` query parameters.

    `current`, `end` and `done` are parsed from text; `values[key]=text` builds the values
    object (its members stay text: a query string carries no types). Anything else is a 400.
    """
    fields: dict[str, Any] = {}
    values: dict[str, str] = {}
    for name, raw in params:
        if name in ("current", "end"):
            fields[name] = _query_number(name, raw)
        elif name == "done":
            fields["done"] = _query_bool(raw)
        elif name.startswith("values[") and name.endswith("]"):
            key = name[7:-1]
            if not key or "[" in key or "]" in key:
                raise BadRequest(
                    f"Query parameter {name!r} is not a flat value: write values[key]=text."
                )
            values[key] = raw
        else:
            raise BadRequest(
                f"Unknown query parameter {name!r}: use current, end, done and values[key]."
            )
    if values:
        fields["values"] = values
    # Run the same validation as a PUT body, so limits are enforced identically.
    return decode_report(msgspec.json.encode(fields), what="query")


_QUERY_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _query_number(name: str, raw: str) -> int | float:
    text = raw.strip()
    # Plain ASCII decimal only: int() and float() also read "1_000" and non-ASCII digits.
    if not _QUERY_NUMBER.fullmatch(text):
        raise BadRequest(f"Query parameter {name!r} must be a number, not {raw!r}.")
    try:
        number: int | float = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise BadRequest(f"Query parameter {name!r} must be a number, not {raw!r}.") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise BadRequest(f"Query parameter {name!r} must be a finite number, not {raw!r}.")
    return number


def _query_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise BadRequest(f"Query parameter 'done' must be true or false, not {raw!r}.")
