"""The tqdm drop-in against a real server: what a bar reports, when its task finishes,
nested bars as steps, bars attached after the fact, and the example of docs/client.md."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tqdm as tqdm_module

import headway.tqdm
import headway.tqdm.auto
from headway import Client
from headway.tqdm import attach, tqdm, trange

from .live_server import LiveServer, environment
from .test_client import (
    assert_finished_after_its_steps,
    assert_one_notification_each,
    client_blocks,
    completed,
    completions,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def client(server: LiveServer, served_space: str) -> Iterator[Client]:
    with Client(server.url, space=served_space, min_interval=0.05, exit_timeout=5) as client:
        yield client


def delivered(client: Client, server: LiveServer, served_space: str) -> list[dict]:
    """The space's tasks once everything the client holds was sent."""
    assert client.close(5)
    return server.space(served_space)["tasks"]


def test_a_bar_reports_count_total_rate_and_description_and_finishes(
    client: Client, server: LiveServer, served_space: str
) -> None:
    for _ in tqdm(range(500), desc="files", unit="file", client=client, file=io.StringIO()):
        pass
    [task] = delivered(client, server, served_space)
    assert task["title"] == "files" and task["finished_at"] is not None
    progress = task["progress"]
    assert (progress["current"], progress["end"]) == (500, 500)
    assert progress["values"]["unit"] == "file"
    assert progress["values"]["description"] == "files"
    assert progress["values"]["rate"] > 0


def test_a_bar_updated_by_hand_reports_its_postfix_and_finishes_on_close(
    client: Client, server: LiveServer, served_space: str
) -> None:
    with tqdm(total=10, desc="upload", client=client, file=io.StringIO()) as bar:
        bar.update(4)
        bar.set_postfix(host="web-1")
        bar.set_description("uploading")
        bar.update(2)
    [task] = delivered(client, server, served_space)
    assert task["finished_at"] is not None
    assert (task["progress"]["current"], task["progress"]["end"]) == (6, 10)
    values = task["progress"]["values"]
    assert (values["description"], values["postfix"]) == ("uploading", "host=web-1")


def test_nested_bars_are_steps_of_the_outer_bars_task(
    client: Client, server: LiveServer, served_space: str
) -> None:
    out = io.StringIO()
    for epoch in trange(3, desc="training", client=client, file=out):
        for _ in tqdm(range(50), desc=f"epoch {epoch}", leave=False, file=out):
            pass
    [task] = delivered(client, server, served_space)
    assert task["title"] == "training" and task["finished_at"] is not None
    steps = task["children"]
    assert [step["title"] for step in steps] == ["epoch 0", "epoch 1", "epoch 2"]
    assert all(step["finished_at"] and step["progress"]["current"] == 50 for step in steps)


def test_a_bar_at_position_one_is_a_step_of_the_bar_above(
    client: Client, server: LiveServer, served_space: str
) -> None:
    out = io.StringIO()
    with tqdm(total=2, desc="outer", client=client, file=out) as outer:
        with tqdm(total=5, desc="inner", position=1, file=out) as inner:
            inner.update(5)
        outer.update(1)
    [task] = delivered(client, server, served_space)
    assert [step["title"] for step in task["children"]] == ["inner"]


def test_a_loop_left_early_leaves_its_task_unfinished_at_its_last_count(
    client: Client, server: LiveServer, served_space: str
) -> None:
    for i in tqdm(range(100), desc="searching", client=client, file=io.StringIO()):
        if i == 41:
            break
    with pytest.raises(KeyError):
        for i in tqdm(iter(range(100)), desc="crashing", client=client, file=io.StringIO()):
            if i == 7:
                raise KeyError("missing")
    searching, crashing = delivered(client, server, served_space)
    assert searching["finished_at"] is None
    assert (searching["progress"]["current"], searching["progress"]["end"]) == (41, 100)
    assert crashing["finished_at"] is None
    assert (crashing["progress"]["current"], crashing["progress"]["end"]) == (7, None)


def test_an_exception_out_of_a_bars_with_block_is_reported_and_finishes_it(
    client: Client, server: LiveServer, served_space: str
) -> None:
    with (
        pytest.raises(OSError, match="disk full"),
        tqdm(total=10, desc="writing", client=client, file=io.StringIO()) as bar,
    ):
        bar.update(3)
        raise OSError("disk full")
    [task] = delivered(client, server, served_space)
    assert task["finished_at"] is not None
    values = task["progress"]["values"]
    assert (values["error_type"], values["error_message"]) == ("OSError", "disk full")
    assert values["error"] == "OSError: disk full"
    assert values["log"] == "OSError: disk full"
    assert task["progress"]["current"] == 3


def test_a_bar_inside_a_task_block_is_a_step_of_that_task(
    client: Client, server: LiveServer, served_space: str
) -> None:
    with client.task("job"):
        for _ in tqdm(range(20), desc="phase", file=io.StringIO()):
            pass
    [task] = delivered(client, server, served_space)
    assert [step["title"] for step in task["children"]] == ["phase"]
    assert task["children"][0]["finished_at"] is not None


