"""The README reads in ten minutes and the pages under docs/ hold the rest: the README's
length, its Quickstart's two commands, a link to every page, examples taken from the
pages (where the tests run or check them), and every relative link and anchor resolving."""

from __future__ import annotations

import re
from urllib.parse import unquote

from . import docs

MARKDOWN = [docs.README, *docs.pages()]


def prose(text: str) -> str:
    """`text` without its fenced code blocks and inline code (whose brackets are no links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "code", text)


def links(text: str) -> list[str]:
    """The targets of the links and images of `text`'s prose."""
    return re.findall(r"\]\(([^)\s]+)\)", prose(text))


def commands(block: str) -> list[str]:
    """The shell commands of a block: its lines without comments, continuations joined."""
    joined = re.sub(r"\\\n", " ", block)
    lines = (re.sub(r"(^|\s)#.*", "", line).strip() for line in joined.splitlines())
    return [line for line in lines if line]


def test_the_readme_is_at_most_400_lines() -> None:
    assert len(docs.page("README").splitlines()) <= 400


def test_the_readme_opens_with_a_short_pitch_then_the_quickstart() -> None:
    text = docs.page("README")
    marks = docs.headings(text)
    assert marks[0][:2] == (1, "Headway")
    assert marks[1][:2] == (2, "Quickstart")
    pitch = text.splitlines()[marks[0][2] + 1 : marks[1][2]]
    paragraphs = "\n".join(pitch).strip().split("\n\n")
    assert len(paragraphs) == 1 and len(paragraphs[0].splitlines()) <= 6


def test_the_quickstart_holds_exactly_the_two_commands() -> None:
    quickstart = docs.section(docs.page("README"), "Quickstart")
    assert len(re.findall(r"^```", quickstart, flags=re.MULTILINE)) == 2  # one block
    [block] = docs.blocks(quickstart, "sh")
    assert commands(block) == ["scripts/serve", "scripts/test"]
    # CI runs the test command as the Quickstart gives it; scripts/fresh-check runs both.
    assert "exec scripts/test\n" in (docs.ROOT / ".ci" / "run").read_text()


def test_every_page_has_a_title_and_is_linked_from_the_readme() -> None:
    linked = {unquote(target.split("#", 1)[0]) for target in links(docs.page("README"))}
    for path in docs.pages():
        text = path.read_text()
        assert text.startswith("# "), f"{path.name} does not start with a # title"
        assert [level for level, _, _ in docs.headings(text)].count(1) == 1, path.name
        assert f"docs/{path.name}" in linked, f"the README does not link docs/{path.name}"


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for source in MARKDOWN:
        for target in links(source.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            where, _, anchor = target.partition("#")
            path = (source.parent / unquote(where)).resolve() if where else source
            name = f"{source.relative_to(docs.ROOT)}: {target}"
            if not path.exists():
                broken.append(f"{name} (no such file)")
            elif anchor and (path.suffix != ".md" or anchor not in docs.anchors(path.read_text())):
                broken.append(f"{name} (no such anchor)")
    assert broken == []


def is_subsequence(lines: list[str], of: list[str]) -> bool:
    rest = iter(of)
    return all(any(line == other for other in rest) for line in lines)


def test_the_readmes_examples_are_taken_from_the_pages() -> None:
    """Each code block of the README (but the Quickstart's) shows lines of one page's blocks
    of its language, in their order: the pages' examples are the ones the tests run or
    check (tests/test_client.py, test_readme_claims.py, ...), so the README's follow them."""
    text = docs.page("README")
    quickstart = docs.section(text, "Quickstart")
    rest = text.replace(quickstart, "")
    found = re.findall(r"^```(\w+)\n(.*?)^```", rest, flags=re.DOTALL | re.MULTILINE)
    assert len(found) >= 8
    pages = [path.read_text() for path in docs.pages()]
    for language, block in found:
        lines = [line.rstrip() for line in block.splitlines() if line.strip()]
        sources = (
            [line.rstrip() for shown in docs.blocks(page, language) for line in shown.splitlines()]
            for page in pages
        )
        assert any(is_subsequence(lines, of) for of in sources), block


def test_the_helpers_read_sections_and_anchors_as_github_does() -> None:
    text = "# Top\n\n## Jobs: what `past` runs say\n\n```sh\n# not a heading\n```\n\n## Jobs\n"
    assert [title for _, title, _ in docs.headings(text)] == [
        "Top",
        "Jobs: what `past` runs say",
        "Jobs",
    ]
    assert docs.anchors(text) == {"top", "jobs-what-past-runs-say", "jobs"}
    assert docs.section(text, "Jobs: what `past` runs say").endswith("```\n")
    assert docs.slug("Completion notifications (webhooks)") == "completion-notifications-webhooks"
    assert docs.slug("MCP: AI agents") == "mcp-ai-agents"
