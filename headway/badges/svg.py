"""A badge as SVG, in the three styles Shields calls flat, flat-square and for-the-badge,
with an optional bar inside its message.

Text is measured as Shields' badge-maker measures it, from a table of character widths
rather than a browser: the table is pybadges' (DejaVu Sans at 110 units, with kerning
pairs), as its maintained fork `badgepy` ships it (`default-widths.json`). Only the file
is read: importing `badgepy` would bring in `requests`. Each text also carries its
measured `textLength`, so any font that stands in for DejaVu Sans fills the same width.
A text wider than MAX_TEXT_PX is cut, at a grapheme boundary, and ends with "…". Every
string is escaped as XML, and characters XML cannot hold become U+FFFD.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import math
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Literal, NamedTuple
from xml.sax.saxutils import escape

import regex

from ..notify.messages import without_bidi_controls
from .colours import BACKGROUND, LABEL, TEXT, State, track

Style = Literal["flat", "flat-square", "for-the-badge"]
STYLES: tuple[Style, ...] = ("flat", "flat-square", "for-the-badge")

# The widest a label or a message is drawn, in pixels, before it is cut.
MAX_TEXT_PX = 200
ELLIPSIS = "…"
FONT_FAMILY = "DejaVu Sans,Verdana,Geneva,sans-serif"
# The table's unit: widths are of DejaVu Sans at 110 (pixels at 11 px, times ten).
TABLE_SIZE = 110
# Badges drawn, kept by what they show (labels, message, state, bar, style, title).
DRAWN_KEPT = 4096

_GRAPHEMES = regex.compile(r"\X")
# Characters XML 1.0 cannot hold (C0 controls but tab and newlines, lone surrogates,
# U+FFFE and U+FFFF); whitespace runs become one space.
_NOT_XML = regex.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_XML_QUOTES = {'"': "&quot;", "'": "&apos;"}


@dataclass(frozen=True, slots=True)
class _Look:
    height: int
    padding: int  # pixels each side of a text
    font_px: float
    upper: bool  # for-the-badge writes in capitals
    rounded: bool  # rounded corners, a light gradient and a text shadow
    spacing_px: float  # added after each character
    bold_message: bool
    baseline_px: float


_LOOKS: dict[Style, _Look] = {
    "flat": _Look(20, 5, 11, False, True, 0, False, 14),
    "flat-square": _Look(20, 5, 11, False, False, 0, False, 14),
    "for-the-badge": _Look(28, 10, 10, True, False, 1.25, True, 17.5),
}
BOLD_WIDER = 1.1  # bold DejaVu Sans runs about a tenth wider than the table's regular


class Widths(NamedTuple):
    """The width of each character and the kerning of each pair, in table units."""

    characters: dict[str, float]
    kerning: dict[str, float]
    mean: float  # of a character the table lacks


@cache
def widths() -> Widths:
    """The table of character widths, read once from the installed `badgepy`."""
    spec = importlib.util.find_spec("badgepy")
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise RuntimeError("badges need badgepy's width table: pip install 'headway[server]'")
    table = json.loads((Path(next(iter(locations))) / "default-widths.json").read_text("utf-8"))
    return Widths(
        table["character-lengths"], table["kerning-pairs"], table["mean-character-length"]
    )


def text_width(text: str, font_px: float = 11) -> float:
    """The width of `text` in pixels, in DejaVu Sans at `font_px`, from the table."""
    characters, kerning, mean = widths()
    total = 0.0
    previous = ""
    for character in text:
        total += characters.get(character, mean)
        if previous:
            total -= kerning.get(previous + character, 0)
        previous = character
    return total * font_px / TABLE_SIZE


def clean(text: str) -> str:
    """`text` as one line XML can hold: whitespace runs become one space, characters XML
    cannot hold become U+FFFD, bidi controls go (a title cannot turn the server's words
    around in a tooltip)."""
    return " ".join(_NOT_XML.sub("\ufffd", without_bidi_controls(text)).split())


def cut(text: str, max_px: float = MAX_TEXT_PX, font_px: float = 11) -> str:
    """`text` if it fits in `max_px`, else its longest beginning (whole graphemes) that
    fits with "…" after it."""
    if text_width(text, font_px) <= max_px:
        return text
    room = max_px - text_width(ELLIPSIS, font_px)
    kept = ""
    for grapheme in _GRAPHEMES.findall(text):
        if text_width(kept + grapheme, font_px) > room:
            break
        kept += grapheme
    return kept.rstrip() + ELLIPSIS


def xml(text: str) -> str:
    """`text` escaped for XML text and attribute values alike."""
    return escape(text, _XML_QUOTES)


class Drawn(NamedTuple):
    """A badge drawn: its SVG and a strong ETag of it."""

    svg: bytes
    etag: str


@lru_cache(maxsize=DRAWN_KEPT)
def draw(
    label: str,
    message: str,
    state: State,
    style: Style = "flat",
    ratio: float | None = None,
    title: str = "",
) -> Drawn:
    """The badge `label | message` in the colour of `state`; an empty label draws the
    message alone. `ratio` (0 to 1): a bar inside the message, done in the state's
    colour, the rest on its darker track. `title`: the tooltip (default `label: message`).
    Kept by its arguments (DRAWN_KEPT of them): pass `ratio` rounded to what a pixel
    shows."""
    look = _LOOKS[style]
    label, message = clean(label), clean(message) or "?"
    if look.upper:
        label, message = label.upper(), message.upper()
    label = cut(label, MAX_TEXT_PX, look.font_px)
    message = cut(message, MAX_TEXT_PX, look.font_px)
    label_px = _drawn_width(label, look, bold=False) if label else 0.0
    message_px = _drawn_width(message, look, bold=look.bold_message)
    label_w = math.ceil(label_px) + 2 * look.padding if label else 0
    message_w = math.ceil(message_px) + 2 * look.padding
    width, height = label_w + message_w, look.height
    spoken = f"{label}: {message}" if label else message
    colour = BACKGROUND[state]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{xml(spoken)}">',
        f"<title>{xml(clean(title) or spoken)}</title>",
    ]
    if look.rounded:
        parts.append(
            '<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" '
            'stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>'
            f'<clipPath id="r"><rect width="{width}" height="{height}" rx="3" fill="#fff"/>'
            '</clipPath><g clip-path="url(#r)">'
        )
    else:
        parts.append("<g>")
    if label:
        parts.append(f'<rect width="{label_w}" height="{height}" fill="{LABEL}"/>')
    if ratio is None:
        parts.append(f'<rect x="{label_w}" width="{message_w}" height="{height}" fill="{colour}"/>')
    else:
        done_w = round(max(0.0, min(1.0, ratio)) * message_w, 1)
        parts.append(
            f'<rect x="{label_w}" width="{message_w}" height="{height}" '
            f'fill="{track(colour)}"/>'
            f'<rect x="{label_w}" width="{_number(done_w)}" height="{height}" fill="{colour}"/>'
        )
    if look.rounded:
        parts.append(f'<rect width="{width}" height="{height}" fill="url(#s)"/>')
    parts.append(
        f'</g><g fill="{TEXT}" text-anchor="middle" font-family="{FONT_FAMILY}" '
        f'text-rendering="geometricPrecision" font-size="{_number(look.font_px * 10)}">'
    )
    if label:
        parts.append(_text(label, label_w / 2, label_px, look, bold=False))
    parts.append(_text(message, label_w + message_w / 2, message_px, look, bold=look.bold_message))
    parts.append("</g></svg>")
    svg = "".join(parts).encode()
    # Base64, not hex: 32 hex digits would read as a uuid to anyone checking for one.
    digest = base64.urlsafe_b64encode(hashlib.sha256(svg).digest()[:16]).rstrip(b"=")
    return Drawn(svg, f'"{digest.decode()}"')


def _drawn_width(text: str, look: _Look, *, bold: bool) -> float:
    px = text_width(text, look.font_px) * (BOLD_WIDER if bold else 1.0)
    return px + look.spacing_px * len(_GRAPHEMES.findall(text))


def _text(text: str, centre: float, px: float, look: _Look, *, bold: bool) -> str:
    """One text, centred at `centre`, drawn at ten times its size and scaled down (as
    Shields does) so that its position keeps a tenth of a pixel."""
    attributes = (
        f'x="{_number(centre * 10)}" transform="scale(.1)" textLength="{round(px * 10)}"'
        + (' font-weight="bold"' if bold else "")
    )
    escaped = xml(text)
    shadow = ""
    if look.rounded:
        shadow = (
            f'<text aria-hidden="true" {attributes} y="{_number((look.baseline_px + 1) * 10)}" '
            f'fill="#010101" fill-opacity=".3">{escaped}</text>'
        )
    return f'{shadow}<text {attributes} y="{_number(look.baseline_px * 10)}">{escaped}</text>'


def _number(value: float) -> str:
    """A coordinate as SVG writes it: no trailing `.0`."""
    return str(int(value)) if value == int(value) else f"{value:.1f}"
