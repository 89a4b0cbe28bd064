"""The supervisor behind `make run` and `make test`.

``python -m webapp.supervisor run`` starts the embedded services that are not configured, migrates,
creates the first admin, then supervises the web server, a Celery worker and Celery beat beside the
embedded servers: a child that dies is started again with a backoff (webapp/service_watch.py); on
SIGINT/SIGTERM, or when one keeps dying, all of them stop.

``python -m webapp.supervisor test [PYTEST ARGS]`` starts throwaway embedded services (unless
DATABASE_URL / REDIS_URL are given) and runs pytest against them.

``python -m webapp.supervisor prepare|web|worker|beat`` runs one of the product's processes
(webapp/roles.py), as `run` starts them and as docker-compose.yml's services do.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from webapp.embedded import ServiceError, embedded_services, free_port, process_alive, require_free_port
from webapp.roles import PROGRAM_ROLES, ROLES, program_argv, role_command
from webapp.service_watch import STOP_TIMEOUT_S, Command, ServiceWatch, Watched, stop_commands

logger = logging.getLogger("studio")
ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


class StartupError(RuntimeError):
    pass


def _load_settings() -> object:
    """Import the settings now so a malformed env var stops us before anything starts."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        settings.SECRET_KEY  # noqa: B018 - forces the import
    except ImproperlyConfigured as exc:
        raise StartupError(f"configuration error: {exc}") from None
    return settings


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _claim_pid_file(var_dir: Path) -> Path:
    pid_file = var_dir / "studio.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text().strip())
        except ValueError:
            pid = -1
        if pid > 0 and pid != os.getpid() and process_alive(pid):
            raise StartupError(
                f"another Agent-R1 Studio (pid {pid}) is already running with STUDIO_VAR_DIR={var_dir}. "
                f"Stop it first, or set STUDIO_VAR_DIR to another directory."
            )
        logger.warning("removing a stale pid file %s (pid %s is not running)", pid_file, pid)
    var_dir.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(str(os.getpid()))
    return pid_file


def _manage(env: dict[str, str], *args: str) -> None:
    result = subprocess.run([PYTHON, str(ROOT / "manage.py"), *args], env=env, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise StartupError(f"`manage.py {' '.join(args)}` failed with exit code {result.returncode}")


def _prepare(env: dict[str, str]) -> None:
    if subprocess.run(role_command("prepare"), env=env, cwd=ROOT, check=False).returncode != 0:
        raise StartupError("preparing the database (`python -m webapp.supervisor prepare`) failed")


def web_command(port: int, workers: int | None = None) -> list[str]:
    """The web server as `make run` starts it: gunicorn with webapp/gunicorn_conf.py's settings."""
    return program_argv("web", bind=f"127.0.0.1:{port}", workers=workers)


# The children `run` supervises, as /healthz names them, and the role each runs (webapp/roles.py).
CHILD_ROLES = {"web server": "web", "Celery worker": "worker", "Celery beat": "beat"}


def _commands(env: dict[str, str], port: int, web_workers: int | None) -> list[Command]:
    options: dict[str, dict[str, Any]] = {
        "web": {"bind": f"127.0.0.1:{port}", "workers": web_workers},
        "worker": {"name": f"worker-{port}"},
    }
    return [
        Command(what, role_command(role, **options.get(role, {})), env, ROOT)
        for what, role in CHILD_ROLES.items()
    ]


def _supervise(
    env: dict[str, str], port: int, web_workers: int | None, var_dir: Path, embedded: Sequence[Watched] = ()
) -> int:
    """Run web, worker and beat beside the embedded servers until a signal stops us, restarting any
    child that dies (webapp/service_watch.py); 1 when one died too often and everything stopped."""
    commands = _commands(env, port, web_workers)
    for command in commands:
        command.start()
    watch = ServiceWatch([*embedded, *commands], on_give_up=lambda reason: None, status_dir=var_dir)
    watch.start()
    logger.info("Agent-R1 Studio is starting on http://127.0.0.1:%s/ (Ctrl-C stops everything)", port)
    try:
        while watch.is_alive():
            watch.join(0.5)
    finally:
        watch.stop()
        watch.join(STOP_TIMEOUT_S)
        stop_commands(commands)
    if watch.failure:
        logger.error("%s", watch.failure)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    settings = _load_settings()
    var_dir: Path = settings.VAR_DIR  # type: ignore[attr-defined]
    port: int = settings.PORT  # type: ignore[attr-defined]
    pid_file = _claim_pid_file(var_dir)
    try:
        require_free_port(port, "web server", "PORT")
        with embedded_services(
            var_dir,
            pg_port=settings.EMBEDDED_PG_PORT,  # type: ignore[attr-defined]
            valkey_port=settings.EMBEDDED_VALKEY_PORT,  # type: ignore[attr-defined]
            need_postgres="DATABASE_URL" not in os.environ,
            need_valkey="REDIS_URL" not in os.environ,
        ) as urls:
            env = {**os.environ, **urls, "DJANGO_SETTINGS_MODULE": "webapp.settings", "PYTHONUNBUFFERED": "1"}
            _prepare(env)
            _manage(env, "seed_demo")
            return _supervise(env, port, args.web_workers, var_dir, urls.services)
    finally:
        pid_file.unlink(missing_ok=True)


def test(args: argparse.Namespace) -> int:
    var_dir = Path(os.environ.get("STUDIO_TEST_VAR_DIR", ROOT / "var" / "test")).resolve()
    # Run folders are keyed by run id, which restarts with every test database.
    shutil.rmtree(var_dir / "app", ignore_errors=True)
    with embedded_services(
        var_dir,
        pg_port=free_port(),
        valkey_port=free_port(),
        need_postgres="DATABASE_URL" not in os.environ,
        need_valkey="REDIS_URL" not in os.environ,
        fast=True,
    ) as urls:
        env = {
            **os.environ,
            **urls,
            "STUDIO_VAR_DIR": str(var_dir / "app"),
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            # Playwright's sync API runs an event loop in the test thread; Django's ORM must still be usable there.
            "DJANGO_ALLOW_ASYNC_UNSAFE": "true",
            "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1",
            "DJANGO_LIVE_TEST_SERVER_ADDRESS": "127.0.0.1",  # live_server on loopback only
            # torch's idle OpenMP threads otherwise spin and stall everything else on 2 cores.
            "OMP_WAIT_POLICY": "PASSIVE",
        }
        return subprocess.run(
            [PYTHON, "-m", "pytest", *pytest_args(args.pytest_args)], env=env, cwd=ROOT, check=False
        ).returncode


def pytest_args(given: list[str]) -> list[str]:
    """argparse cannot take a remainder that starts with an option (`test -n 2 ...`) unless it
    follows `--`, which it keeps; pytest (or a role's program) must not see it."""
    return given[1:] if given[:1] == ["--"] else given


def prepare(args: argparse.Namespace) -> int:
    """The prepare role: migrate the database, then create the first admin when there is none."""
    _load_settings()
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False)
    call_command("ensure_admin")
    return 0


