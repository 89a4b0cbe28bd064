"""``studio label``, ``studio queue`` and ``studio export``: review rollouts from the shell
(docs/annotations.md#rest-and-cli)."""

from __future__ import annotations

import sys

import click

from trainer.studio.cli_context import EXIT_FAILED_OUTCOME, Context, dataset_text, pass_context, set_pairs


@click.command()
@click.argument("run_id", type=int)
@click.argument("trajectory")
@click.argument("label")
@click.option("--step", type=int, default=None, help="A step's index (default: the whole trajectory).")
@click.option("--note", default="")
@click.option("--answer", default="", help="The corrected answer (a saved dataset takes it as ground truth).")
@pass_context
def label(
    context: Context, run_id: int, trajectory: str, label: str, step: int | None, note: str, answer: str
) -> None:
    """Label TRAJECTORY (its id) of RUN_ID with LABEL ("" for none); your own annotation, replaced."""
    body = {"step": step, "label": label, "note": note, "corrected_answer": answer}
    done = context.client().annotate(run_id, trajectory, body)
    context.emit(
        done, f"{trajectory}{'' if step is None else f' step {step}'}: {done['label'] or '(no label)'}"
    )


@click.command()
@click.argument("run_id", type=int)
@click.option(
    "--filter",
    "filters",
    multiple=True,
    metavar="NAME=VALUE",
    help="A rollout filter: step=40, success=false.",
)
@click.option("--search", default="", help="A full-text search within the filters, e.g. Traceback.")
@click.option("--order", default="lowest reward", show_default=True)
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--assign", multiple=True, help="A member's user name; repeat for more.")
@click.option("--reviews", type=int, default=1, show_default=True, help="Reviewers per item.")
@click.option("--name", default="")
@pass_context
def queue(
    context: Context,
    run_id: int,
    filters: tuple[str, ...],
    search: str,
    order: str,
    limit: int,
    assign: tuple[str, ...],
    reviews: int,
    name: str,
) -> None:
    """Build a review queue of RUN_ID's rollouts."""
    body = {
        "name": name,
        "filters": set_pairs(filters),
        "q": search,
        "order": order,
        "limit": limit,
        "assignees": list(assign),
        "reviews_wanted": reviews,
    }
    made = context.client().build_queue(run_id, body)
    context.emit(made, f"queue {made['id']} {made['name']!r}: {made['done']} / {made['total']} done")


@click.command()
@click.argument("queue_id", type=int)
@click.option("--name", default="")
@click.option("--corrected-only", is_flag=True, help="Only prompts a reviewer gave a corrected answer.")
@pass_context
def export(context: Context, queue_id: int, name: str, corrected_only: bool) -> None:
    """Save QUEUE_ID's prompts as a dataset of the team (ground truth or the corrected answers)."""
    saved = context.client().export_queue(queue_id, {"name": name, "corrected_only": corrected_only})
    context.emit(saved, lambda: dataset_text(saved))
    if saved["status"] != "valid":
        sys.exit(EXIT_FAILED_OUTCOME)


COMMANDS = (label, queue, export)
