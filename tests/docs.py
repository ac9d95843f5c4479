"""The project's Markdown, for the tests that check what it says: README.md and the pages
under docs/, their headings and sections (outside code blocks), their code blocks, and
headings' anchors as GitHub makes them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def path(name: str) -> Path:
    """README.md for "README", else the page docs/{name}.md."""
    return README if name == "README" else DOCS / f"{name}.md"


def page(name: str) -> str:
    """The text of README.md ("README") or of the page docs/{name}.md."""
    return path(name).read_text()


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def headings(text: str) -> list[tuple[int, str, int]]:
    """Each heading outside code blocks: (level, title, line number from 0)."""
    found, fence = [], False
    for number, line in enumerate(text.split("\n")):
        if line.startswith("```"):
            fence = not fence
        elif not fence and (match := re.match(r"(#{1,6}) (.+)", line)):
            found.append((len(match[1]), match[2].strip(), number))
    return found


def section(text: str, title: str) -> str:
    """The section headed `title` (any level), its heading included, up to the next heading
    of its level or above."""
    lines = text.split("\n")
    marks = headings(text)
    for index, (level, name, start) in enumerate(marks):
        if name == title:
            end = next((n for lv, _, n in marks[index + 1 :] if lv <= level), len(lines))
            return "\n".join(lines[start:end])
    raise KeyError(f"no heading {title!r}")


def blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks in `language`, each without its fences."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def blocks_with_lines(text: str, language: str) -> list[tuple[str, int]]:
    """As blocks(), with the line (from 1) each block's first line is on."""
    pattern = rf"^```{language}\n(.*?)^```"
    return [
        (found.group(1), text[: found.start(1)].count("\n") + 1)
        for found in re.finditer(pattern, text, flags=re.DOTALL | re.MULTILINE)
    ]


def slug(title: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation other than `-` and
    `_` removed, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings (a repeated one gets `-1`, `-2`, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for _, title, _ in headings(text):
        base = slug(title)
        count = seen.get(base, 0)
        out.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return out
