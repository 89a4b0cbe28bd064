"""The common part of MLflow's search syntax: clauses joined by AND, each ``<entity>.<name> <op>
<value>`` (``attributes.status = 'FINISHED'``, ``params.lr = '0.1'``, ``metrics.loss < 2``), and
``order_by`` on attributes. Anything else is refused with INVALID_PARAMETER_VALUE rather than
answered wrongly."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, QuerySet

from trainer.contract import INT4_MAX
from webapp.experiments.models import Experiment, LoggedKind, LoggedValue, Run
from webapp.ingestion.models import MetricLatest
from webapp.mlflow_api.entities import MLFLOW_STATUS, RUN_NAME_TAG, from_ms
from webapp.mlflow_api.errors import invalid

_CLAUSE = re.compile(
    r"^(?P<ident>.+?)\s*(?P<op>!=|>=|<=|=|>|<|\s(?:I?LIKE)\s)\s*(?P<value>.+)$", re.IGNORECASE
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
    return Clause(entity, name, match["op"].strip().upper(), _value(match["value"].strip(), text))


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
        "run_id, experiment_id, start_time and end_time."
    )


_RUN_ORDER = {
    "start_time": "started_at",
    "end_time": "finished_at",
    "run_name": "name",
    "status": "status",
    "run_id": "mlflow_run_id",
}


def order_runs(runs: QuerySet[Run], order_by: list[str]) -> QuerySet[Run]:
    terms = [_order_term(text, _RUN_ORDER) for text in order_by]
    return runs.order_by(*terms, F("started_at").desc(nulls_last=True), "-pk")


def _order_term(text: str, fields: dict[str, str]) -> Any:
    parts = text.split()
    ident = parts[0] if parts else ""
    direction = parts[1].upper() if len(parts) > 1 else "ASC"
    entity, name = _identifier(ident)
    if entity != "attribute" or name not in fields or direction not in ("ASC", "DESC") or len(parts) > 2:
        raise invalid(f"Invalid order_by clause '{text}'. This server orders by {', '.join(fields)}.")
    expression = F(fields[name])
    return expression.desc(nulls_last=True) if direction == "DESC" else expression.asc(nulls_last=True)


# -- experiments -----------------------------------------------------------------------------------


def filter_experiments(experiments: QuerySet[Experiment], text: str | None) -> QuerySet[Experiment]:
    for clause in parse_filter(text):
        if clause.entity == "attribute" and clause.name == "name":
            experiments = experiments.filter(_text_q("name", clause.op, clause.value))
        elif clause.entity == "attribute" and clause.name in ("creation_time", "last_update_time"):
            experiments = experiments.filter(_number_q("created", clause.op, from_ms(int(clause.value))))
        else:
            raise invalid(
                f"Invalid filter on '{clause.name}'. This server filters experiments on name and creation_time."
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
    return experiments.order_by(*terms, "-created", "pk")


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
