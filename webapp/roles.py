"""The product's own processes and the command line of each: one source for every way they start.

`make run`'s supervisor, docker-compose.yml's services and the real-servers test tier all run
``python -m webapp.supervisor <role>`` (:func:`role_command`), which runs :func:`program_argv`'s
program in its place (docs/deployment.md#the-products-processes):

- ``prepare``: migrate the database and create the first admin; once, before the web servers start;
- ``web``: gunicorn with webapp/gunicorn_conf.py's settings; as many as the load needs;
- ``worker``: a Celery worker (launches, the reaper's passes, imports); as many as the load needs;
- ``beat``: Celery beat, the clock of the periodic tasks; exactly one per deployment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

# Each role and what it does, as `python -m webapp.supervisor --help` says it.
ROLES = {
    "prepare": "migrate the database and create the first admin, then exit",
    "web": "run a web server (gunicorn)",
    "worker": "run a Celery worker",
    "beat": "run Celery beat (one per deployment)",
}
PROGRAM_ROLES = ("web", "worker", "beat")  # a long-running program each; prepare runs and ends
SUPERVISOR_MODULE = "webapp.supervisor"
WORKER_CONCURRENCY = 2


def role_command(
    role: str,
    *,
    python: str = sys.executable,
    bind: str = "",
    workers: int | None = None,
    name: str = "",
    passed_on: Sequence[str] = (),
) -> list[str]:
    """How a role is started: ``python -m webapp.supervisor <role>`` with the options given. ``bind``
    and ``workers`` are the web server's (default: 127.0.0.1:PORT and STUDIO_WEB_WORKERS); ``name``
    is a worker's Celery node name, which must differ between workers on one host; ``passed_on``
    goes to the program as it is (after ``--``)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
    argv = [python, "-m", SUPERVISOR_MODULE, role]
    if bind:
        argv += ["--bind", bind]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if name:
        argv += ["--name", name]
    return [*argv, "--", *passed_on] if passed_on else argv


def program_argv(
    role: str, *, bind: str = "", workers: int | None = None, name: str = "", passed_on: Sequence[str] = ()
) -> list[str]:
    """The program a long-running role runs: gunicorn for web, Celery for worker and beat."""
    return [*_program(role, bind=bind, workers=workers, name=name), *passed_on]


def _program(role: str, *, bind: str, workers: int | None, name: str) -> list[str]:
    bin_dir = Path(sys.executable).parent
    if role == "web":
        argv = [str(bin_dir / "gunicorn"), "-c", "python:webapp.gunicorn_conf"]
        argv += ["--bind", bind] if bind else []
        return argv + (["--workers", str(workers)] if workers is not None else [])
    celery = [str(bin_dir / "celery"), "-A", "webapp"]
    if role == "worker":
        argv = [*celery, "worker", "--loglevel", "INFO", "--concurrency", str(WORKER_CONCURRENCY)]
        return argv + (["--hostname", f"{name}@%h"] if name else [])
    if role == "beat":
        # The schedule file is the settings' CELERY_BEAT_SCHEDULE_FILENAME; no pid file, whose stale
        # copy would stop a restarted beat from starting.
        return [*celery, "beat", "--loglevel", "INFO", "--pidfile", ""]
    raise ValueError(f"{role!r} runs no long-lived program; one of {', '.join(PROGRAM_ROLES)}")