def role_options(args: argparse.Namespace) -> dict[str, Any]:
    """A role's options from its parsed command line, as webapp/roles.py's functions take them."""
    options = {key: value for key, value in vars(args).items() if key in ("bind", "workers", "name")}
    if args.command in PROGRAM_ROLES:
        options["passed_on"] = pytest_args(args.passed_on)
    return options


def run_role(args: argparse.Namespace) -> int:
    """A long-running role: its program (webapp/roles.py) replaces this process, keeping its pid."""
    argv = program_argv(args.command, **role_options(args))
    os.execv(argv[0], argv)
    return 0  # not reached: execv returns only by raising


def parser() -> argparse.ArgumentParser:
    """The command line; docker-compose.yml's services are parsed with it too (tests/webapp/test_compose.py)."""
    parsed = argparse.ArgumentParser(prog="python -m webapp.supervisor")
    commands = parsed.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser(
        "run", help="run the product (web, worker, beat; embedded services if needed)"
    )
    run_parser.add_argument(
        "--web-workers", type=int, help="web server processes (default: STUDIO_WEB_WORKERS)"
    )
    test_parser = commands.add_parser(
        "test", help="run pytest against embedded services (`test -- -n 2 tests` passes options on)"
    )
    test_parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    for role, what in ROLES.items():
        role_parser = commands.add_parser(role, help=what)
        if role in PROGRAM_ROLES:
            role_parser.add_argument(
                "passed_on", nargs=argparse.REMAINDER, help="-- then options for the program"
            )
    commands.choices["web"].add_argument("--bind", default="", help="HOST:PORT (default: 127.0.0.1:PORT)")
    commands.choices["web"].add_argument(
        "--workers", type=int, help="processes (default: STUDIO_WEB_WORKERS)"
    )
    commands.choices["worker"].add_argument(
        "--name", default="", help="Celery node name, one per worker of a host"
    )
    return parsed


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s studio: %(message)s", datefmt="%H:%M:%S")
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        if args.command in PROGRAM_ROLES:
            return run_role(args)
        return {"run": run, "test": test, "prepare": prepare}[args.command](args)
    except (StartupError, ServiceError) as exc:
        logger.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
