"""``studio compare``, ``studio histogram`` and ``studio prompt``: study runs and their rollouts
from the shell (docs/cli.md#compare-and-histograms). Each prints the REST answer as text, or as
JSON with ``--json``."""

from __future__ import annotations

from typing import Any

import click

BAR = "█"
BAR_WIDTH = 40


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def compare_text(found: dict[str, Any]) -> str:
    """The runs as columns: results with their % change, then time, tokens, health, config."""
    runs = found["runs"]
    rows = [
        ["", *(f"{r['name']} ({r['id']})" + (" *" if r["id"] == found["baseline"] else "") for r in runs)]
    ]
    for metric in found["metrics"]:
        cells = [
            _number(v) + ("" if c is None else f" ({c:+.1f}%)")
            for v, c in zip(metric["values"], metric["changes"], strict=True)
        ]
        rows.append([metric["label"], *cells])
    rows.append(["steps", *(str(r["steps"]) for r in runs)])
    rows.append(["time (s)", *(_number(r["duration_s"]) for r in runs)])
    rows.append(["generated tokens", *(_number(r["generated_tokens"]) for r in runs)])
    rows.append(["health", *(", ".join(r["health_firing"]) or "ok" for r in runs)])
    for section in found["config"]:
        rows += [[row["path"], *row["values"]] for row in section["rows"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    return "\n".join([*lines, "* the baseline"])


def histogram_text(found: dict[str, Any]) -> str:
    bins = found["bins"]
    most = max([b["count"] for b in bins] or [1]) or 1
    lines = [f"{found['measure']} at step {found['step']}"]
    for b in bins:
        bar = BAR * round(b["count"] / most * BAR_WIDTH)
        lines.append(f"[{b['low']:>10.4g}, {b['below']:<10.4g}) {b['count']:>7}  {bar}")
    return "\n".join(lines)


def heat_map_text(found: dict[str, Any]) -> str:
    """One line per column of steps: its counts per value bin as shades."""
    shades = " ░▒▓█"
    most = max([max(column) for column in found["counts"]] or [1]) or 1
    edges = found["edges"]
    lines = (
        [f"{found['measure']}: value bins from {edges[0]:.4g} to {edges[-1]:.4g} (left to right)"]
        if edges
        else []
    )
    for (first, last), column in zip(found["steps"], found["counts"], strict=True):
        row = "".join(shades[min(4, -(-count * 4 // most))] for count in column)
        lines.append(f"steps {first:>7}-{last:<7} |{row}| {sum(column)}")
    return "\n".join(lines) or "no rollouts"


def prompt_text(found: dict[str, Any]) -> str:
    lines = []
    for side in found["sides"]:
        path = " → ".join(
            f"{'+' if kind == 'added' else '-' if kind == 'removed' else ''}{name}"
            for kind, name in side["tool_path"]
        )
        lines.append(
            f"run {side['run']} step {side['step']} {side['uid']}: reward {side['total_reward']:.4g}, "
            f"tools {path or 'none'}"
        )
    for step in found["steps"]:
        lines.append(f"-- step {step['index']}")
        for side, cell in zip(found["sides"], step["cells"], strict=True):
            if cell is None:
                continue
            shown = (
                cell["response"]
                if cell["diff"] is None
                else "".join(
                    text if kind == "same" else f"[{'+' if kind == 'added' else '-'}{text}]"
                    for kind, text in cell["diff"]
                )
            )
            lines.append(f"run {side['run']}@{side['step']}: {shown}")
    return "\n".join(lines)


@click.command("compare")
@click.argument("run_ids", nargs=-1, type=int, required=True)
@click.option(
    "--baseline", type=int, default=None, help="The run the changes are against (default: the first)."
)
@click.option("--all", "every", is_flag=True, help="Every config value, not only those that differ.")
@click.pass_obj
def compare(context: Any, run_ids: tuple[int, ...], baseline: int | None, every: bool) -> None:
    """Compare 2 to 8 runs: results with their % change against a baseline, time, tokens, health and
    the config values that differ."""
    found = context.client().compare_runs(run_ids, baseline, every)
    context.emit(found, lambda: compare_text(found))


@click.command("histogram")
@click.argument("run_id", type=int)
@click.option(
    "--measure", default="reward", show_default=True, help="reward, advantage, length, turns or tool_calls."
)
@click.option("--step", type=int, default=None, help="Default: the newest step with rollouts.")
@click.option("--heatmap", is_flag=True, help="Every step's histogram instead (steps down, values across).")
@click.pass_obj
def histogram(context: Any, run_id: int, measure: str, step: int | None, heatmap: bool) -> None:
    """A step's histogram of a measure of the run's trajectories, or its heat-map over every step."""
    found = context.client().histogram(run_id, measure, step, heatmap)
    context.emit(found, lambda: heat_map_text(found) if heatmap else histogram_text(found))


@click.command("prompt")
@click.argument("sample", type=int)
@click.argument("sides", nargs=-1, required=True, metavar="RUN:STEP...")
@click.option("--rollout", type=int, default=0, show_default=True, help="Which of the n samples.")
@click.pass_obj
def prompt(context: Any, sample: int, sides: tuple[str, ...], rollout: int) -> None:
    """One dataset row's rollouts in 2 to 8 runs or steps, aligned step by step, each diffed word by
    word against the first ([+added] [-removed])."""
    found = context.client().prompt_rollouts(sample, sides, rollout)
    context.emit(found, lambda: prompt_text(found))


COMMANDS = (compare, histogram, prompt)
