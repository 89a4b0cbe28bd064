from __future__ import annotations

import json
from typing import Any

from django import template

from webapp.experiments.models import RunKind
from webapp.results.analytics import Cell, Matrix, ReferenceTable

register = template.Library()


@register.simple_tag
def cell(matrix: Matrix, task: str, algorithm: str) -> Cell | None:
    return matrix.cell(task, algorithm)


@register.simple_tag
def refvalue(table: ReferenceTable, method: str, task: str, metric: str) -> str:
    value = table.value(method, task, metric)
    return "—" if value is None else f"{value:.2f}"


@register.filter
def pct(value: Any) -> str:
    """A fraction as a percentage with one decimal (how the papers print accuracies)."""
    try:
        return f"{float(value) * 100:.1f}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def signed(value: Any) -> str:
    if value is None:
        return "—"
    return f"{float(value):+.3f}"


@register.filter
def change(value: Any) -> str:
    """A % change against the baseline run, signed, one decimal."""
    return "—" if value is None else f"{float(value):+.1f}%"


@register.filter
def as_json(value: Any) -> str:
    """Tool arguments as the model wrote them (JSON), not as a Python repr; escaped by the template."""
    return json.dumps(value, ensure_ascii=False)


@register.inclusion_tag("results/_run_nav.html", takes_context=True)
def run_nav(context: Any, run: Any) -> dict[str, Any]:
    """The run's tabs. A tab with nothing to show is left out, unless a launched run is still going
    and may yet fill it (an MLflow client never sends rollouts)."""
    from django.urls import reverse

    from webapp.ingestion.models import MetricLatest, ToolCall, Trajectory

    request = context["request"]
    team = context["team"]
    expect_more = not run.is_external and not run.is_terminal
    has_rollouts = expect_more or Trajectory.objects.filter(run=run).exists()
    shown = {
        "run": True,
        "run_curves": expect_more or MetricLatest.objects.filter(run=run).exists(),
        "rollouts": has_rollouts,
        "run_tools": expect_more or (has_rollouts and ToolCall.objects.filter(run_id=run.pk).exists()),
        "run_prompts": has_rollouts,
        "run_histograms": has_rollouts,
    }
    labels = {"run": "Overview", "run_curves": "Curves", "rollouts": "Rollouts", "run_tools": "Tools", "run_prompts": "Prompts",
              "run_histograms": "Histograms"}  # fmt: skip
    tabs = [
        (reverse(name, args=[team.slug, run.pk]), label, name)
        for name, label in labels.items()
        if shown[name]
    ]
    if has_rollouts:  # a team-wide page, narrowed to this run
        tabs.append((reverse("search", args=[team.slug]) + f"?run={run.pk}", "Search", "search"))
    current = request.resolver_match.url_name if request.resolver_match else ""
    return {"team": team, "run": run, "tabs": tabs, "current": current}


