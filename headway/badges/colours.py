"""The colours of a badge: one per state, the label's, the bar's track, and the WCAG
contrast of the badge's white text on each (at least 4.5:1, AA for normal text)."""

from __future__ import annotations

from typing import Literal

State = Literal["waiting", "running", "stalled", "done", "failed"]
STATES: tuple[State, ...] = ("waiting", "running", "stalled", "done", "failed")

TEXT = "#ffffff"
LABEL = "#555555"
# The message's background per state; the pages' palette where it has the colour
# (headway.css: --accent, --ok, --danger), darker where white text needs it.
BACKGROUND: dict[State, str] = {
    "waiting": "#57606a",
    "running": "#0969da",
    "stalled": "#9a6700",
    "done": "#1a7f37",
    "failed": "#cf222e",
}
# With `bar=1`, the part of the message not yet done is this much darker.
TRACK_SHADE = 0.4


def track(colour: str) -> str:
    """`colour` (`#rrggbb`) darkened by TRACK_SHADE: the bar's track. Darker than the
    fill, so white text keeps at least the fill's contrast on it."""
    channels = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c * (1 - TRACK_SHADE)):02x}" for c in channels)


def contrast(first: str, second: str) -> float:
    """The WCAG 2 contrast ratio of two `#rrggbb` colours, from 1 to 21."""
    high, low = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _luminance(colour: str) -> float:
    r, g, b = (
        c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
        for c in (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    )
    return 0.2126 * r + 0.7152 * g + 0.0722 * b
