"""``python -m trainer``: run, validate, list presets.

    python -m trainer run CONFIG.yaml [--set rollout.n=8 ...]     standalone: console + JSONL
    python -m trainer run --run-id N --api URL                      a webapp run (token: $STUDIO_RUN_TOKEN)
    python -m trainer validate CONFIG.yaml [--set ...]
    python -m trainer presets

Exit codes: 0 done, 1 training failed, 2 bad config or usage, 130 / 143 cancelled by SIGINT /
SIGTERM. A first SIGINT or SIGTERM asks the backend to finish its current step (and checkpoint
if configured) and stop; a second SIGINT stops at once.

The CLI owns the run's status reports (running, then succeeded / failed / cancelled); the backend
reports metrics, trajectories, heartbeats and checkpoints. This module imports no torch: the
backend is imported inside the command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import yaml
from pydantic import ValidationError

from trainer.backends import BACKENDS
from trainer.config import RunConfig, validation_errors
from trainer.contract import API_ENV, CLAIMANT_ENV, TOKEN_ENV, RunSpecs, new_claimant_id
from trainer.plugins import load_plugins
from trainer.registry import RegistryError
from trainer.report.client import RunApiClient
from trainer.report.http import HttpReporter
from trainer.report.reporters import ConsoleReporter, JsonlReporter, MultiReporter, Reporter
from trainer.report.retry import PermanentHttpError, RetryableHttpError
from trainer.team import check_run_tools, needs_specs, run_scope

logger = logging.getLogger("trainer")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SIGINT = 128 + signal.SIGINT  # 130, the shell's convention for "killed by signal N"
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143

TrainFn = Callable[..., Any]


class UsageError(Exception):
    """A bad command line or config: exit 2 with these messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{path}: {m}" for path, messages in errors.items() for m in messages))
        self.errors = errors


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        code: int = args.command(args)
    except UsageError as error:
        _print_errors(error.errors)
        return EXIT_USAGE
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer", description="Agent-R1 Studio trainer.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="train: from a config file, or a webapp run with --run-id")
    run.add_argument("config", nargs="?", type=Path, help="YAML config file (standalone run)")
    _add_set_option(run)
    run.add_argument("--run-id", help="the webapp run to execute (fetches its config and dataset)")
    run.add_argument("--api", default=os.environ.get(API_ENV), help=f"webapp base URL (default ${API_ENV})")
    run.add_argument("--work-dir", type=Path, help="where a webapp run's dataset is downloaded")
    run.add_argument("--spool-dir", type=Path, help="where undelivered report batches wait")
    run.set_defaults(command=cmd_run)

    validate = commands.add_parser("validate", help="check a config file and print its errors")
    validate.add_argument("config", type=Path, help="YAML config file")
    _add_set_option(validate)
    validate.set_defaults(command=cmd_validate)

    presets = commands.add_parser("presets", help="list the algorithm presets")
    presets.set_defaults(command=cmd_presets)
    return parser


def _add_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field by dotted path; VALUE is read as YAML (8, true, null, [a, b])",
    )


# -- commands -------------------------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.sets)
    problems = input_problems(config)
    if problems:
        raise UsageError(problems)
    print(
        f"{args.config}: valid (preset {config.preset}, estimator {config.algorithm.estimator}, "
        f"loss {config.algorithm.policy_loss}, kl {config.algorithm.kl_mode})"
    )
    return EXIT_OK


def cmd_presets(args: argparse.Namespace) -> int:
    from trainer.algos.presets import PRESETS

    for name in PRESETS.names():
        preset = PRESETS.get(name)
        critic = "critic" if preset.use_critic else "no critic"
        print(
            f"{name:<10} {preset.estimator} + {preset.policy_loss}, {critic}, kl {preset.kl_mode}"
            f"  {preset.describe()}"
        )
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    if (args.config is None) == (args.run_id is None):
        raise UsageError({"run": ["give either a CONFIG.yaml or --run-id (with --api), not both or neither"]})
    if args.run_id is not None:
        if args.sets:
            raise UsageError(
                {"--set": ["a webapp run uses the config stored with it; --set is for config files"]}
            )
        return _run_remote(args)
    config = load_config(args.config, args.sets)
    problems = input_problems(config)
    if problems:
        raise UsageError(problems)
    progress = config.report.console and sys.stderr.isatty()
    with _redirect_logs_around_progress_bar(progress):
        return run_training(config, _combine(local_reporters(config, progress=progress)))


