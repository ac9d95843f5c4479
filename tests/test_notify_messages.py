"""The text of channel messages: finished, failed, stalled, moving again, digests and the
test message; durations as people say them; never a space or task uuid."""

from __future__ import annotations

import json
import uuid
from typing import Any

import msgspec
import pytest

from headway.domain.durations import duration_words
from headway.domain.tasks import Progress, TaskRow, view
from headway.notify import messages
from headway.notify.messages import digest, failure, finished, recovered, share_link, stalled

SPACE = str(uuid.uuid4())
LINK = share_link("https://headway.example/", "5f0c2a4e-0000-4000-8000-00000000abcd")


def task(
    title: str | None = "Deploy",
    *,
    current: float | None = None,
    end: float | None = None,
    values: dict[str, Any] | None = None,
    finished_at: str | None = "2026-11-24T10:03:12.000000Z",
    duration: int | None = 192,
    updated_at: str | None = "2026-11-24T10:03:12.000000Z",
    children: list[dict[str, Any]] | None = None,
    parent: str | None = None,
) -> dict[str, Any]:
    """A task as `GET /tasks/{uuid}` shows it."""
    children = children or []
    ratio = None
    if finished_at:
        ratio = 1
    elif children:
        ratio = sum(1 for c in children if c["finished_at"]) / len(children)
    elif end and current is not None:
        ratio = min(current / end, 1)
    progress: dict[str, Any] | None = {
        "current": sum(1 for c in children if c["finished_at"]) if children else current,
        "end": len(children) if children else end,
        "ratio": ratio,
        "values": values or {},
        "updated_at": updated_at,
        "aggregated": bool(children),
    }
    if not children and current is None and not values and updated_at is None:
        progress = None
    return {
        "uuid": str(uuid.uuid4()),
        "space_uuid": SPACE,
        "parent_uuid": parent,
        "title": title,
        "source": None,
        "created_at": "2026-11-24T10:00:00.000000Z",
        "finished_at": finished_at,
        "duration": duration if finished_at else None,
        "progress": progress,
        "children": children,
    }


def uuids_in(data: dict[str, Any]) -> set[str]:
    found = {data["uuid"], data["space_uuid"]} | ({data["parent_uuid"]} - {None})
    for child in data["children"]:
        found |= uuids_in(child)
    return found


def assert_no_uuid(message: messages.Message, *tasks: dict[str, Any]) -> None:
    text = f"{message.title}\n{message.body}".lower()
    for data in tasks:
        for value in uuids_in(data):
            assert value not in text
            assert value.replace("-", "") not in text


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0, "under 0.1 s"),
        (0.04, "under 0.1 s"),
        (0.4, "0.4 s"),
        (0.99, "1.0 s"),
        (1.94, "1.9 s"),
        (9.94, "9.9 s"),
        (9.96, "10 s"),
        (12.5, "13 s"),
        (45, "45 s"),
        (59.4, "59 s"),
        (59.6, "1 min"),
        (60, "1 min"),
        (192, "3 min 12 s"),
        (600, "10 min"),
        (3600, "1 h"),
        (7500, "2 h 5 min"),
        (7512, "2 h 5 min"),
        (86_400, "1 d"),
        (3 * 86_400 + 4 * 3600 + 59, "3 d 4 h"),
        (192.9, "3 min 12 s"),
        (-5, "under 0.1 s"),
        (float("inf"), "under 0.1 s"),
        (12.9, "13 s"),
    ],
)
def test_durations_read_as_people_say_them(seconds: float, said: str) -> None:
    assert duration_words(seconds) == said


@pytest.mark.parametrize(
    ("finished_at", "duration", "said"),
    [
        ("2026-11-24T10:00:01.940000Z", 1, "1.9 s"),
        ("2026-11-24T10:00:00.999000Z", 0, "1.0 s"),
        ("2026-11-24T10:00:00.000400Z", 0, "under 0.1 s"),
        ("2026-11-24T10:00:14.600000Z", 14, "15 s"),
    ],
)
def test_a_finish_says_its_length_to_the_microsecond_not_the_whole_seconds(
    finished_at: str, duration: int, said: str
) -> None:
    message = finished(task(finished_at=finished_at, duration=duration))
    assert message.title == f"✓ Deploy finished in {said}"


