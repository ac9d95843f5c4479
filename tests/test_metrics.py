"""`GET /metrics`: Prometheus counters by route template, refusals, deliveries, state
gauges measured at scrape, the metrics port, and several worker processes counted as one."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from headway.app import create_app
from headway.delivery.worker import Worker
from headway.notify.deliver import DIGEST_S, ChannelSender
from headway.notify.stalls import StallWatch
from headway.ops import metrics
from headway.storage import webhooks as webhook_rows

from .conftest import BACKENDS
from .live_server import STARTUP_SECONDS, HeadwayProcess, LiveServer
from .servers import free_port, wait_for_port

UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
TASK = "/tasks/{task_uuid}"
SPACE = "/spaces/{space_uuid}"


@pytest.fixture
def settings(settings):
    """Receivers listen on 127.0.0.1; rates stay out of the way of counting."""
    return settings.with_(webhook_allow_private=True, rate_limits=False)


def value(body: str, name: str, **labels: str) -> float:
    """The sample `name` with exactly `labels` in a scrape's text; 0 if absent."""
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


async def scrape(client: httpx.AsyncClient) -> str:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


# --- Requests ---------------------------------------------------------------------------


async def test_requests_are_counted_by_route_template_method_and_status(client, space):
    before = await scrape(client)
    task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    assert (await client.put(f"/tasks/{task}", json={"current": 1})).status_code == 200
    assert (await client.put(f"/tasks/{task}", json={"current": 2})).status_code == 200
    assert (await client.get(f"/tasks/{space}")).status_code == 404  # no such task
    assert (await client.get(f"/spaces/{space}")).status_code == 200
    assert (await client.post(f"/spaces/{space}")).status_code == 405
    assert (await client.get(f"/nothing/{space}")).status_code == 404
    after = await scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "headway_http_requests_total"
    assert moved(requests, route="/spaces/{space_uuid}/tasks", method="POST", status="201") == 1
    assert moved(requests, route=TASK, method="PUT", status="200") == 2
    assert moved(requests, route=TASK, method="GET", status="404") == 1
    assert moved(requests, route=SPACE, method="GET", status="200") == 1
    assert moved(requests, route=SPACE, method="POST", status="405") == 1
    assert moved(requests, route="unmatched", method="GET", status="404") == 1
    durations = "headway_http_request_duration_seconds"
    assert moved(f"{durations}_count", route=TASK, method="PUT") == 2
    assert moved(f"{durations}_bucket", route=TASK, method="PUT", le="+Inf") == 2
    assert moved(f"{durations}_sum", route=TASK, method="PUT") > 0