def _run_remote(args: argparse.Namespace) -> int:
    token = os.environ.get(TOKEN_ENV)
    if not args.api:
        raise UsageError({"--api": [f"--run-id needs the webapp's URL: pass --api URL or set {API_ENV}"]})
    if not token:
        raise UsageError(
            {TOKEN_ENV: [f"--run-id needs the run's token in the environment variable {TOKEN_ENV}"]}
        )
    # The launcher gives every process of one start the same claimant id (verl's workers report
    # too); a process started by hand makes its own, which the processes it starts inherit.
    claimant = os.environ.setdefault(CLAIMANT_ENV, new_claimant_id())
    if not _claim(args, token, claimant):
        return EXIT_FAILED
    http = HttpReporter(args.api, args.run_id, token, claimant=claimant, spool_dir=args.spool_dir)
    forward = _ForwardLogs(http)
    logging.getLogger().addHandler(forward)
    try:
        with _work_dir(args.work_dir, args.run_id) as work_dir:
            return _fetch_and_train(args, token, http, work_dir)
    except UsageError as error:
        http.set_status("failed", f"bad config: {error}")
        raise
    finally:
        logging.getLogger().removeHandler(forward)
        http.close()


def _fetch_and_train(args: argparse.Namespace, token: str, http: HttpReporter, work_dir: Path) -> int:
    fetched = _fetch_run(args, token, http, work_dir)
    if fetched is None:
        return EXIT_FAILED
    config, specs = fetched
    # Before ``http``: the console's "status ..." line reaches the server's log (through the logging
    # handler into ``http``) before the status itself, after which the run's token is dead.
    reporters = [*local_reporters(config, progress=False), http]
    return run_training(config, _combine(reporters), specs=specs)


def local_reporters(config: RunConfig, *, progress: bool) -> list[Reporter]:
    """The reporters the run's ``report`` section asks for besides the web app: the console (first,
    with a progress bar when ``progress``), then the JSONL file."""
    reporters: list[Reporter] = [ConsoleReporter(progress=progress)] if config.report.console else []
    if config.report.jsonl_path:
        reporters.append(JsonlReporter(config.report.jsonl_path))
    return reporters


def _claim(args: argparse.Namespace, token: str, claimant: str) -> bool:
    """Claim the run before reporting anything: a second process for the same run (a retried
    launch) must leave the run to the first one untouched."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    with RunApiClient(args.api, args.run_id, token) as api:
        try:
            claimed = api.claim(worker, claimant)
        except (httpx.HTTPError, PermanentHttpError, RetryableHttpError) as error:
            logger.error("could not claim run %s at %s: %s", args.run_id, args.api, error)
            return False
    if not claimed:
        logger.error("run %s is already owned by another process; exiting without touching it", args.run_id)
    return claimed


@contextlib.contextmanager
def _work_dir(given: Path | None, run_id: str) -> Iterator[Path]:
    """``given``, or a temporary folder that is removed afterwards (the dataset is only a copy)."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix=f"agent-r1-run-{run_id}-") as temporary:
        yield Path(temporary)


def _fetch_run(
    args: argparse.Namespace, token: str, http: HttpReporter, work_dir: Path
) -> tuple[RunConfig, RunSpecs] | None:
    """The run's config with its dataset downloaded and data paths pointing at the local files, and
    its team tools and rewards (never logged: they hold secrets)."""
    with RunApiClient(args.api, args.run_id, token) as api:
        try:
            config = api.fetch_config()
            specs = (
                api.fetch_specs() if needs_specs(config.rollout.tools, config.data.rewards) else RunSpecs()
            )
            # An evaluation reads its val split only (docs/evaluations.md).
            evaluating = config.evaluation.enabled
            train = None if evaluating else api.download_dataset("train", work_dir)
            val = api.download_dataset("val", work_dir) if config.data.val_path else None
        except ValidationError as error:
            raise UsageError(validation_errors(error)) from None
        except PermanentHttpError as error:
            logger.error("could not fetch run %s from %s: %s", args.run_id, args.api, error)
            http.set_status("failed", _refusal(error))
            return None
        except (httpx.HTTPError, RetryableHttpError) as error:
            logger.error("could not fetch run %s from %s: %s", args.run_id, args.api, error)
            http.set_status("failed", f"could not fetch the run's config or dataset: {error}")
            return None
    if train is None and not evaluating:
        http.set_status("failed", "the run has no train split")
        return None
    if evaluating and val is None:
        http.set_status("failed", "the evaluation has no val split to score")
        return None
    logger.info("run %s: dataset downloaded into %s", args.run_id, work_dir)
    config = config.with_overrides(
        **{"data.train_path": str(train) if train else "", "data.val_path": str(val) if val else None}
    )
    return config, specs


def _refusal(error: PermanentHttpError) -> str:
    """The web app's own words for a refused fetch (``{"error": ...}``), else the HTTP error."""
    try:
        message = json.loads(error.body).get("error")
    except (ValueError, AttributeError):
        message = None
    return (
        f"the run cannot start: {message}"
        if message
        else f"could not fetch the run's config or dataset: {error}"
    )


# -- training -------------------------------------------------------------------------------------


def run_training(
    config: RunConfig, reporter: Reporter, train: TrainFn | None = None, *, specs: RunSpecs | None = None
) -> int:
    """Train under signal handlers that ask for a clean stop, report the outcome, close the reporter.

    Returns the exit code. ``train`` defaults to the config's backend; ``specs`` are the run's team
    tools and rewards, registered for this run only (trainer.team.run_scope).
    """
    stop = threading.Event()
    received: list[int] = []
    try:
        return _train_and_report(config, reporter, train, stop, received, specs)
    finally:
        reporter.close()


