"""Faults on the Ray launch path, against the real test head on loopback: the head unreachable when a
run is submitted or polled, and the job's process killed. Each run still reaches a terminal state
within the reaper's limits (docs/reliability.md#the-reaper); the reaper's step (services.reconcile)
runs here in the test process, so the test decides when it looks.

And the head itself: every socket any of its processes listens on is on loopback.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import time
from datetime import timedelta
from typing import Any

import psutil
import pytest
from django.utils import timezone

from tests.webapp.experiments.test_launching import tiny_config
from tests.webapp.polling import poll_until
from tests.xdist_workers import free_port
from webapp.experiments import services
from webapp.experiments.executors import submission_id
from webapp.experiments.models import Experiment, Run, RunStatus

pytestmark = pytest.mark.slow


def _ray_run(personas: Any, arithmetic: Any) -> Run:
    config = tiny_config(arithmetic, executor="ray")
    experiment = Experiment.create(personas["acme"], personas["alice"], config, [1])
    run = Run.objects.create(
        experiment=experiment, team=experiment.team, seed=1, executor="ray", config=experiment.config
    )
    run.enqueue()
    return run


def _nobody_listens(settings: Any) -> None:
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"


def test_a_run_submitted_while_the_ray_head_is_unreachable_fails_with_the_reason(
    personas: Any, arithmetic: Any, settings: Any
) -> None:
    _nobody_listens(settings)
    run = _ray_run(personas, arithmetic)
    services.start_run(run)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.finished_at is not None
    assert run.message.startswith("could not start on the ray executor:"), run.message
    assert settings.RAY_ADDRESS.removeprefix("http://") in run.message


def test_a_starting_ray_run_whose_head_stays_unreachable_fails_after_the_stall_limit(
    personas: Any, arithmetic: Any, settings: Any
) -> None:
    run = _ray_run(personas, arithmetic)
    assert run.mark_starting(f"ray:{submission_id(run)}")
    _nobody_listens(settings)
    services.reconcile(run)  # within the limit: an unreachable head is no verdict on the run
    run.refresh_from_db()
    assert run.status == RunStatus.STARTING
    Run.objects.filter(pk=run.pk).update(
        starting_at=timezone.now() - timedelta(seconds=settings.STALL_AFTER_S + 1)
    )
    services.reconcile(Run.objects.get(pk=run.pk))
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.message.startswith("the ray executor lost the run:"), run.message


def _driver(head: Any, run: Run) -> psutil.Process | None:
    for proc in head.processes():
        try:
            command = proc.cmdline()
        except psutil.Error:
            continue
        if "trainer" in command and "--run-id" in command and str(run.pk) in command:
            return proc
    return None


def test_a_ray_job_whose_process_is_killed_ends_the_run_failed(
    personas: Any, arithmetic: Any, settings: Any, ray_head: Any
) -> None:
    settings.RAY_ADDRESS = ray_head.address
    run = _ray_run(personas, arithmetic)
    services.start_run(run)
    run.refresh_from_db()
    assert run.status == RunStatus.STARTING and run.executor_ref == f"ray:{submission_id(run)}"
    driver = poll_until(lambda: _driver(ray_head, run))
    driver.send_signal(signal.SIGKILL)
    poll_until(
        lambda: services.reconcile(Run.objects.get(pk=run.pk)) or Run.objects.get(pk=run.pk).is_terminal
    )
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED, (run.status, run.message)
    assert run.message.startswith(f"ray job {submission_id(run)} FAILED"), run.message
    assert _driver(ray_head, run) is None


def _listening(head: Any) -> list[tuple[str, str, int]]:
    found = []
    for proc in head.processes():
        try:
            for conn in proc.net_connections(kind="inet"):
                bound = conn.type == socket.SOCK_DGRAM or conn.status == psutil.CONN_LISTEN
                if bound and conn.laddr:
                    found.append((proc.name(), conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            continue
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def test_every_process_of_the_test_ray_head_listens_on_loopback_only(ray_head: Any) -> None:
    # The raylet and the agents may start listening after the Jobs API answers (later still on a
    # busy machine): wait until they listen, the head dies, or two minutes pass.
    late = {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}
    deadline = time.monotonic() + 120

    def agents_up() -> list[tuple[str, str, int]] | bool:
        found = _listening(ray_head)
        if ray_head.proc.poll() is not None or time.monotonic() > deadline:
            return True  # nothing more will start: check what there is
        return found if {"raylet", *late} <= {name for name, _, _ in found} else []

    poll_until(agents_up, every_s=0.5)
    sockets = _listening(ray_head)
    assert {"gcs_server", "raylet", *late} <= {name for name, _, _ in sockets}, sockets
    assert [s for s in sockets if not _is_loopback(s[1])] == []
