"""Schemathesis against the app's own `/openapi.json`, in-process: every operation, then
chains of them along the document's links (the stateful phase). Any 5xx fails, and so does
any answer the document does not describe: its status, its content type, its body's schema,
its headers.

SQLite and in-memory progress only: the document and the routes are the same on every
backend, and the other backends' behaviour is covered by the shared suite.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.python import asgi

from headway.app import create_app
from headway.config import Settings

CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
]
CONFIG = {
    "seed": 20261122,  # the same cases on every run: a failure here reproduces
    "generation": {"database": "none", "mode": "all"},
    "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
    "warnings": False,
}
OPERATIONS = hypothesis.settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
CHAINS = hypothesis.settings(
    max_examples=40,
    stateful_step_count=8,
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)


# Built here, started by the first call (its lifespan runs in Schemathesis's own thread):
# creating the app opens nothing, so collecting this module writes no file.
DATABASE = Path(tempfile.gettempdir()) / f"headway-schemathesis-{uuid.uuid4().hex}.db"
APP = create_app(
    Settings(
        database_url=f"sqlite:///{DATABASE}",
        run_worker=False,
        rate_limits=False,
        # Generated URLs name random hosts: no DNS lookups for them.
        webhook_allow_private=True,
        # Schemathesis sends `Host: testserver`; let /mcp answer it rather than refuse it.
        mcp_allowed_hosts=("*",),
    )
)
# The document `GET /openapi.json` answers (`app.state.openapi`), taken without a request:
# `from_asgi` would start the app as the module is collected, and `from_fixture` does not
# work with pytest 9 (it sets `Function._nodeid`, which pytest no longer has).
schema = schemathesis.openapi.from_dict(
    APP.state.openapi, config=SchemathesisConfig.from_dict(CONFIG)
)
schema.app = APP
# A live stream never ends, and an answer is checked once it has ended: the streams have
# tests of their own (tests/test_events.py).
schema = schema.exclude(operation_id=["streamSpace", "streamShared"])


@pytest.fixture(scope="module", autouse=True)
def stop_the_app() -> Iterator[None]:
    yield
    asgi.shutdown_lifespans()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{DATABASE}{suffix}").unlink(missing_ok=True)


@schema.parametrize()
@OPERATIONS
def test_every_operation_answers_as_documented(case):
    case.call_and_validate()


@pytest.mark.alone  # its generated chains drift on a busy machine: run by itself
def test_chains_of_operations_answer_as_documented():
    schema.as_state_machine().run(settings=CHAINS)