def _train_and_report(
    config: RunConfig,
    reporter: Reporter,
    train: TrainFn | None,
    stop: threading.Event,
    received: list[int],
    specs: RunSpecs | None,
) -> int:
    try:
        with _stop_on_signals(stop, received):
            # Recipes (tasks_lib or a user's package) register their rewards, tools and envs here.
            load_plugins()
            # The backend imports its libraries (torch, verl) only now, inside train.
            train = train or BACKENDS.get(config.backend).train
            with run_scope(specs, config.data.rewards, config.data.reward_rule):
                # A tool that is gone fails the run here, before any model is loaded.
                check_run_tools(config.rollout.tools)
                reporter.set_status("running")
                result = train(config, reporter, stop_event=stop)
    except KeyboardInterrupt:
        reporter.set_status("cancelled", "interrupted")
        return EXIT_SIGINT
    except Exception as error:
        logger.exception("training failed")
        reporter.set_status("failed", f"{type(error).__name__}: {error}")
        return EXIT_FAILED
    # The backend's own verdict wins: a signal that lands during the last step does not undo a
    # finished run. A backend that returns no status is judged by the stop event.
    status = getattr(result, "status", "cancelled" if stop.is_set() else "succeeded")
    if status == "cancelled":
        cause = signal.Signals(received[0]).name if received else "a stop request"
        reporter.set_status("cancelled", f"stopped by {cause}")
        return EXIT_SIGTERM if received and received[0] == signal.SIGTERM else EXIT_SIGINT
    reporter.set_status("succeeded", progress=1.0)
    return EXIT_OK


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event, received: list[int]) -> Iterator[None]:
    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait for the step
        received.append(signum)
        stop.set()
        logger.warning("%s: finishing the current step, then stopping", signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return
    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# -- helpers --------------------------------------------------------------------------------------


def load_config(path: Path, sets: Sequence[str] = ()) -> RunConfig:
    """A config file with ``--set`` overrides on top (over its task recipe's defaults and its preset's);
    UsageError (field path -> messages) if bad."""
    overrides = parse_sets(sets)
    load_plugins()  # the recipes register their defaults (and rewards, tools, envs)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError({str(path): [f"cannot read the config file: {error.strerror or error}"]}) from None
    try:
        return RunConfig.from_yaml(text, **overrides)
    except yaml.YAMLError as error:
        raise UsageError({str(path): [f"not valid YAML: {error}"]}) from None
    except ValidationError as error:
        raise UsageError(validation_errors(error)) from None
    except RegistryError as error:
        raise UsageError({"preset": [str(error)]}) from None
    except ValueError as error:
        raise UsageError({str(path): [str(error)]}) from None


def parse_sets(sets: Sequence[str]) -> dict[str, Any]:
    """``["rollout.n=8", "data.val_path=null"]`` -> ``{"rollout.n": 8, "data.val_path": None}``."""
    overrides: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError({"--set": [f"{item!r} is not KEY=VALUE (e.g. --set rollout.n=8)"]})
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw  # not YAML: take the text as it is
        overrides[key.strip()] = value
    return overrides


def input_problems(config: RunConfig) -> dict[str, list[str]]:
    """What a standalone run needs beyond a valid config: a model and data files that exist."""
    problems: dict[str, list[str]] = {}
    if not config.model.path:
        problems["model.path"] = ["no model: set model.path to a Hugging Face model folder"]
    # An evaluation reads data.val_path only, which RunConfig requires of it.
    train = None if config.evaluation.enabled else config.data.train_path
    if train == "":
        problems["data.train_path"] = ["no training data: set data.train_path to a parquet file"]
    elif train is not None and not Path(train).is_file():
        problems["data.train_path"] = [f"{train} does not exist: set data.train_path to a parquet file"]
    val = config.data.val_path
    if val and not Path(val).is_file():
        problems["data.val_path"] = [f"{val} does not exist: set data.val_path to a parquet file, or to null"]
    return problems


def _combine(reporters: list[Reporter]) -> Reporter:
    return reporters[0] if len(reporters) == 1 else MultiReporter(reporters)


class _ForwardLogs(logging.Handler):
    """Sends the process's log lines to the webapp's log view (not the reporter's own, nor httpx's)."""

    def __init__(self, reporter: HttpReporter) -> None:
        super().__init__(level=logging.INFO)
        self.reporter = reporter
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(("trainer.report", "httpx", "httpcore")):
            return
        try:
            self.reporter.log_text(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def _redirect_logs_around_progress_bar(progress: bool) -> Iterator[None]:
    if not progress:
        yield
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm():
        yield


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request at INFO; the reporter makes one every few seconds.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _print_errors(errors: dict[str, list[str]]) -> None:
    for path, messages in errors.items():
        for message in messages:
            print(f"error: {path}: {message}", file=sys.stderr)
