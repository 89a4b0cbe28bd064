"""No Docker engine runs here, so docker-compose.yml is checked against the settings and docs/deployment.md."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

import webapp.settings  # noqa: F401 - importing it records every variable it reads
from tests.webapp.real_servers import PREPARE, WORKER_HOOKS, product_processes
from webapp.env import KNOWN_VARS
from webapp.roles import ROLES, role_command
from webapp.supervisor import parser, role_options

ROOT = Path(__file__).resolve().parents[2]
OUR_SERVICES = {"web", "worker", "beat"}  # built from our Dockerfile and configured by our settings


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def deployment_section(title: str) -> str:
    text = (ROOT / "docs" / "deployment.md").read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_every_variable_our_services_set_is_one_the_settings_read() -> None:
    services = compose()["services"]
    for name in OUR_SERVICES:
        unknown = set(services[name]["environment"]) - set(KNOWN_VARS)
        assert not unknown, f"{name} sets variables no setting reads: {sorted(unknown)}"


def test_every_service_the_deployment_page_names_exists() -> None:
    named = set(re.findall(r"^\| `([a-z-]+)` \|", deployment_section("Production with docker-compose"), re.M))
    assert {"postgres", "redis", "web", "worker", "beat", "ray-head", "ray-worker"} <= named
    assert named <= set(compose()["services"])


def test_the_gpu_worker_reserves_gpus() -> None:
    devices = compose()["services"]["ray-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


def test_the_deployment_page_documents_exactly_the_variables_the_settings_read() -> None:
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", deployment_section("Environment variables"), re.M))
    assert documented == set(KNOWN_VARS)


def test_published_ports_are_on_loopback() -> None:
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def _role_of(argv: list[str], python: str) -> str:
    """The role a command line runs; it must be exactly what webapp/roles.py writes for that role."""
    args = parser().parse_args(argv[3:])
    assert argv == role_command(args.command, python=python, **role_options(args)), argv
    return str(args.command)


def test_our_services_run_the_commands_the_real_servers_tier_runs(tmp_path: Path) -> None:
    services = compose()["services"]
    compose_roles = {
        name: _role_of(services[name]["command"], "python") for name in (*OUR_SERVICES, "prepare")
    }
    assert all(name == role for name, role in compose_roles.items())
    tier = [PREPARE, *(process.argv for process in product_processes(tmp_path, {}, [1, 2], WORKER_HOOKS))]
    tier_roles = [_role_of(argv, sys.executable) for argv in tier]
    assert tier_roles == ["prepare", "web", "web", "worker", "worker", "beat"]
    assert set(tier_roles) == set(compose_roles.values()) == set(ROLES)
