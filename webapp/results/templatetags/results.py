from __future__ import annotations

import json
from typing import Any

from django import template

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
def as_json(value: Any) -> str:
    """Tool arguments as the model wrote them (JSON), not as a Python repr; escaped by the template."""
    return json.dumps(value, ensure_ascii=False)


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
