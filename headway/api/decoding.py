"""Request bodies and report URLs decoded into the models of `schemas`: a problem with a
body is one sentence a person can act on (400 on reports, 422 on creates), never the
decoder's own words; query strings are read strictly (UTF-8, no repeated parameter)."""

from __future__ import annotations

import enum
import json
import re
import sys
import typing
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote_to_bytes

import msgspec

from ..domain.errors import BadRequest, HeadwayError, Unprocessable
from ..domain.schemas import ReportBody
from ..domain.tasks import Report

_report_decoder = msgspec.json.Decoder(ReportBody)
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def decode_create(body: bytes, model: type[msgspec.Struct]) -> Any:
    """Decode a create body into `model`; any problem is a 422 naming it."""
    decoder = _decoders.get(model)
    if decoder is None:
        decoder = _decoders[model] = msgspec.json.Decoder(model)
    decoded = _decode(decoder, body, Unprocessable, members=model.__struct_fields__, model=model)
    for name in decoded.__struct_fields__:
        value = getattr(decoded, name)
        # PostgreSQL text cannot hold NUL; refuse it on every backend alike.
        if isinstance(value, str) and "\x00" in value:
            raise Unprocessable(f"{name} must not contain the NUL character (\\u0000).")
    return decoded


def decode_report(body: bytes, *, what: str = "request body") -> Report:
    """Decode a `PUT` report body; any problem is a 400 naming it."""
    parsed: ReportBody = _decode(_report_decoder, body, BadRequest, what, _REPORT_MEMBERS)
    for name in ("current", "end"):
        if _beyond_float(getattr(parsed, name)):
            raise BadRequest(f"Invalid {what}: {name} {_BEYOND_FLOAT}.")
    if isinstance(parsed.values, dict):
        for key, value in parsed.values.items():
            if _beyond_float(value):
                raise BadRequest(f"Invalid {what}: values[{key!r}] {_BEYOND_FLOAT}.")
    return Report(current=parsed.current, end=parsed.end, values=parsed.values, done=parsed.done)


_FLOAT_MAX = sys.float_info.max
_BEYOND_FLOAT = f"must be a finite number that fits a 64-bit float (at most {_FLOAT_MAX:.4g})"


def _beyond_float(number: object) -> bool:
    # Only a whole number can be: msgspec refuses a float literal beyond the largest float.
    # Such a number is refused before it is stored, since every reader would divide by it.
    return type(number) is int and not -_FLOAT_MAX <= number <= _FLOAT_MAX


def _decode(
    decoder: msgspec.json.Decoder[Any],
    body: bytes,
    error: type[HeadwayError],
    what: str = "request body",
    members: Sequence[str] = (),
    model: type[msgspec.Struct] | None = None,
) -> Any:
    if not body.strip():
        raise error("The request body must be a JSON object, for example {}.")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError: test it first
        raise error(f"Invalid {what}: {_describe(exc, members, model)}.") from None
    except msgspec.DecodeError as exc:
        if _SURROGATE_ESCAPE.search(body):
            # msgspec's words for it ("Input data was truncated") would mislead.
            raise error(
                "The request body is not valid JSON text: it holds a \\u escape of a lone "
                "UTF-16 surrogate (\\ud800 to \\udfff), which is no character."
            ) from None
        raise error(f"The request body is not valid JSON: {_describe(exc)}.") from None
    except UnicodeDecodeError as exc:  # raised by msgspec for a string that is not UTF-8
        raise error(
            f"The request body is not valid JSON: it is not UTF-8 (at byte {exc.start})."
        ) from None


# A high surrogate escape not followed by a low one, or a low one not after a high one.
_SURROGATE_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _describe(
    exc: Exception, members: Sequence[str] = (), model: type[msgspec.Struct] | None = None
) -> str:
    """msgspec's words for what is wrong with a body, as a sentence a person can act on,
    naming the member (`members`: the body's own, listed when an unknown one is sent; a
    value outside a member's choices lists them, read from `model`)."""
    text = str(exc)
    choice = _ENUM.fullmatch(text)
    if choice is not None:
        return _not_a_choice(choice["value"], choice["at"], model)
    if text.startswith("Expected `bool | int | float | str`, got") and "$.values[" in text:
        return "values must be a flat object of numbers, strings or booleans (at $.values[...])"
    unknown = _UNKNOWN.fullmatch(text)
    if unknown is not None:
        return _unknown_member(unknown["name"], members)
    expected = _EXPECTED.fullmatch(text)
    if expected is not None:
        return _wrong_type(expected["types"], expected["got"], expected["bound"], expected["at"])
    text = text.replace("Number out of range", "a number is out of range")
    return text


_UNKNOWN = re.compile(r"Object contains unknown field `(?P<name>[^`]*)`")
_ENUM = re.compile(r"Invalid enum value (?P<value>.+?)(?: - at `\$(?P<at>[^`]*)`)?")
_EXPECTED = re.compile(
    r"Expected `(?P<types>[^`]+)`(?:, got `(?P<got>[^`]+)`)?(?P<bound>[^`]*?)"
    r"(?: - at `\$(?P<at>[^`]*)`)?"
)
_TYPE_WORDS = {
    "str": "a string",
    "bool": "true or false",
    "object": "a JSON object",
    "array": "an array",
    "null": "null",
}
_GOT_WORDS = {"int": "a number", "float": "a number", "bool": "a boolean (true or false)"}
_GOT_WORDS |= {"str": "a string", "object": "an object", "array": "an array", "null": "null"}
_REPORT_MEMBERS = ("current", "end", "done", "values")


