"""The common part of MLflow's search syntax: clauses joined by AND, each ``<entity>.<name> <op>
<value>`` (``attributes.status = 'FINISHED'``, ``params.lr = '0.1'``, ``metrics.loss < 2``,
``attributes.run_id IN ('…', '…')``), ``order_by`` on attributes, metrics, params and tags, and the
lifecycle view (active, deleted, all). Anything else is refused with INVALID_PARAMETER_VALUE rather
than answered wrongly."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery

from trainer.contract import INT4_MAX
from webapp.experiments.models import Experiment, LoggedKind, LoggedValue, Run
from webapp.ingestion.models import MetricLatest
from webapp.mlflow_api.entities import MLFLOW_STATUS, RUN_NAME_TAG, USER_TAG, from_ms
from webapp.mlflow_api.errors import invalid
from webapp.mlflow_api.models import ExperimentTag

_CLAUSE = re.compile(
    r"^(?P<ident>.+?)\s*(?P<op>!=|>=|<=|=|>|<|\s(?:I?LIKE|(?:NOT\s+)?IN)\s)\s*(?P<value>.+)$", re.IGNORECASE
)
_AND = re.compile(r"\s+AND\s+", re.IGNORECASE)
_ENTITIES = {
    "attribute": "attribute",
    "attributes": "attribute",
    "attr": "attribute",
    "run": "attribute",
    "tag": "tag",
    "tags": "tag",
    "param": "param",
    "params": "param",
    "parameter": "param",
    "parameters": "param",
    "metric": "metric",
    "metrics": "metric",
}
_NUMERIC_OPS = {"=": "exact", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


@dataclass(frozen=True)
class Clause:
    entity: str
    name: str
    op: str
    value: Any


def parse_filter(text: str | None) -> list[Clause]:
    if not text or not text.strip():
        return []
    return [_clause(part.strip()) for part in _AND.split(text.strip())]


def _clause(text: str) -> Clause:
    match = _CLAUSE.match(text)
    if match is None:
        raise invalid(f"Invalid filter '{text}'. Could not be parsed.")
    entity, name = _identifier(match["ident"].strip())
    op = " ".join(match["op"].split()).upper()
    value = (
        _values(match["value"].strip(), text) if op.endswith("IN") else _value(match["value"].strip(), text)
    )
    return Clause(entity, name, op, value)


def _values(text: str, clause: str) -> list[str]:
    """``('a', 'b')``: the quoted strings of an IN list."""
    if not (text.startswith("(") and text.endswith(")")):
        raise invalid(f"Invalid filter '{clause}'. An IN list is written ('a', 'b').")
    values = [_value(part.strip(), clause) for part in text[1:-1].split(",") if part.strip()]
    if not values or not all(isinstance(v, str) for v in values):
        raise invalid(f"Invalid filter '{clause}'. An IN list holds quoted strings.")
    return values


def _identifier(ident: str) -> tuple[str, str]:
    prefix, dot, rest = ident.partition(".")
    if dot and prefix.lower() in _ENTITIES:
        return _ENTITIES[prefix.lower()], _unquote(rest)
    return "attribute", _unquote(ident)


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`\"'":
        return text[1:-1]
    return text


def _value(text: str, clause: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    try:
        return float(text)
    except ValueError:
        raise invalid(f"Invalid filter '{clause}'. Values must be quoted strings or numbers.") from None


def _text_q(field: str, op: str, value: Any) -> Q:
    if not isinstance(value, str):
        raise invalid(f"Expected a quoted string value for '{field}', got {value}")
    if op == "=":
        return Q(**{field: value})
    if op == "!=":
        return ~Q(**{field: value})
    if op in ("LIKE", "ILIKE"):
        pattern = "^" + "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in value) + "$"
        return Q(**{f"{field}__{'iregex' if op == 'ILIKE' else 'regex'}": pattern})
    raise invalid(f"Invalid comparator '{op}' for a string value; use =, !=, LIKE or ILIKE.")


def _number_q(field: str, op: str, value: Any) -> Q:
    if isinstance(value, str) or op not in (*_NUMERIC_OPS, "!="):
        raise invalid(f"Invalid comparison '{op} {value!r}' on '{field}': expected a number.")
    if op == "!=":
        return ~Q(**{field: value})
    return Q(**{f"{field}__{_NUMERIC_OPS[op]}": value})


# -- runs --------------------------------------------------------------------------------------------


def filter_runs(runs: QuerySet[Run], text: str | None) -> QuerySet[Run]:
    for clause in parse_filter(text):
        runs = runs.filter(_run_q(clause))
    return runs


def _run_q(clause: Clause) -> Q:
    if clause.entity == "attribute":
        return _run_attribute_q(clause)
    if clause.entity == "tag" and clause.name == RUN_NAME_TAG:
        return _text_q("name", clause.op, clause.value)
    if clause.entity in ("tag", "param"):
        kind = LoggedKind.TAG if clause.entity == "tag" else LoggedKind.PARAM
        matching = LoggedValue.objects.filter(run=OuterRef("pk"), kind=kind, key=clause.name).filter(
            _text_q("value", clause.op, clause.value)
        )
        return Q(Exists(matching))
    latest = MetricLatest.objects.filter(run=OuterRef("pk"), key__name=clause.name).filter(
        _number_q("value", clause.op, clause.value)
    )
    return Q(Exists(latest))


def _run_attribute_q(clause: Clause) -> Q:
    name, op, value = clause.name, clause.op, clause.value
    if name == "status":
        ours = [s for s, theirs in MLFLOW_STATUS.items() if theirs == value]
        if op not in ("=", "!="):
            raise invalid(f"Invalid comparator '{op}' for attribute 'status'; use = or !=.")
        return Q(status__in=ours) if op == "=" else ~Q(status__in=ours)
    if name in ("run_id", "run_uuid") and op in ("IN", "NOT IN"):
        return Q(mlflow_run_id__in=value) if op == "IN" else ~Q(mlflow_run_id__in=value)
    if name == "user_id":
        user = LoggedValue.objects.filter(run=OuterRef("pk"), kind=LoggedKind.TAG, key=USER_TAG)
        return Q(Exists(user.filter(_text_q("value", op, value))))
    if name in ("run_name", "run_id", "run_uuid", "experiment_id"):
        field = {"run_name": "name", "run_id": "mlflow_run_id", "run_uuid": "mlflow_run_id"}.get(name, name)
        return _text_q(field, op, str(value) if name == "experiment_id" else value)
    if name in ("start_time", "end_time"):
        field = "started_at" if name == "start_time" else "finished_at"
        if isinstance(value, str):
            raise invalid(f"Expected a number for attribute '{name}', got {value!r}")
        return _number_q(field, op, from_ms(int(value)))
    raise invalid(
        f"Invalid attribute key '{name}' specified. This server filters runs on status, run_name, "
        "run_id, user_id, experiment_id, start_time and end_time."
    )


_RUN_ORDER = {
    "start_time": "started_at",
    "end_time": "finished_at",
    "run_name": "name",
    "status": "status",
    "run_id": "mlflow_run_id",
}


def order_runs(runs: QuerySet[Run], order_by: list[str]) -> QuerySet[Run]:
    terms = []
    for index, text in enumerate(order_by):
        entity, name, descending = _order_clause(text)
        if entity == "attribute":
            if name not in _RUN_ORDER:
                raise invalid(f"Invalid order_by clause '{text}'. Runs order by {', '.join(_RUN_ORDER)}.")
            field = _RUN_ORDER[name]
        else:
            field = f"_order_{index}"
            runs = runs.annotate(**{field: _logged_value(entity, name)})
        terms.append(F(field).desc(nulls_last=True) if descending else F(field).asc(nulls_last=True))
    return runs.order_by(*terms, F("started_at").desc(nulls_last=True), "-pk")


def _logged_value(entity: str, name: str) -> Subquery:
    """A run's latest value of a metric, or its param or tag of that name (null without one)."""
    if entity == "metric":
        found: QuerySet[Any] = MetricLatest.objects.filter(run=OuterRef("pk"), key__name=name)
    else:
        if entity == "tag" and name == RUN_NAME_TAG:
            return Subquery(Run.objects.filter(pk=OuterRef("pk")).values("name")[:1])
        kind = LoggedKind.TAG if entity == "tag" else LoggedKind.PARAM
        found = LoggedValue.objects.filter(run=OuterRef("pk"), kind=kind, key=name)
    return Subquery(found.values("value")[:1])


