"""What every `studio` command shares: the context that holds the settings and prints answers, the
exit codes, and the readers of --set pairs and dataset answers (docs/cli.md)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from trainer.studio.client import Settings, StudioClient

EXIT_REFUSED, EXIT_FAILED_OUTCOME, EXIT_UNREACHABLE = 1, 3, 4


class Context:
    def __init__(self, as_json: bool, team: str | None, url: str | None) -> None:
        self.as_json = as_json
        self.settings = Settings.load()
        if team:
            self.settings.team = team
        if url:
            self.settings.url = url

    def client(self) -> StudioClient:
        return StudioClient(self.settings)

    def emit(self, value: Any, text: str | Callable[[], str]) -> None:
        click.echo(json.dumps(value, indent=2) if self.as_json else (text() if callable(text) else text))


pass_context = click.make_pass_decorator(Context)


def set_pairs(pairs: Sequence[str]) -> dict[str, Any]:
    chosen: dict[str, Any] = {}
    for pair in pairs:
        path, sep, raw = pair.partition("=")
        if not sep or not path:
            raise click.BadParameter(f"{pair!r}: write PATH=VALUE", param_hint="--set")
        try:
            chosen[path] = json.loads(raw)
        except json.JSONDecodeError:
            chosen[path] = raw
    return chosen


def dataset_text(dataset: dict[str, Any]) -> str:
    lines = [f"dataset {dataset['id']} {dataset['name']!r}: {dataset['status']}"]
    lines += [f"  {problem.get('message', problem)}" for problem in dataset.get("problems", [])[:10]]
    return "\n".join(lines)
