"""Reporting progress (PUT and GET report): the rules of SPEC §2-3 and CONTRACT
"Representation", parent aggregation, expiry, and the completion outbox."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.support import outbox_events

TTL = 60  # the progress TTL of the test settings


async def put(client, task: str, body: dict) -> dict:
    response = await client.put(f"/tasks/{task}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def report(client, task: str, **params) -> dict:
    response = await client.get(f"/tasks/{task}/report", params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def read(client, task: str) -> dict:
    response = await client.get(f"/tasks/{task}")
    assert response.status_code == 200, response.text
    return response.json()


def us(stamp: str) -> int:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return round(moment.timestamp() * 1_000_000)


# --- Whole-state replacement ---------------------------------------------------------------


async def test_report_answers_the_task_as_it_now_stands(client, make_task):
    task = await make_task(title="copy")
    answer = await put(client, task, {"current": 3, "end": 10, "values": {"file": "a.txt"}})
    assert answer == await read(client, task)
    assert answer["progress"] == {
        "current": 3,
        "end": 10,
        "ratio": 0.3,
        "values": {"file": "a.txt"},
        "updated_at": answer["created_at"],
        "aggregated": False,
    }


async def test_report_of_zero_is_an_object_not_null(client, make_task):
    task = await make_task()
    progress = (await put(client, task, {"current": 0}))["progress"]
    assert progress is not None
    assert progress["current"] == 0


async def test_report_replaces_whole_state_omitted_values_are_cleared(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 1, "end": 10, "values": {"phase": "copy"}})
    progress = (await put(client, task, {"current": 2, "end": 10}))["progress"]
    assert progress["values"] == {}
    assert progress["current"] == 2


async def test_report_without_end_is_a_counter_with_null_ratio(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 1, "end": 10})
    progress = (await put(client, task, {"current": 7}))["progress"]
    assert progress["end"] is None
    assert progress["ratio"] is None
    assert progress["current"] == 7


async def test_empty_report_clears_everything(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 1, "end": 10, "values": {"a": 1}})
    progress = (await put(client, task, {}))["progress"]
    assert progress["current"] is None
    assert progress["end"] is None
    assert progress["values"] == {}
    assert progress["ratio"] is None


async def test_report_keeps_value_types(client, make_task):
    values = {"n": 3, "x": 0.5, "ok": True, "off": False, "s": "text", "empty": ""}
    progress = (await put(client, await make_task(), {"values": values}))["progress"]
    assert progress["values"] == values
    assert type(progress["values"]["n"]) is int
    assert type(progress["values"]["ok"]) is bool


async def test_end_may_change_between_reports(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 5, "end": 10})
    progress = (await put(client, task, {"current": 5, "end": 20}))["progress"]
    assert progress["ratio"] == 0.25


async def test_updated_at_is_the_time_of_the_last_write(client, make_task, clock):
    task = await make_task()
    clock.advance(5)
    first = (await put(client, task, {"current": 1}))["progress"]["updated_at"]
    clock.advance(2.5)
    second = (await put(client, task, {"current": 2}))["progress"]["updated_at"]
    assert us(second) - us(first) == 2_500_000
    assert second.endswith("Z")


# --- Ratio -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "end", "ratio"),
    [(25, 100, 0.25), (0, 4, 0), (1, 3, 1 / 3), (0.5, 2, 0.25), (2, 2.5, 0.8)],
)
async def test_ratio_is_current_over_end(client, make_task, current, end, ratio):
    progress = (await put(client, await make_task(), {"current": current, "end": end}))["progress"]
    assert progress["ratio"] == pytest.approx(ratio)
    assert 0 <= progress["ratio"] <= 1


async def test_ratio_is_null_when_end_is_zero_and_task_never_finishes(client, make_task, sql):
    task = await make_task()
    for current in (0, 5):
        answer = await put(client, task, {"current": current, "end": 0})
        assert answer["progress"]["ratio"] is None
        assert answer["finished_at"] is None
    assert await outbox_events(sql, task) == []


async def test_ratio_is_null_when_current_is_null(client, make_task):
    progress = (await put(client, await make_task(), {"end": 10}))["progress"]
    assert progress["current"] is None
    assert progress["ratio"] is None


async def test_explicit_nulls_read_as_omitted(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 1, "end": 2, "values": {"a": 1}})
    progress = (await put(client, task, {"current": None, "end": None, "values": None}))["progress"]
    assert progress["current"] is None
    assert progress["end"] is None
    assert progress["values"] == {}


# --- Finishing ---------------------------------------------------------------------------------


async def test_current_reaching_positive_end_finishes_the_task(client, make_task, clock):
    task = await make_task()
    clock.advance(3)
    answer = await put(client, task, {"current": 10, "end": 10})
    assert answer["finished_at"] is not None
    assert answer["duration"] == 3
    assert answer["progress"]["ratio"] == 1


async def test_current_beyond_end_finishes_with_ratio_one(client, make_task):
    answer = await put(client, await make_task(), {"current": 12, "end": 10})
    assert answer["finished_at"] is not None
    assert answer["progress"]["ratio"] == 1
    assert answer["progress"]["current"] == 12


async def test_current_below_end_does_not_finish(client, make_task):
    answer = await put(client, await make_task(), {"current": 9.999, "end": 10})
    assert answer["finished_at"] is None
    assert answer["duration"] is None


async def test_done_false_does_not_stop_current_reaching_end_from_finishing(client, make_task):
    answer = await put(client, await make_task(), {"current": 5, "end": 5, "done": False})
    assert answer["finished_at"] is not None
    assert answer["progress"]["ratio"] == 1


async def test_done_false_alone_leaves_task_active_and_clears_state(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 2, "end": 5})
    answer = await put(client, task, {"done": False})
    assert answer["finished_at"] is None
    assert answer["progress"]["current"] is None


async def test_done_alone_keeps_current_end_and_values(client, make_task, clock):
    task = await make_task()
    await put(client, task, {"current": 3, "end": 10, "values": {"phase": "copy", "n": 2}})
    clock.advance(1)
    answer = await put(client, task, {"done": True})
    assert answer["finished_at"] is not None
    assert answer["progress"]["current"] == 3
    assert answer["progress"]["end"] == 10
    assert answer["progress"]["values"] == {"phase": "copy", "n": 2}
    assert answer["progress"]["ratio"] == 1
    assert answer["progress"]["updated_at"] == answer["finished_at"]


async def test_done_alone_without_any_report_finishes_with_null_counts(client, make_task):
    answer = await put(client, await make_task(), {"done": True})
    assert answer["finished_at"] is not None
    assert answer["progress"]["current"] is None
    assert answer["progress"]["end"] is None
    assert answer["progress"]["values"] == {}
    assert answer["progress"]["ratio"] == 1
    assert answer["progress"]["aggregated"] is False


async def test_done_alone_after_expiry_finishes_with_null_counts(client, make_task, clock):
    task = await make_task()
    await put(client, task, {"current": 3, "end": 10, "values": {"a": 1}})
    clock.advance(TTL)
    progress = (await put(client, task, {"done": True}))["progress"]
    assert progress["current"] is None
    assert progress["end"] is None
    assert progress["values"] == {}
    assert progress["ratio"] == 1


async def test_done_with_counts_overwrites_the_state(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 3, "end": 10, "values": {"a": 1}})
    answer = await put(client, task, {"done": True, "current": 5})
    assert answer["finished_at"] is not None
    assert answer["progress"]["current"] == 5
    assert answer["progress"]["end"] is None
    assert answer["progress"]["values"] == {}
    assert answer["progress"]["ratio"] == 1


async def test_done_with_values_only_overwrites_the_counts(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 3, "end": 10})
    progress = (await put(client, task, {"done": True, "values": {"result": "ok"}}))["progress"]
    assert progress["current"] is None
    assert progress["end"] is None
    assert progress["values"] == {"result": "ok"}


async def test_finished_at_and_duration_never_move_after_finishing(client, make_task, clock):
    task = await make_task()
    clock.advance(4)
    first = await put(client, task, {"done": True})
    for body in ({"current": 1, "end": 1}, {"done": True}, {"current": 2}, {"done": False}, {}):
        clock.advance(7)
        later = await put(client, task, body)
        assert later["finished_at"] == first["finished_at"]
        assert later["duration"] == 4
    clock.advance(1)
    later = await report(client, task, done="true")
    assert later["finished_at"] == first["finished_at"]
    assert later["duration"] == 4


@pytest.mark.parametrize(
    ("elapsed", "duration"), [(2.999_999, 2), (3, 3), (0.5, 0), (3661.9, 3661)]
)
async def test_duration_is_whole_seconds_rounded_down(client, make_task, clock, elapsed, duration):
    task = await make_task()
    clock.advance(elapsed)
    answer = await put(client, task, {"done": True})
    assert answer["duration"] == duration
    assert us(answer["finished_at"]) - us(answer["created_at"]) == round(elapsed * 1_000_000)


async def test_progress_is_overwritten_after_finish(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 10, "end": 10, "values": {"a": 1}})
    progress = (await put(client, task, {"current": 3}))["progress"]
    assert progress == {
        "current": 3,
        "end": None,
        "ratio": 1,
        "values": {},
        "updated_at": progress["updated_at"],
        "aggregated": False,
    }


async def test_done_alone_after_finish_keeps_the_last_numbers(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 4, "end": 4})
    await put(client, task, {"current": 1, "end": 8, "values": {"b": 2}})
    progress = (await put(client, task, {"done": True}))["progress"]
    assert progress["current"] == 1
    assert progress["end"] == 8
    assert progress["values"] == {"b": 2}
    assert progress["ratio"] == 1


async def test_finished_task_stays_finished_whatever_is_reported(client, make_task):
    task = await make_task()
    await put(client, task, {"done": True})
    answer = await put(client, task, {"current": 1, "end": 100, "done": False})
    assert answer["finished_at"] is not None
    assert answer["progress"]["ratio"] == 1


# --- values.log --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "kept"),
    [
        ("one line", "one line"),
        ("first\nsecond\nthird", "third"),
        ("first\nlast\n\n  \n", "last"),
        ("windows\r\nline\r\n", "line"),
    ],
)
async def test_values_log_keeps_last_non_empty_line(client, make_task, log, kept):
    progress = (await put(client, await make_task(), {"values": {"log": log}}))["progress"]
    assert progress["values"]["log"] == kept


async def test_values_log_by_url_keeps_last_non_empty_line(client, make_task):
    task = await make_task()
    progress = (await report(client, task, **{"values[log]": "a\nb\n"}))["progress"]
    assert progress["values"] == {"log": "b"}


async def test_only_the_log_key_is_cut_to_one_line(client, make_task):
    progress = (await put(client, await make_task(), {"values": {"note": "a\nb"}}))["progress"]
    assert progress["values"] == {"note": "a\nb"}


# --- GET /tasks/{uuid}/report -----------------------------------------------------------------


async def test_report_by_url_is_the_same_write_as_put(client, make_task):
    task = await make_task()
    answer = await report(client, task, current="3", end="4")
    assert answer["progress"]["current"] == 3
    assert answer["progress"]["end"] == 4
    assert answer["progress"]["ratio"] == 0.75
    assert answer == await read(client, task)


async def test_report_by_url_reads_decimal_numbers(client, make_task):
    progress = (await report(client, await make_task(), current="2.5", end="10"))["progress"]
    assert progress["current"] == 2.5


async def test_report_by_url_values_arrive_as_text(client, make_task):
    params = {"values[n]": "5", "values[flag]": "true", "values[phase]": "copy"}
    progress = (await report(client, await make_task(), **params))["progress"]
    assert progress["values"] == {"n": "5", "flag": "true", "phase": "copy"}


async def test_report_by_url_replaces_the_whole_state(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 1, "end": 9, "values": {"a": 1}})
    progress = (await report(client, task, current="2"))["progress"]
    assert progress["end"] is None
    assert progress["values"] == {}


async def test_report_by_url_done_alone_keeps_the_last_numbers(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 2, "end": 9, "values": {"a": 1}})
    answer = await report(client, task, done="true")
    assert answer["finished_at"] is not None
    assert answer["progress"]["current"] == 2
    assert answer["progress"]["end"] == 9
    assert answer["progress"]["values"] == {"a": 1}


async def test_report_by_url_done_with_counts_overwrites(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 2, "end": 9, "values": {"a": 1}})
    progress = (await report(client, task, done="true", current="4"))["progress"]
    assert progress["current"] == 4
    assert progress["end"] is None
    assert progress["values"] == {}


async def test_report_by_url_current_reaching_end_finishes(client, make_task):
    answer = await report(client, await make_task(), current="7", end="7")
    assert answer["finished_at"] is not None


async def test_report_by_url_with_unknown_parameter_is_400_and_writes_nothing(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 2, "end": 9})
    before = await read(client, task)
    response = await client.get(f"/tasks/{task}/report", params={"current": "3", "pct": "50"})
    assert response.status_code == 400
    assert "pct" in response.json()["error"]
    assert await read(client, task) == before


# --- Parents ----------------------------------------------------------------------------------


async def make_family(make_task, children: int = 2) -> tuple[str, list[str]]:
    parent = await make_task(title="parent")
    return parent, [await make_task(title=f"c{i}", parent_uuid=parent) for i in range(children)]


async def test_parent_progress_counts_finished_children(client, make_task):
    parent, kids = await make_family(make_task, 3)
    await put(client, kids[0], {"done": True})
    await put(client, kids[1], {"current": 1, "end": 2})
    progress = (await read(client, parent))["progress"]
    assert progress["current"] == 1
    assert progress["end"] == 3
    assert progress["ratio"] == pytest.approx(1 / 3)
    assert progress["aggregated"] is True


async def test_parent_has_progress_before_anyone_reports_with_null_updated_at(client, make_task):
    parent, _ = await make_family(make_task)
    assert (await read(client, parent))["progress"] == {
        "current": 0,
        "end": 2,
        "ratio": 0,
        "values": {},
        "updated_at": None,
        "aggregated": True,
    }


async def test_parent_values_are_its_own_last_reported_values(client, make_task):
    parent, kids = await make_family(make_task)
    await put(client, parent, {"values": {"stage": "build"}})
    await put(client, kids[0], {"current": 1, "values": {"child": True}})
    assert (await read(client, parent))["progress"]["values"] == {"stage": "build"}


async def test_parent_reported_counts_are_ignored(client, make_task, sql):
    parent, _ = await make_family(make_task)
    answer = await put(client, parent, {"current": 5, "end": 5, "values": {"x": 1}})
    assert answer["finished_at"] is None
    assert answer["progress"]["current"] == 0
    assert answer["progress"]["end"] == 2
    assert answer["progress"]["values"] == {"x": 1}
    assert await outbox_events(sql, parent) == []


async def test_parent_updated_at_is_the_latest_in_the_family(client, make_task, clock):
    parent, kids = await make_family(make_task)
    clock.advance(1)
    await put(client, parent, {"values": {"a": 1}})
    clock.advance(1)
    child_write = (await put(client, kids[1], {"current": 1}))["progress"]["updated_at"]
    assert (await read(client, parent))["progress"]["updated_at"] == child_write
    clock.advance(1)
    own_write = (await put(client, parent, {}))["progress"]["updated_at"]
    assert us(own_write) - us(child_write) == 1_000_000
    assert (await read(client, parent))["progress"]["updated_at"] == own_write


async def test_done_sent_to_parent_finishes_it_ignoring_counts(client, make_task, sql):
    parent, kids = await make_family(make_task)
    answer = await put(client, parent, {"done": True, "current": 9, "end": 9})
    assert answer["finished_at"] is not None
    assert answer["progress"]["current"] == 0
    assert answer["progress"]["end"] == 2
    assert answer["progress"]["ratio"] == 1
    assert len(await outbox_events(sql, parent)) == 1
    for kid in kids:
        assert (await read(client, kid))["finished_at"] is None


async def test_last_child_finishing_finishes_the_parent(client, make_task, sql, clock):
    parent, kids = await make_family(make_task)
    clock.advance(2)
    await put(client, kids[0], {"current": 1, "end": 1})
    assert (await read(client, parent))["finished_at"] is None
    clock.advance(3)
    last = await put(client, kids[1], {"done": True})
    family = await read(client, parent)
    assert family["finished_at"] == last["finished_at"]
    assert family["duration"] == 5
    assert family["progress"]["current"] == 2
    assert family["progress"]["ratio"] == 1
    assert len(await outbox_events(sql, parent)) == 1
    assert len(await outbox_events(sql, kids[0])) == 1
    assert len(await outbox_events(sql, kids[1])) == 1
    assert len(await outbox_events(sql)) == 3


async def test_parent_finished_without_any_report_has_progress_with_ratio_one(client, make_task):
    parent, kids = await make_family(make_task, 1)
    await put(client, kids[0], {"done": True})
    progress = (await read(client, parent))["progress"]
    assert progress["ratio"] == 1
    assert progress["aggregated"] is True
    assert progress["values"] == {}


async def test_child_added_to_finished_parent_does_not_reopen_it(client, make_task, sql, clock):
    parent, kids = await make_family(make_task, 1)
    finished = (await put(client, kids[0], {"done": True}))["finished_at"]
    clock.advance(5)
    late = await make_task(title="late", parent_uuid=parent)
    family = await read(client, parent)
    assert family["finished_at"] == finished
    assert family["progress"]["current"] == 1
    assert family["progress"]["end"] == 2
    assert family["progress"]["ratio"] == 1
    await put(client, late, {"done": True})
    assert (await read(client, parent))["finished_at"] == finished
    assert len(await outbox_events(sql, parent)) == 1


async def test_parent_finished_by_done_gets_no_second_event_from_its_children(
    client, make_task, sql
):
    parent, kids = await make_family(make_task)
    finished = (await put(client, parent, {"done": True}))["finished_at"]
    for kid in kids:
        await put(client, kid, {"done": True})
    assert (await read(client, parent))["finished_at"] == finished
    assert len(await outbox_events(sql, parent)) == 1


async def test_a_task_becomes_a_parent_when_it_gets_a_child(client, make_task):
    task = await make_task()
    await put(client, task, {"current": 3, "end": 10})
    await make_task(parent_uuid=task)
    progress = (await read(client, task))["progress"]
    assert progress["aggregated"] is True
    assert progress["current"] == 0
    assert progress["end"] == 1


# --- Expiry --------------------------------------------------------------------------------------


async def test_progress_expires_after_ttl_without_writes(client, make_task, clock):
    task = await make_task()
    await put(client, task, {"current": 1, "end": 10})
    clock.advance(TTL, us=-1)
    assert (await read(client, task))["progress"] is not None
    clock.advance(us=1)
    assert (await read(client, task))["progress"] is None


async def test_reads_do_not_extend_expiry(client, space, make_task, clock):
    task = await make_task()
    await put(client, task, {"current": 1})
    for _ in range(5):
        clock.advance(TTL / 5 - 1)
        assert (await read(client, task))["progress"] is not None
        assert (await client.get(f"/spaces/{space}")).json()["tasks"][0]["progress"] is not None
    clock.advance(5)
    assert (await read(client, task))["progress"] is None
    assert (await client.get(f"/spaces/{space}")).json()["tasks"][0]["progress"] is None


async def test_each_write_restarts_expiry(client, make_task, clock):
    task = await make_task()
    await put(client, task, {"current": 1})
    clock.advance(TTL - 1)
    await put(client, task, {"current": 2})
    clock.advance(TTL - 1)
    assert (await read(client, task))["progress"]["current"] == 2


async def test_finished_task_progress_expires_to_ratio_one_with_nulls(client, make_task, clock):
    task = await make_task()
    await put(client, task, {"current": 5, "end": 5, "values": {"a": 1}})
    clock.advance(TTL)
    body = await read(client, task)
    assert body["finished_at"] is not None
    assert body["progress"] == {
        "current": None,
        "end": None,
        "ratio": 1,
        "values": {},
        "updated_at": None,
        "aggregated": False,
    }


async def test_parent_counts_never_expire_but_its_values_do(client, make_task, clock):
    parent, kids = await make_family(make_task)
    await put(client, parent, {"values": {"stage": "one"}})
    await put(client, kids[0], {"done": True})
    await put(client, kids[1], {"current": 1})
    clock.advance(TTL)
    assert (await read(client, parent))["progress"] == {
        "current": 1,
        "end": 2,
        "ratio": 0.5,
        "values": {},
        "updated_at": None,
        "aggregated": True,
    }


async def test_parent_updated_at_falls_back_to_members_still_live(client, make_task, clock):
    parent, kids = await make_family(make_task)
    await put(client, parent, {"values": {"a": 1}})
    clock.advance(TTL / 2)
    child_write = (await put(client, kids[0], {"current": 1}))["progress"]["updated_at"]
    clock.advance(TTL / 2)
    progress = (await read(client, parent))["progress"]
    assert progress["values"] == {}
    assert progress["updated_at"] == child_write


# --- Completion events (outbox) --------------------------------------------------------------


def assert_event_shows(event: dict, task: dict) -> None:
    assert event == {"type": "task.completed", "timestamp": task["finished_at"], "data": task}


async def test_put_done_writes_one_event_with_the_task_at_completion(client, make_task, sql):
    task = await make_task(title="x", source="y")
    await put(client, task, {"current": 1, "end": 3, "values": {"k": "v"}})
    answer = await put(client, task, {"done": True})
    events = await outbox_events(sql, task)
    assert len(events) == 1
    assert_event_shows(events[0], answer)


async def test_report_by_url_done_writes_one_event(client, make_task, sql):
    task = await make_task()
    answer = await report(client, task, done="true")
    events = await outbox_events(sql, task)
    assert len(events) == 1
    assert_event_shows(events[0], answer)


async def test_current_reaching_end_writes_one_event(client, make_task, sql):
    task = await make_task()
    await put(client, task, {"current": 1, "end": 2})
    assert await outbox_events(sql, task) == []
    answer = await put(client, task, {"current": 2, "end": 2})
    events = await outbox_events(sql, task)
    assert len(events) == 1
    assert_event_shows(events[0], answer)


async def test_last_child_writes_one_event_for_the_parent_as_it_reads(client, make_task, sql):
    parent, kids = await make_family(make_task)  # nobody reports to it: its last step ends it
    await put(client, kids[0], {"done": True})
    await put(client, kids[1], {"current": 4, "end": 4})
    events = await outbox_events(sql, parent)
    assert len(events) == 1
    assert_event_shows(events[0], await read(client, parent))
    assert events[0]["data"]["children"][1]["progress"]["current"] == 4


async def test_parent_done_event_nests_its_children(client, make_task, sql):
    parent, kids = await make_family(make_task)
    await put(client, kids[0], {"current": 1})
    answer = await put(client, parent, {"done": True})
    events = await outbox_events(sql, parent)
    assert len(events) == 1
    assert_event_shows(events[0], answer)
    assert [c["uuid"] for c in events[0]["data"]["children"]] == kids


async def test_later_writes_to_a_finished_task_write_no_event(client, make_task, sql, clock):
    task = await make_task()
    await put(client, task, {"done": True})
    for body in ({"done": True}, {"current": 3, "end": 3}, {"current": 1}, {}):
        clock.advance(1)
        await put(client, task, body)
    await report(client, task, done="true")
    await report(client, task, current="9", end="9")
    assert len(await outbox_events(sql, task)) == 1


async def test_reports_that_do_not_finish_write_no_event(client, make_task, sql):
    task = await make_task()
    for body in ({"current": 1, "end": 5}, {"current": 0, "end": 0}, {"done": False}, {}):
        await put(client, task, body)
    await report(client, task, current="2", end="5")
    assert await outbox_events(sql) == []


async def test_done_alone_keeps_numbers_reported_while_it_was_finishing(client, make_task, app):
    """`{"done": true}` keeps the last numbers, even those of a report that was answered
    while the finish waited for the database."""
    import asyncio

    from headway.storage import queries

    task = await make_task()
    await client.put(f"/tasks/{task}", json={"current": 5, "end": 10})
    async with app.state.service.db.write() as st:
        await queries.lock_task(st, task)  # the finish must wait for this transaction
        finishing = asyncio.create_task(client.put(f"/tasks/{task}", json={"done": True}))
        await asyncio.sleep(0.2)
        meanwhile = await client.put(f"/tasks/{task}", json={"current": 7, "end": 10})
        assert meanwhile.status_code == 200
        assert meanwhile.json()["progress"]["current"] == 7
    finished = await finishing
    assert finished.json()["finished_at"] is not None
    after = (await client.get(f"/tasks/{task}")).json()
    assert after["progress"]["current"] == 7
    assert after["progress"]["ratio"] == 1


async def test_report_by_url_refuses_numbers_python_alone_would_read(client, make_task):
    task = await make_task()
    for value in ("1_000", "\uff11\uff12", "0x10", "nan", "1e", ""):
        response = await client.get(f"/tasks/{task}/report", params={"current": value})
        assert response.status_code == 400, value
        assert "current" in response.json()["error"]
    ok = await client.get(f"/tasks/{task}/report", params={"current": "+1.5e1", "end": ".5E2"})
    assert ok.json()["progress"]["current"] == 15.0
    assert ok.json()["progress"]["end"] == 50.0


async def test_head_on_report_by_url_does_not_write(client, make_task):
    task = await make_task()
    response = await client.head(f"/tasks/{task}/report?current=1")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET"
    assert (await client.get(f"/tasks/{task}")).json()["progress"] is None