@register.filter
def metric(value: Any) -> str:
    """A metric value with four significant digits."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—"
    return f"{number:.4g}"


@register.simple_tag
def run_row(row: Any, team_slug: str) -> str:
    """One row of the runs table's cells, built in Python: a page has 50 rows of up to 40 cells, and
    a template tag per cell (or format_html per value) costs more than the page's queries. Every
    value goes through escape(); only the markup written here is trusted."""
    from django.utils.html import escape
    from django.utils.safestring import mark_safe

    run = row.run
    name = escape(str(run))
    parts = [f'<td class="select"><input type="checkbox" name="run" value="{run.pk}" id="select-run-{run.pk}" '
             f'hx-preserve="true" aria-label="Select {name}"></td>']  # fmt: skip
    for cell in row.cells:
        named = " col-name" if cell.column.id == "name" else ""  # kept wide enough to read (studio.css)
        parts.append(
            f'<td class="col-{cell.column.value_type}{named}">{_cell_html(cell, run, team_slug, name)}</td>'
        )
    return mark_safe("".join(parts))  # built from escaped values only


def _cell_html(cell: Any, run: Any, team_slug: str, name: str) -> str:
    from django.urls import reverse
    from django.utils.html import escape

    column = cell.column.id
    if column == "name":
        archived = ' <span class="badge">archived</span>' if run.is_archived else ""
        note = f' <span class="note-mark" title="{escape(run.note)}">✎</span>' if run.note else ""
        source = getattr(run, "import_source", None)
        imported = (
            f' <span class="badge kind-imported" title="{escape(source)}">imported</span>' if source else ""
        )
        return f'<a href="{escape(reverse("run", args=[team_slug, run.pk]))}">{name}</a>{archived}{imported}{note}'
    if column == "source":
        kind, _, where = (cell.value or "").partition(":")
        return f'<span class="badge kind-imported">{escape(kind)}</span> {escape(where)}' if where else "—"
    if column == "status":
        status = escape(cell.value)
        return f'<span class="status status-{status}">{status}</span>'
    if column == "experiment":
        url = escape(reverse("experiment", args=[team_slug, run.experiment_id]))
        return f'<a href="{url}">{escape(cell.text)}</a>'
    if column == "tags":
        return " ".join(f'<span class="tag">{escape(label)}</span>' for label in cell.value or ())
    if column == "kind":  # the one unmarked kind is the usual one
        kind = escape(cell.text)
        return kind if cell.value == RunKind.TRAINING else f'<span class="badge kind-{kind}">{kind}</span>'
    if column == "health":
        if not run.is_judged:  # an evaluation or an SFT run (docs/health.md#at-ingestion)
            return (
                f'<span class="muted" title="a run of kind {escape(run.kind)} is not health-checked">—</span>'
            )
        if not cell.value:
            return '<span class="health-ok">ok</span>'
        url = escape(reverse("run", args=[team_slug, run.pk]))
        return f'<a class="badge danger" href="{url}#health">{int(cell.value)} firing</a>'
    if column == "started_from" and cell.value:  # the parent run of the lineage (docs/sft.md#start-from)
        url = escape(reverse("run", args=[team_slug, cell.value]))
        return f'<a class="lineage" href="{url}">← run {int(cell.value)}</a>'
    if column == "note":
        short = cell.text if len(cell.text) <= 60 else cell.text[:59] + "…"
        return f'<span title="{escape(cell.text)}">{escape(short)}</span>'
    return str(escape(cell.text))


# Most characters of one model or tool text a page shows: a 200 kB one-line prompt shown whole, in
# several places, takes the browser many seconds to lay out. The REST API returns every text whole.
SHOWN_TEXT_MAX = 20_000


@register.filter
def clip(value: Any, limit: int = SHOWN_TEXT_MAX) -> str:
    """At most ``limit`` characters of a text, and how many were left out; escaped by the template."""
    text = "" if value is None else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… {len(text) - limit:,} more characters (the REST API returns the whole text)"


@register.inclusion_tag("results/_health_panel.html", takes_context=True)
def health_panel(context: Any, run: Any) -> dict[str, Any]:
    """Every health check's state on the run (docs/health.md#checks), and its alerts that could not be
    delivered or wait for another try (docs/health.md#alerts)."""
    from webapp.monitoring.health import panel, undelivered

    return {"team": context["team"], "run": run, "rows": panel(run), "undelivered": undelivered(run)}


@register.filter
def thousands(value: Any) -> str:
    """1204 → "1,204"."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—"


@register.simple_tag
def run_storage(run: Any) -> Any:
    """The run's storage and a form of its policy, for results/_run_storage.html (docs/rollouts.md#storage)."""
    from webapp.retention.accounting import RunStorageView, storage_of
    from webapp.retention.forms import RetentionForm
    from webapp.retention.policy import Retention

    stored = storage_of(run)
    policy = Retention.of(stored)
    return RunStorageView(stored, policy.describe(), RetentionForm(initial=policy.fields()))


@register.simple_tag
def team_storage(team: Any) -> Any:
    """What the team's runs take, and its largest runs, for results/_team_storage.html."""
    from webapp.retention.accounting import team_storage as measured

    return measured(team)