def _unknown_member(name: str, members: Sequence[str]) -> str:
    if tuple(members) == _REPORT_MEMBERS:  # say where reporters' own data goes
        return (
            f"unknown member {name!r}: a report has current, end, done and values; put "
            f'{name!r} in values, as {{"values": {{{json.dumps(name)}: ...}}}}'
        )
    if members:
        listed = ", ".join(members[:-1]) + f" and {members[-1]}" if len(members) > 1 else members[0]
        return f"unknown member {name!r}: the members are {listed}"
    return f"unknown member {name!r}"


def _not_a_choice(value: str, at: str | None, model: type[msgspec.Struct] | None) -> str:
    """A value that is none of a member's choices: the choices, where `model` says them."""
    member = f"{at.lstrip('.')!r}" if at else "the body"
    choices = _choices(model, at or "")
    if not choices:
        return f"{member} must not be {value}"
    listed = ", ".join(map(repr, choices[:-1])) + f" or {choices[-1]!r}"
    return f"{member} must be one of {listed}, not {value}"


def _choices(model: type[msgspec.Struct] | None, at: str) -> list[Any]:
    """The values a member of `model` may take, at `at` (`.events[0]`), in the order the
    model declares them: those of the literal or enum it is, or holds (a list of them,
    or null); [] if it is none."""
    name = re.match(r"\.(\w+)", at)
    if model is None or name is None:
        return []
    kind: Any = typing.get_type_hints(model).get(name[1])
    while kind is not None:
        if typing.get_origin(kind) is typing.Literal:
            return list(typing.get_args(kind))
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            return [member.value for member in kind]
        held = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        kind = held[0] if held else None
    return []


def _wrong_type(types: str, got: str | None, bound: str, at: str | None) -> str:
    names = [name.strip() for name in types.split("|")]
    words = []
    if "int" in names or "float" in names:
        words.append("a number")
    words += [_TYPE_WORDS.get(name, f"`{name}`") for name in names if name not in ("int", "float")]
    member = f"{at.lstrip('.')!r}" if at else "the body"
    wanted = " or ".join(words)
    if got is not None:
        sentence = f"{member} must be {wanted}, not {_GOT_WORDS.get(got, got)}"
        if got == "str" and words[0] == "a number":
            sentence += ' (write the number without quotes, as 3 rather than "3")'
        return sentence
    bound = bound.strip()
    length = re.fullmatch(r"of length (<=|>=) (\d+)", bound)
    if length is not None:
        most = "at most" if length[1] == "<=" else "at least"
        if names == ["object"]:  # a length of an object is its members, of an array its items
            return f"{member} must have {most} {length[2]} members"
        if names == ["array"]:
            return f"{member} must have {most} {length[2]} items"
        return f"{member} must be {most} {length[2]} characters long"
    number = re.fullmatch(r"(<=|>=|<|>) (\S+)", bound)
    if number is not None:
        relation = {"<=": "at most", ">=": "at least", "<": "below", ">": "above"}[number[1]]
        return f"{member} must be {wanted}, {relation} {number[2]}"
    return f"{member} must be {wanted}" + (f" {bound}" if bound else "")


def query_params(query_string: bytes) -> dict[str, str]:
    """The parameters of a raw query string (`scope["query_string"]`), each named once.

    Stricter than Starlette's `request.query_params`: a name or value that is not UTF-8
    once percent-decoded is a 400 (never text with U+FFFD in place of the bytes), and so
    is a name given twice (which of the two was meant cannot be known).
    """
    params: dict[str, str] = {}
    for field in query_string.split(b"&"):
        if not field:
            continue
        raw_name, _, raw_value = field.partition(b"=")
        name = _query_text(raw_name, "A query parameter name")
        value = _query_text(raw_value, f"Query parameter {name!r}")
        if name in params:
            raise BadRequest(f"Query parameter {name!r} is given more than once: give it once.")
        params[name] = value
    return params


def _query_text(raw: bytes, what: str) -> str:
    try:
        return unquote_to_bytes(raw.replace(b"+", b" ")).decode()
    except UnicodeDecodeError:
        raise BadRequest(f"{what} is not valid UTF-8 once percent-decoded.") from None


def report_from_query(query_string: bytes) -> Report:
    """A report from the raw query string of `GET /tasks/{uuid}/report`.

    `current`, `end` and `done` are parsed from text; `values[key]=text` builds the values
    object (its members stay text: a query string carries no types). Anything else is a 400,
    and so is anything `query_params` refuses.
    """
    fields: dict[str, Any] = {}
    values: dict[str, str] = {}
    for name, raw in query_params(query_string).items():
        if name in ("current", "end"):
            fields[name] = _query_number(name, raw)
        elif name == "done":
            fields["done"] = _QUERY_BOOLS.get(raw.strip().lower())
            if fields["done"] is None:
                raise BadRequest(f"Query parameter 'done' must be true or false, not {raw!r}.")
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
        number = float(text)  # the pattern is a float's: an exponent too large is inf
    if number != number or number in (float("inf"), float("-inf")):
        raise BadRequest(f"Query parameter {name!r} must be a finite number, not {raw!r}.")
    return number


_QUERY_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