async def test_no_uuid_appears_in_any_label(client, space):
    task = (await client.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    for path in (
        f"/tasks/{task}",
        f"/tasks/{task}/report?current=1",
        f"/spaces/{space}",
        f"/spaces/{space}/webhooks",
        f"/spaces/{space}/nothing/{task}",
        f"/{task}",
        f"/tasks/{task.replace('-', '')}",
    ):
        await client.get(path)
        await client.request("BREW", path)
    await client.put(f"/tasks/{task}", json={"current": 1})
    await client.patch(f"/tasks/{task}", json={})
    body = await scrape(client)
    assert UUID.search(body) is None, UUID.search(body)
    # A method of a client's invention is one series, whatever it is called.
    assert value(body, "headway_http_requests_total", route=SPACE, method="other", status="405")
    assert "BREW" not in body


def test_both_ways_of_counting_requests_write_the_same_series():
    """Tallies (a process serving alone) and prometheus_client's values (one of several
    processes) expose the same samples for the same requests."""
    tallies = metrics.RequestTallies()
    series_registry = CollectorRegistry()
    series = metrics.RequestSeries(series_registry)
    for seconds in (0.0001, 0.0005, 0.003, 0.003, 2.0, 11.0):
        for counting in (tallies, series):
            counting.observe(TASK, "PUT", 200, seconds)
            counting.observe("unmatched", "other", 404, seconds)

    def samples(collector) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {
            (sample.name, tuple(sorted(sample.labels.items())), round(sample.value, 9))
            for family in collector.collect()
            for sample in family.samples
            if not sample.name.endswith("_created")
        }

    assert samples(tallies) == samples(series_registry)
    assert len(samples(tallies)) == 2 * (1 + len(metrics.DURATION_BUCKETS) + 1 + 2)


# --- Refusals, deliveries, streams --------------------------------------------------------


async def test_refusals_are_counted_by_reason(client):
    before = await scrape(client)
    metrics.refused("rate_tasks")
    metrics.refused("rate_tasks")
    metrics.refused("progress_budget")
    after = await scrape(client)
    for reason, count in (("rate_tasks", 2), ("progress_budget", 1), ("timeout", 0)):
        moved = value(after, "headway_refusals_total", reason=reason) - value(
            before, "headway_refusals_total", reason=reason
        )
        assert moved == count, reason
    # Every known reason is there from the start, at 0 until it happens.
    assert 'headway_refusals_total{reason="header_too_large"}' in after


async def test_delivery_outcomes_are_counted(app, client, space, make_task, receiver, clock):
    worker = Worker(app.state.service.db, clock, allow_private=True, jitter=lambda: 1.0)
    try:
        await client.post(f"/spaces/{space}/webhooks", json={"url": receiver.url})
        receiver.statuses = [500]
        before = await scrape(client)
        await client.put(f"/tasks/{await make_task()}", json={"done": True})
        assert await worker.run_once() == 1  # 500: retried later
        clock.advance(3600)
        assert await worker.run_once() == 1  # 200
        after = await scrape(client)
    finally:
        await worker.close()
    assert len(receiver.deliveries) == 2
    name = "headway_webhook_deliveries_total"
    for outcome, count in (("delivered", 1), ("retry", 1), ("given_up", 0)):
        moved = value(after, name, outcome=outcome) - value(before, name, outcome=outcome)
        assert moved == count, outcome


async def test_open_streams_go_up_and_down(client):
    before = value(await scrape(client), "headway_open_streams")
    metrics.stream_opened()
    metrics.stream_opened()
    metrics.stream_closed()
    assert value(await scrape(client), "headway_open_streams") == before + 1
    metrics.stream_closed()
    assert value(await scrape(client), "headway_open_streams") == before


# --- State measured at scrape time ---------------------------------------------------------


async def test_live_progress_and_outbox_backlog_are_measured_when_scraped(
    client, space, make_task, receiver, settings
):
    await client.post(f"/spaces/{space}/webhooks", json={"url": receiver.url})
    await client.put(f"/tasks/{await make_task()}", json={"current": 1, "values": {"log": "x"}})
    await client.put(f"/tasks/{await make_task()}", json={"done": True})
    body = await scrape(client)
    assert value(body, "headway_outbox_deliveries_pending") == 1
    assert value(body, "headway_outbox_events") == 1
    assert value(body, "headway_dependency_up", dependency="database") == 1
    assert value(body, "headway_dependency_up", dependency="progress_store") == 1
    if settings.redis_url is None:
        assert value(body, "headway_live_tasks") == 2
        assert value(body, "headway_progress_bytes") > 0
        assert value(body, "headway_progress_budget_bytes") > 0
    else:
        assert value(body, "headway_redis_used_memory_bytes") > 0
        assert "headway_live_tasks" not in body  # counting Redis keys is not cheap


async def test_channels_backlog_and_open_stalls_are_measured_beside_their_counters(
    app, client, space, make_task, json_receiver, clock
):
    service = app.state.service
    watch = StallWatch(service.db, service.progress, clock, service.tasks.event_views)
    sender = ChannelSender(
        service.db, clock, allow_private=True, messages_per_hour=60, link=lambda _: None
    )
    channels = f"/spaces/{space}/channels"
    url = json_receiver.url()
    await client.post(channels, json={"url": url, "events": ["completed"]})
    await client.post(channels, json={"url": url, "events": ["stalled"], "stalled_after": 60})
    before = await scrape(client)
    assert value(before, "headway_channel_deliveries_pending") == 0
    assert value(before, "headway_stall_episodes_open") == 0
    for outcome in ("delivered", "retry", "given_up"):  # counted from 0
        assert f'headway_channel_events_total{{outcome="{outcome}"}}' in before
    stuck = await make_task(title="Stuck")
    await client.put(f"/tasks/{await make_task(title='Done')}", json={"done": True})
    assert value(await scrape(client), "headway_channel_deliveries_pending") == 1

    clock.advance(61)
    assert await watch.step() == 1  # Stuck told stalled: a second message waits
    body = await scrape(client)
    assert value(body, "headway_channel_deliveries_pending") == 2
    assert value(body, "headway_stall_episodes_open") == 1
    clock.advance(DIGEST_S + 1)
    assert await sender.run_once() == 2  # one message per channel
    body = await scrape(client)
    assert value(body, "headway_channel_deliveries_pending") == 0
    assert value(body, "headway_stall_episodes_open") == 1  # still stalled

    await client.put(f"/tasks/{stuck}", json={"done": True})
    assert await watch.step() >= 1  # recovered
    clock.advance(DIGEST_S + 1)
    await sender.run_once()
    after = await scrape(client)
    await sender.close()
    assert value(after, "headway_stall_episodes_open") == 0
    assert value(after, "headway_channel_deliveries_pending") == 0

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # Done, Stuck's stall, Stuck's finish and its recovery: four events, none given up.
    assert moved("headway_channel_events_total", outcome="delivered") == 4
    assert moved("headway_channel_events_total", outcome="given_up") == 0
    assert moved("headway_stall_episodes_total", change="stalled") == 1
    assert moved("headway_stall_episodes_total", change="recovered") == 1
    assert UUID.search(after) is None, UUID.search(after)


async def test_scrape_answers_while_the_database_fails(client, monkeypatch):
    monkeypatch.setattr(webhook_rows, "_BACKLOG", "SELECT count(*) FROM no_such_table")
    body = await scrape(client)
    assert value(body, "headway_dependency_up", dependency="database") == 0
    assert "headway_outbox_events" not in body
    assert "headway_channel_deliveries_pending" not in body
    assert "headway_http_requests_total" in body


# --- Settings ------------------------------------------------------------------------------


async def test_metrics_off_is_a_json_404_and_not_in_the_openapi_document(settings, clock):
    app = create_app(settings.with_(metrics=False), clock)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://headway.test") as client:
        response = await client.get("/metrics")
    assert response.status_code == 404
    assert response.json()["error"]
    assert "/metrics" not in app.state.openapi["paths"]


async def test_openapi_document_lists_metrics_when_on(client):
    document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/metrics"]["get"]
    assert "text/plain" in operation["responses"]["200"]["content"]


async def test_many_apps_in_one_process_share_one_registry(settings, clock):
    apps = [create_app(settings, clock) for _ in range(3)]
    assert len({id(app._metrics) for app in apps}) == 1
    assert apps[0]._metrics is metrics.instruments()


# --- Real servers --------------------------------------------------------------------------


def test_metrics_port_serves_metrics_and_the_service_port_does_not(tmp_path):
    metrics_port = free_port()
    with LiveServer(
        tmp_path, HEADWAY_METRICS_PORT=str(metrics_port), HEADWAY_RATE_LIMITS="false"
    ) as server:
        url = server.url
        wait_for_port(metrics_port)
        space = httpx.post(f"{url}/spaces", json={}).json()["uuid"]
        task = httpx.post(f"{url}/spaces/{space}/tasks", json={}).json()["uuid"]
        assert httpx.put(f"{url}/tasks/{task}", json={"current": 1}).status_code == 200
        on_service_port = httpx.get(f"{url}/metrics")
        assert on_service_port.status_code == 404
        assert on_service_port.json()["error"]
        assert "/metrics" not in httpx.get(f"{url}/openapi.json").json()["paths"]

        response = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
    assert response.status_code == 200
    body = response.text
    requests = "headway_http_requests_total"
    assert value(body, requests, route="/spaces", method="POST", status="201") == 1
    assert value(body, requests, route=TASK, method="PUT", status="200") == 1
    assert value(body, requests, route="unmatched", method="GET", status="404") == 1
    assert value(body, "headway_live_tasks") == 1  # the memory store of the serving app
    assert value(body, "headway_outbox_events") == 0
    assert value(body, "headway_dependency_up", dependency="database") == 1
    assert UUID.search(body) is None


def test_the_worker_alone_measures_the_outbox_on_its_metrics_port(tmp_path):
    """`headway worker` serves no app: its port measures a database of its own, opened
    once and used by every scrape."""
    metrics_port = free_port()
    env = {
        "HEADWAY_DATABASE_URL": f"sqlite:///{tmp_path}/headway.db",
        "HEADWAY_METRICS_PORT": str(metrics_port),
    }
    with HeadwayProcess(tmp_path, "worker", **env):
        wait_for_port(metrics_port)
        scrapes = [httpx.get(f"http://127.0.0.1:{metrics_port}/metrics") for _ in range(2)]
    for response in scrapes:
        assert response.status_code == 200
        assert value(response.text, "headway_dependency_up", dependency="database") == 1
        assert "headway_outbox_events 0.0" in response.text
        assert 'dependency="progress_store"' not in response.text  # no Redis: none held


@pytest.fixture(scope="module")
def scale_out_env(request) -> dict[str, str]:
    """PostgreSQL and Redis of their own for servers of several worker processes."""
    if "postgres" not in BACKENDS:
        pytest.skip("HEADWAY_TEST_BACKENDS excludes postgres")
    postgres, redis_server = request.getfixturevalue("shared_servers")
    postgres.create_database("metrics")
    return {
        "HEADWAY_DATABASE_URL": postgres.url.rsplit("/", 1)[0] + "/metrics",
        "HEADWAY_REDIS_URL": redis_server.url.rsplit("/", 1)[0] + "/5",
        "HEADWAY_RUN_WORKER": "false",
    }


def served_by_each_process(directory: Path) -> dict[str, float]:
    """GET /tasks/{task_uuid} 200s counted by each worker process, from its own file."""
    counted = {}
    for path in directory.glob("counter_*.db"):
        for family in MultiProcessCollector.merge([str(path)]):
            for sample in family.samples:
                labels = {"route": TASK, "method": "GET", "status": "200"}
                if sample.name == "headway_http_requests_total" and sample.labels == labels:
                    counted[path.name] = sample.value
    return counted


@pytest.mark.parametrize("where", ["service port", "metrics port"])
async def test_several_worker_processes_are_counted_together(scale_out_env, tmp_path, where):
    env = {**scale_out_env, "TMPDIR": str(tmp_path)}  # where serve makes its metrics directory
    metrics_port = free_port()
    if where == "metrics port":
        env["HEADWAY_METRICS_PORT"] = str(metrics_port)
    with LiveServer(tmp_path, "--workers", "2", HEADWAY_RATE_LIMITS="false", **env) as server:
        url = server.url
        (directory,) = tmp_path.glob("headway-metrics-*")

        async def fresh_connection(method: str, path: str, **options) -> httpx.Response:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                return await client.request(method, path, **options)

        space = (await fresh_connection("POST", "/spaces", json={})).json()["uuid"]
        task = (await fresh_connection("POST", f"/spaces/{space}/tasks", json={})).json()["uuid"]
        sent = 0
        # Connections go to whichever process accepts first: send until both have served.
        # The server answers once one process is up; beside a busy core the other may
        # take as long again to start, so the bound is a start's, not a count.
        deadline = time.monotonic() + STARTUP_SECONDS
        while len([n for n in served_by_each_process(directory).values() if n]) < 2:
            assert time.monotonic() < deadline, served_by_each_process(directory)
            answers = await asyncio.gather(
                *(fresh_connection("GET", f"/tasks/{task}") for _ in range(40))
            )
            assert {a.status_code for a in answers} == {200}
            sent += len(answers)
            await asyncio.sleep(0.05)
        assert sum(served_by_each_process(directory).values()) == sent

        if where == "metrics port":
            assert (await fresh_connection("GET", "/metrics")).status_code == 404
            scrape_url = f"http://127.0.0.1:{metrics_port}/metrics"
            scrapes = [(await fresh_connection("GET", scrape_url)) for _ in range(2)]
        else:  # each scrape is answered by either process, merging both
            scrapes = await asyncio.gather(*(fresh_connection("GET", "/metrics") for _ in range(6)))
        for response in scrapes:
            assert response.status_code == 200
            counted = value(
                response.text, "headway_http_requests_total", route=TASK, method="GET", status="200"
            )
            assert counted == sent
            durations = "headway_http_request_duration_seconds_count"
            assert value(response.text, durations, route=TASK, method="GET") == sent
            assert value(response.text, "headway_outbox_events") == 0
            assert value(response.text, "headway_dependency_up", dependency="progress_store") == 1
            assert UUID.search(response.text) is None
    assert not directory.exists()  # removed when the server stops