def test_a_finished_task_says_how_long_it_took() -> None:
    data = task(current=10, end=10, values={"log": "all done"})
    message = finished(data, space_title="Nightly builds", link=LINK)
    assert message.title == "✓ Deploy finished in 3 min 12 s"
    assert message.kind == "completed" and message.level == "success"
    assert message.body.splitlines() == [
        "Nightly builds › Deploy",
        "Progress: 10 / 10 (finished)",
        "Log: all done",
        LINK,
    ]
    assert_no_uuid(message, data)


def test_a_task_whose_error_is_set_failed() -> None:
    data = task(values={"error": "exit code 3", "exit_code": 3, "log": "migrating"})
    message = finished(data)
    assert message.title == "✗ Deploy failed: exit code 3"
    assert message.kind == "failed" and message.level == "failure"
    assert "Log: migrating" in message.body
    assert failure(data) == "exit code 3"


@pytest.mark.parametrize("error", [3, "", "   ", None, True])
def test_an_error_that_is_not_a_non_empty_string_is_only_a_value(error: object) -> None:
    data = task(values={"error": error})
    assert finished(data).title.startswith("✓ Deploy finished")
    assert failure(data) is None


def test_an_unfinished_task_has_not_failed() -> None:
    assert failure(task(values={"error": "boom"}, finished_at=None)) is None


def test_a_parent_with_a_failed_step_failed_and_names_it() -> None:
    steps = [
        task("Build", values={}),
        task("Run migrations", values={"error": "exit code 3"}),
        task("Smoke test", values={"log": "ok"}),
    ]
    parent = task(children=steps)
    message = finished(parent, space_title="Releases")
    assert message.title == "✗ Deploy failed: 1 of 3 steps failed (Run migrations: exit code 3)"
    assert "Steps: 3 of 3 done" in message.body
    assert_no_uuid(message, parent)


def test_a_parent_that_failed_itself_and_in_steps_says_both_and_bounds_the_steps() -> None:
    steps = [task(f"Step {n}", values={"error": f"exit code {n}"}) for n in range(1, 6)]
    parent = task(values={"error": "rolled back"}, children=steps)
    assert finished(parent).title == (
        "✗ Deploy failed: rolled back; 5 of 5 steps failed (Step 1: exit code 1; "
        "Step 2: exit code 2; Step 3: exit code 3; 2 more)"
    )


def test_a_step_still_running_has_not_failed_its_parent() -> None:
    steps = [task("Build"), task("Late", values={"error": "not yet"}, finished_at=None)]
    assert finished(task(children=steps)).kind == "completed"


def test_a_flat_stall_says_where_it_stopped_and_for_how_long() -> None:
    data = task(current=80, end=100, finished_at=None)
    message = stalled(data, reason="flat", for_s=600)
    assert message.title == "⏸ Deploy stalled at 80%: no progress for 10 min"
    assert message.kind == "stalled" and message.level == "warning"
    assert "Progress: 80 / 100 (80%)" in message.body


def test_a_silent_stall_says_how_long_nothing_came() -> None:
    data = task(current=80, end=100, finished_at=None)
    assert stalled(data, reason="silent", for_s=600).title == (
        "⏸ Deploy stalled at 80%: no report for 10 min"
    )


def test_a_task_that_never_reported_stalls_since_it_started() -> None:
    data = task(finished_at=None, updated_at=None)
    assert data["progress"] is None
    assert stalled(data, reason="silent", for_s=600).title == (
        "⏸ Deploy stalled: no report since it started 10 min ago"
    )


def test_a_stall_counted_from_a_restart_says_the_server_restarted() -> None:
    data = task(finished_at=None, updated_at=None)
    assert stalled(data, reason="silent", for_s=720, restarted=True).title == (
        "⏸ Deploy stalled: no report since the server restarted 12 min ago"
    )


