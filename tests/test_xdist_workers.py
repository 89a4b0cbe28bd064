"""The per-worker split that lets `make test` run two xdist workers on one Valkey."""

from __future__ import annotations

import pytest

from tests import xdist_workers
from tests.xdist_workers import redis_url_for_worker, worker_index


def test_each_worker_gets_the_next_valkey_database_on_the_same_server() -> None:
    assert redis_url_for_worker("redis://127.0.0.1:6379/0", worker_index("gw0")) == "redis://127.0.0.1:6379/0"
    assert redis_url_for_worker("redis://127.0.0.1:6379/0", worker_index("gw1")) == "redis://127.0.0.1:6379/1"
    assert redis_url_for_worker("redis://:pw@host:6379/4", 2) == "redis://:pw@host:6379/6"
    assert redis_url_for_worker("redis://host:6379", 1) == "redis://host:6379/1"


def test_a_worker_past_valkeys_sixteen_databases_is_refused_with_a_clear_message() -> None:
    with pytest.raises(pytest.UsageError, match="needs Valkey database 16"):
        redis_url_for_worker("redis://host:6379/15", 1)


def test_this_worker_uses_its_own_valkey_database_and_var_dir(settings: object) -> None:
    import os

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    broker: str = settings.CELERY_BROKER_URL  # type: ignore[attr-defined]
    given = xdist_workers.given_redis_url
    assert given is not None, "run through `make test`, which sets REDIS_URL"
    if worker is None:  # one process (TEST_WORKERS=0): the launcher's URL as given
        assert broker == given
        return
    assert settings.VAR_DIR.name == worker  # type: ignore[attr-defined]
    assert broker == redis_url_for_worker(given, worker_index(worker))