def test_attach_makes_an_existing_bar_report(
    client: Client, server: LiveServer, served_space: str
) -> None:
    bar = tqdm_module.tqdm(total=8, desc="legacy", file=io.StringIO())
    bar.update(2)
    assert attach(bar, client=client) is bar
    bar.update(6)
    bar.close()
    assert isinstance(bar, tqdm_module.tqdm)
    [task] = delivered(client, server, served_space)
    assert task["title"] == "legacy" and task["finished_at"] is not None
    assert task["progress"]["current"] == 8


def test_a_bar_reports_to_an_existing_task_when_given_one(
    client: Client, server: LiveServer, served_space: str
) -> None:
    existing = client.create_task("given")
    for _ in tqdm(range(3), task=existing, client=client, file=io.StringIO()):
        pass
    [task] = delivered(client, server, served_space)
    assert task["uuid"] == existing and task["finished_at"] is not None
    assert task["progress"]["current"] == 3


def test_auto_bars_report_like_the_others(
    client: Client, server: LiveServer, served_space: str
) -> None:
    for _ in headway.tqdm.auto.trange(4, desc="auto", client=client, file=io.StringIO()):
        pass
    [task] = delivered(client, server, served_space)
    assert (task["title"], task["progress"]["current"]) == ("auto", 4)


def test_without_a_space_bars_work_as_plain_tqdm_and_warn_once(server: LiveServer) -> None:
    script = (
        "import sys\n"
        "from headway.tqdm import tqdm\n"
        "print(sum(tqdm(range(5), file=sys.stdout)), sum(tqdm(range(5), file=sys.stdout)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=environment(HEADWAY_URL=server.url),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert "5/5" in result.stdout and result.stdout.endswith("10 10\n")
    assert result.stderr.splitlines() == [
        "Headway: bars are not reported: no space given nor in HEADWAY_SPACE"
    ]


def test_a_disabled_bar_reports_nothing(
    client: Client, server: LiveServer, served_space: str
) -> None:
    for _ in tqdm(range(5), disable=True, client=client):
        pass
    assert delivered(client, server, served_space) == []


def test_readme_tqdm_example_runs_as_written(server: LiveServer, served_space: str) -> None:
    [example] = [block for block in client_blocks("python") if "headway.tqdm" in block]
    env = environment(HEADWAY_URL=server.url, HEADWAY_SPACE=served_space)
    with completions(server, served_space) as receiver:
        result = subprocess.run(
            [sys.executable, "-c", example], env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        events = completed(receiver, 4)
    [task] = server.space(served_space)["tasks"]
    assert task["title"] == "Training" and task["finished_at"] is not None
    assert [step["title"] for step in task["children"]] == ["Epoch 0", "Epoch 1", "Epoch 2"]
    assert all(step["progress"]["current"] == 200 for step in task["children"])
    assert_finished_after_its_steps(task)
    assert_one_notification_each(events, "Training", ["Epoch 0", "Epoch 1", "Epoch 2"])


def test_headway_logger_is_quiet_when_all_goes_well(
    client: Client, server: LiveServer, served_space: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="headway")
    for _ in trange(10, client=client, file=io.StringIO()):
        pass
    assert len(delivered(client, server, served_space)) == 1
    assert [r for r in caplog.records if r.name == "headway"] == []


def test_bench_client_measures_the_dropin_and_report_costs(server: LiveServer) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.client", "--smoke", "--json", "--url", server.url],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    dropin, report = figures["tqdm_dropin"], figures["report"]
    assert dropin["plain_ns_per_iteration"] > 0 and dropin["dropin_ns_per_iteration"] > 0
    assert dropin["ratio"] > 0
    assert report["us_per_report"] > 0 and report["us_per_report_with_log"] > 0
    assert figures["reports_delivered"] is True
    assert set(figures["targets"]) == {"tqdm_ratio_under_1.5", "report_under_2_us"}


def test_without_tqdm_the_drop_in_says_how_to_install_it() -> None:
    script = "import sys\nsys.modules['tqdm'] = None  # as if not installed\nimport headway.tqdm\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == "ModuleNotFoundError: headway.tqdm needs tqdm: pip install 'headway[tqdm]'"


def test_nested_bars_that_end_before_anything_is_sent_finish_their_parent_last(
    server: LiveServer, served_space: str
) -> None:
    """A reporting thread that gets no turn before every bar has run and closed (a busy
    machine). The outer bar's task still reports before its steps are made (so it is held
    open by it), never finishes by a count its steps are not there yet to override, and
    finishes after them."""
    with Client(server.url, space=served_space, exit_timeout=30) as client:
        with client._reporting()._cond:  # the reporting thread waits for it
            for epoch in trange(3, desc="Training", client=client):
                for _ in tqdm(range(50), desc=f"Epoch {epoch}", leave=False, client=client):
                    pass
        assert client.close(30)
    [task] = server.space(served_space)["tasks"]
    assert [step["title"] for step in task["children"]] == ["Epoch 0", "Epoch 1", "Epoch 2"]
    assert_finished_after_its_steps(task)
    assert task["progress"]["values"]["description"] == "Training"