def test_a_stall_without_a_known_ratio_says_no_percentage() -> None:
    data = task(current=80, finished_at=None)
    assert stalled(data, reason="flat", for_s=90).title == (
        "⏸ Deploy stalled: no progress for 1 min 30 s"
    )


def test_moving_again_says_where_it_is() -> None:
    data = task(current=85, end=100, finished_at=None)
    message = recovered(data, link=LINK)
    assert message.title == "▶ Deploy is moving again: 85%"
    assert message.body.endswith(LINK)


def test_an_untitled_task_is_called_so() -> None:
    assert finished(task(None)).title == "✓ Untitled task finished in 3 min 12 s"


def test_a_uuid_quoted_in_a_title_or_log_line_is_taken_out() -> None:
    data = task(values={"log": "x"})
    data["title"] = f"Deploy {data['uuid']}"
    data["progress"]["values"]["log"] = f"reported to /spaces/{SPACE.upper()} and {SPACE}"
    message = finished(data, space_title=f"Space {SPACE.replace('-', '')}")
    assert_no_uuid(message, data)
    assert "Deploy …" in message.title


def test_a_long_log_line_is_cut() -> None:
    message = finished(task(values={"log": "x" * 1000}))
    [log] = [line for line in message.body.splitlines() if line.startswith("Log: ")]
    assert len(log) == len("Log: ") + messages.MAX_LOG_CHARS and log.endswith("…")


def test_a_task_view_reads_as_its_json() -> None:
    row = TaskRow(str(uuid.uuid4()), SPACE, None, "Deploy", None, 1_000_000, 193_000_000, 192)
    values = msgspec.Raw(json.dumps({"error": "exit code 3"}).encode())
    shown = view(row, Progress(3, 10, values, 193_000_000))
    message = finished(shown, space_title="Nightly")
    assert message.title == "✗ Deploy failed: exit code 3"
    assert "Progress: 3 / 10 (finished)" in message.body
    assert row.uuid not in message.body and SPACE not in message.body


def test_a_digest_counts_and_lists_a_bounded_number_of_lines() -> None:
    done = [finished(task(f"Job {n}")) for n in range(12)]
    failed = [finished(task(f"Bad {n}", values={"error": "boom"})) for n in range(2)]
    message = digest(done + failed, space_title="Nightly", link=LINK, max_lines=5)
    assert message.title == "12 tasks finished, 2 failed"
    assert message.kind == "digest" and message.level == "failure"
    lines = message.body.splitlines()
    assert lines[0] == "Nightly"
    assert lines[1:6] == [m.title for m in (done + failed)[:5]]
    assert lines[6] == "… and 9 more"
    assert lines[7] == LINK


def test_a_digest_of_one_kind_uses_its_verb() -> None:
    one = digest([finished(task(values={"error": "boom"}))])
    assert one.title == "1 task failed"
    stalls = [stalled(task(finished_at=None, current=1, end=2), reason="flat", for_s=60)] * 3
    assert digest(stalls).title == "3 tasks stalled"


def test_the_test_message_names_the_space_and_link() -> None:
    message = messages.test_message(space_title="Nightly", link=LINK)
    assert message.title == "Headway test message"
    assert "Nightly" in message.body and message.body.endswith(LINK)
    assert (message.title, message.body) == message[:2]


def test_the_late_message_names_the_run_its_time_and_the_usual():
    task = {"title": "Nightly ETL", "progress": {"ratio": 0.33}, "created_at": None}
    said = messages.late(task, elapsed_s=2400, usual_s=720)
    assert said.title == "⏰ Nightly ETL is running late at 33%: 40 min so far, usually 12 min"
    assert said.kind == "late" and said.level == "warning"