def _order_clause(text: str) -> tuple[str, str, bool]:
    """``<entity>.<name> [ASC|DESC]`` (a name may be quoted): (entity, name, descending)."""
    ident, _, direction = text.strip().rpartition(" ")
    if direction.upper() not in ("ASC", "DESC"):
        ident, direction = text.strip(), "ASC"
    if not ident.strip():
        raise invalid(f"Invalid order_by clause '{text}'.")
    ident = ident.strip()
    name_part = ident.partition(".")[2] or ident
    quoted = len(name_part) >= 2 and name_part[0] == name_part[-1] and name_part[0] in '`"'
    if any(c.isspace() for c in ident) and not quoted:
        raise invalid(f"Invalid order_by clause '{text}'.")
    entity, name = _identifier(ident)
    return entity, name, direction.upper() == "DESC"


def _order_term(text: str, fields: dict[str, str]) -> Any:
    entity, name, descending = _order_clause(text)
    if entity != "attribute" or name not in fields:
        raise invalid(f"Invalid order_by clause '{text}'. This server orders by {', '.join(fields)}.")
    expression = F(fields[name])
    return expression.desc(nulls_last=True) if descending else expression.asc(nulls_last=True)


# -- lifecycle -------------------------------------------------------------------------------------

# MLflow's ViewType, by name (JSON) or number.
_VIEW_TYPES = {"ACTIVE_ONLY": 1, "DELETED_ONLY": 2, "ALL": 3, 1: 1, 2: 2, 3: 3}


