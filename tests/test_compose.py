"""deploy/compose.yaml and deploy/nginx.conf as written (tests/test_image.py runs them):
X-Forwarded-For believed from nginx's own fixed address only, no well-known password,
nginx on the host's loopback unless told otherwise, and /metrics not served through it."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
REQUIRED = ("HEADWAY_POSTGRES_PASSWORD", "HEADWAY_REDIS_PASSWORD")
# `${NAME}`, `${NAME:-default}` or `${NAME:?error}`, as compose reads them.
VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*)|:\?([^}]*))?\}")


def stack(**env: str) -> dict[str, Any]:
    """The compose file with its variables filled from `env` (defaults for the others);
    KeyError naming a required variable that is missing."""

    def filled(found: re.Match[str]) -> str:
        name, default, error = found.groups()
        if name in env:
            return env[name]
        if error is not None:
            raise KeyError(error)
        return default or ""

    text = VARIABLE.sub(filled, (DEPLOY / "compose.yaml").read_text())
    return yaml.safe_load(text)


@pytest.fixture
def deployed() -> dict[str, Any]:
    return stack(HEADWAY_POSTGRES_PASSWORD="pg-secret", HEADWAY_REDIS_PASSWORD="redis-secret")


def test_forwarded_addresses_are_believed_from_nginx_alone(deployed):
    """The stack's network has a fixed subnet and nginx a fixed address in it; that one
    address is the only trusted proxy (not the gateway, nor any private range)."""
    [subnet] = [entry["subnet"] for entry in deployed["networks"]["default"]["ipam"]["config"]]
    nginx = deployed["services"]["nginx"]["networks"]["default"]["ipv4_address"]
    network = ipaddress.ip_network(subnet)
    assert ipaddress.ip_address(nginx) in network and nginx != str(next(network.hosts()))
    for name in ("headway", "worker", "migrate"):
        environment = deployed["services"][name]["environment"]
        assert environment["HEADWAY_TRUSTED_PROXIES"] == nginx


def test_the_passwords_must_be_set_and_reach_every_service(deployed):
    for missing in REQUIRED:
        given = {name: "x" for name in REQUIRED if name != missing}
        with pytest.raises(KeyError, match=f"set {missing}"):
            stack(**given)
    services = deployed["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pg-secret"
    assert services["redis"]["command"][-2:] == ["--requirepass", "redis-secret"]
    environment = services["headway"]["environment"]
    assert environment["HEADWAY_DATABASE_URL"].startswith("postgresql://headway:pg-secret@")
    assert environment["HEADWAY_REDIS_URL"].startswith("redis://:redis-secret@")


def test_nginx_listens_on_the_hosts_loopback_unless_told_otherwise(deployed):
    assert deployed["services"]["nginx"]["ports"] == ["127.0.0.1:8000:80"]
    everywhere = stack(HEADWAY_COMPOSE_LISTEN="8000", **dict.fromkeys(REQUIRED, "x"))
    assert everywhere["services"]["nginx"]["ports"] == ["8000:80"]


def test_nginx_answers_metrics_itself_as_an_unknown_path():
    conf = (DEPLOY / "nginx.conf").read_text()
    block = re.search(r"location = /metrics \{(.*?)\n    \}", conf, re.DOTALL)
    assert block is not None and "proxy_pass" not in block[1]
    assert re.search(r"return 404 '\{\"error\": \"[^']+\"\}';", block[1])