OTHER = "3f9c2a4e-7b1d-4c8e-9a6f-0d2e4b6c8a1f"  # another task's uuid: not of the family
SPELLINGS = [
    OTHER,
    OTHER.upper(),
    OTHER.replace("-", ""),
    OTHER.replace("-", "%2D"),
    OTHER.replace("-", "%2d"),
    *(OTHER.replace("-", dash) for dash in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\uff0d"),
    *(
        invisible.join(OTHER)
        for invisible in ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e")
    ),
    OTHER.replace("-", "-\u200b"),
    "".join(f"%{ord(c):02X}" for c in OTHER),  # every character percent-encoded
    OTHER[:8] + "%E2%80%8B" + OTHER[8:],  # a zero-width space, percent-encoded
    OTHER.translate({ord(c): ord(c) + 0xFEE0 for c in "0123456789abcdef-"}),  # full width
]


def readable(text: str) -> str:
    """What a person, or a link, turns the text into: decoded, invisible characters gone,
    dashes as hyphens, compatibility forms as ASCII, in lower case."""
    import unicodedata
    from urllib.parse import unquote

    text = unicodedata.normalize("NFKC", unquote(text))
    text = "".join(
        "-" if unicodedata.category(c) == "Pd" or c == "\u2212" else c
        for c in text
        if unicodedata.category(c) != "Cf"
    )
    return text.lower()


@pytest.mark.parametrize("spelled", SPELLINGS)
def test_any_uuid_in_any_spelling_is_taken_out_of_every_message(spelled: str) -> None:
    """Not only the task's family: any uuid-shaped text, however spelled, in a title, a
    log line, an error or the space's title, in event and live messages alike."""
    data = task(values={"log": f"started by task '{spelled}'", "error": f"see {spelled}"})
    data["title"] = f"Deploy {spelled}"
    running = task(finished_at=None, current=1, end=4, values={"log": f"after {spelled}"})
    said = [
        finished(data, space_title=f"Space {spelled}"),
        stalled(running, reason="silent", for_s=600),
        recovered(running),
        messages.late(running, elapsed_s=100, usual_s=60),
    ]
    live = messages.live(running, state="running", space_title=f"Space {spelled}")
    for text in [f"{m.title}\n{m.body}" for m in said] + [live.title + "\n".join(live.lines)]:
        shown = readable(text)
        assert OTHER not in shown and OTHER.replace("-", "") not in shown, text
    assert finished(data).title == "✗ Deploy … failed: see …"


def test_a_longer_run_of_hex_is_not_a_uuid() -> None:
    sha = "0f3c2a4e7b1d4c8e9a6f0d2e4b6c8a1f9e7d5c3b"
    message = finished(task(values={"log": f"deployed {sha}"}))
    assert f"Log: deployed {sha}" in message.body


def test_a_title_cannot_turn_the_servers_words_around() -> None:
    """Bidi controls (U+202E, an isolate's end...) in what a reporter wrote are taken out
    of every message: the server's own words read as written."""
    controls = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
    data = task(values={"log": "\u202eend", "error": "\u2069\u202eboom"})
    data["title"] = "\u2069\u202eDeploy"
    message = finished(data, space_title="\u202eNightly")
    live = messages.live(data, state="failed", space_title="\u202eNightly")
    for text in (message.title, message.body, live.title, *live.lines):
        assert not set(text) & set(controls), text
    assert message.title == "✗ Deploy failed: boom"


def test_the_written_out_classes_are_unicodes_format_ignorable_and_dash_characters() -> None:
    """`messages` writes its classes out (the client's `headway channels test` has no
    `regex`); they are exactly what Unicode calls format or default-ignorable, and dashes
    (with the minus sign)."""
    import re

    import regex

    from headway.notify.messages import DASHES, FORMAT_OR_IGNORABLE

    ours_fill, ours_dash = re.compile(f"[{FORMAT_OR_IGNORABLE}]"), re.compile(f"[{DASHES}]")
    unicode_fill = regex.compile(r"[\p{Cf}\p{Default_Ignorable_Code_Point}]")
    unicode_dash = regex.compile(r"[\p{Pd}\u2212]")
    for code in range(0x110000):
        char = chr(code)
        assert bool(ours_fill.match(char)) == bool(unicode_fill.match(char)), hex(code)
        assert bool(ours_dash.match(char)) == bool(unicode_dash.match(char)), hex(code)