def with_view_type(items: QuerySet[Any], view_type: Any) -> QuerySet[Any]:
    """Runs or experiments, as MLflow's view type asks: active (the default), deleted or all."""
    view = _VIEW_TYPES.get(view_type or "ACTIVE_ONLY")
    if view is None:
        raise invalid(f"Invalid value {view_type!r} for parameter 'view_type' supplied.")
    if view == 3:
        return items
    return items.filter(mlflow_deleted__isnull=view == 1)


# -- experiments -----------------------------------------------------------------------------------


def filter_experiments(experiments: QuerySet[Experiment], text: str | None) -> QuerySet[Experiment]:
    for clause in parse_filter(text):
        if clause.entity == "attribute" and clause.name == "name":
            experiments = experiments.filter(_text_q("name", clause.op, clause.value))
        elif clause.entity == "attribute" and clause.name in ("creation_time", "last_update_time"):
            experiments = experiments.filter(_number_q("created", clause.op, from_ms(int(clause.value))))
        elif clause.entity == "tag":
            tags = ExperimentTag.objects.filter(experiment=OuterRef("pk"), key=clause.name)
            experiments = experiments.filter(Exists(tags.filter(_text_q("value", clause.op, clause.value))))
        else:
            raise invalid(
                f"Invalid filter on '{clause.name}'. This server filters experiments on name, creation_time "
                "and tags."
            )
    return experiments


_EXPERIMENT_ORDER = {
    "name": "name",
    "creation_time": "created",
    "last_update_time": "created",
    "experiment_id": "pk",
}


def order_experiments(experiments: QuerySet[Experiment], order_by: list[str]) -> QuerySet[Experiment]:
    terms = [_order_term(text, _EXPERIMENT_ORDER) for text in order_by]
    ordered = experiments.order_by(*terms, "-created", "pk")
    return ordered.select_related("mlflow_deleted").prefetch_related("mlflow_tags")


# -- paging -----------------------------------------------------------------------------------------


def page_token(offset: int) -> str:
    return base64.b64encode(json.dumps({"offset": offset}).encode()).decode()


def page_offset(token: str | None) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.b64decode(token))["offset"]
    except (ValueError, TypeError, KeyError):
        raise invalid("Invalid page token, could not base64-decode") from None
    if not isinstance(offset, int) or not 0 <= offset <= INT4_MAX:
        raise invalid(f"Invalid page token, offset must be an integer from 0 to {INT4_MAX}: {offset}")
    return offset


def page(items: QuerySet[Any], token: str | None, size: int) -> tuple[list[Any], str | None]:
    start = page_offset(token)
    found = list(items[start : start + size + 1])
    return found[:size], page_token(start + size) if len(found) > size else None
