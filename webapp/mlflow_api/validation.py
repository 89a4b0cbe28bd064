"""MLflow's request checks and limits, with its messages (mlflow/utils/validation.py and the
request schemas of mlflow/server/handlers.py, release 3.17), so a client fails here exactly where it
would fail against an MLflow server.

Differences, ours: steps must fit the point table (0 to 2**31 - 1), where MLflow allows any int64;
text may not hold NUL characters, which Postgres cannot store; times must be Unix milliseconds from
1970 to 9999, and run names fit in 250 characters (docs/security.md#limits).
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from trainer.contract import INT4_MAX
from webapp.mlflow_api.errors import MlflowError, invalid

MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_ENTITIES_PER_BATCH = 1000
MAX_PARAM_VAL_LENGTH = 6000
MAX_TAG_VAL_LENGTH = 8000
MAX_EXPERIMENT_NAME_LENGTH = 500
MAX_ENTITY_KEY_LENGTH = 250
MAX_RESULTS_LIMIT = 50_000
MAX_RUN_NAME_LENGTH = 250  # Run.name
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last time a datetime holds

_NAME = re.compile(r"^[/\w.\- :]*$")
_RUN_ID = re.compile(r"^[a-zA-Z0-9][\w\-]{0,255}$")
_SEE_DOCS = " See the API docs for more information about request parameters."
_MISSING_KEY_NAME = "A key name must be provided."


# -- messages (MLflow's wording) ------------------------------------------------------------------


def invalid_value(path: str, value: Any, message: str | None = None) -> str:
    shown = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    if message:
        return f"Invalid value {shown} for parameter '{path}' supplied: {message}"
    return f"Invalid value {shown} for parameter '{path}' supplied."


def missing_value(path: str) -> str:
    return f"Missing value for required parameter '{path}'."


def exceeds_maximum_length(path: str, limit: int) -> str:
    return f"'{path}' exceeds the maximum length of {limit} characters"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# -- request fields (the handlers' schemas) -------------------------------------------------------


def required(body: dict[str, Any], name: str, alias: str | None = None) -> Any:
    value = body.get(name)
    if value is None and alias:
        value = body.get(alias)
    if value is None or value == "":
        raise invalid(missing_value(name) + _SEE_DOCS)
    return value


def _wrong_type(name: str, value: Any) -> MlflowError:
    """A parameter of the wrong JSON type, in MLflow's words."""
    return invalid(
        invalid_value(name, value, f" Hint: Value was of type '{type(value).__name__}'.") + _SEE_DOCS
    )


def string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _wrong_type(name, value)
    if "\x00" in value:
        raise invalid(f"Invalid value for parameter '{name}' supplied: it contains a NUL character.")
    return value


def timestamp_ms(body: dict[str, Any], name: str) -> int | None:
    """A time in Unix milliseconds (start_time, end_time); None when absent."""
    value = optional_int(body, name)
    if value is not None and not 0 <= value <= MAX_TIMESTAMP_MS:
        raise invalid(
            invalid_value(name, value, f"a time in Unix milliseconds between 0 and {MAX_TIMESTAMP_MS}")
        )
    return value


def objects(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """An array whose every entry is a JSON object (tags, params, metrics)."""
    items = array(body, name)
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise invalid(invalid_value(f"{name}[{index}]", item, "each entry must be an object") + _SEE_DOCS)
    return items


def required_string(body: dict[str, Any], name: str, alias: str | None = None) -> str:
    return string(name, required(body, name, alias))


def optional_string(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    return None if value is None else string(name, value)


def optional_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    number = _int_like(value)
    if number is None:
        raise _wrong_type(name, value)
    return number


def array(body: dict[str, Any], name: str) -> list[Any]:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise _wrong_type(name, value)
    return value


def _int_like(value: Any) -> int | None:
    """An int, or a string holding one (proto3 JSON writes int64 either way)."""
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _float_like(value: Any) -> float | None:
    """A number, or a string holding one ("NaN", "Infinity": proto3 JSON's non-finite doubles)."""
    if type(value) is float or type(value) is int:
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def run_id(value: str, path: str = "run_id") -> str:
    if _RUN_ID.match(value) is None:
        raise invalid(invalid_value(path, value))
    return value


def max_results(value: int | None, default: int) -> int:
    if value is None:
        return default
    if value > MAX_RESULTS_LIMIT:
        raise invalid(invalid_value("max_results", value) + _SEE_DOCS)
    if value <= 0:
        raise invalid(
            f"Invalid value {value} for parameter 'max_results' supplied. It must be a positive integer."
        )
    return value


def experiment_name(name: Any) -> str:
    if name == "" or name is None:
        raise invalid(f"Invalid experiment name: '{name}'")
    if not isinstance(name, str):
        raise invalid(f"Invalid experiment name: {name}. Expects a string.")
    if len(name) > MAX_EXPERIMENT_NAME_LENGTH:
        raise invalid(exceeds_maximum_length("name", MAX_EXPERIMENT_NAME_LENGTH))
    return name


# -- names, params, tags --------------------------------------------------------------------------


def _bad_path(name: str) -> bool:
    norm = posixpath.normpath(name)
    return norm != name or norm == "." or norm.startswith("..") or norm.startswith("/")


def _check_name(name: str, path: str) -> None:
    if _NAME.match(name) is None:
        raise invalid(
            invalid_value(
                path,
                name,
                "Names may only contain alphanumerics, underscores (_), dashes (-), periods (.), "
                "spaces ( ), colon(:) and slashes (/).",
            )
        )
    if _bad_path(name):
        raise invalid(
            invalid_value(
                path,
                name,
                "Names may be treated as files in certain cases, and must not resolve to other names "
                f"when treated as such. This name would resolve to {posixpath.normpath(name)!r}",
            )
        )


def param(key: Any, value: Any, path: str = "") -> tuple[str, str]:
    """(key, value) of a valid param; MLflow's server truncates long values (its default)."""
    if key is None:
        raise invalid(invalid_value(_join(path, "key"), "", _MISSING_KEY_NAME))
    key = string(_join(path, "key"), key)
    _check_name(key, _join(path, "key"))
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        raise invalid(exceeds_maximum_length("Param key", MAX_ENTITY_KEY_LENGTH))
    text = "" if value is None else string(_join(path, "value"), value)
    return key, text[:MAX_PARAM_VAL_LENGTH]


def tag(key: Any, value: Any, path: str = "") -> tuple[str, str]:
    if key is None:
        raise invalid(missing_value(_join(path, "key")))
    key = string(_join(path, "key"), key)
    _check_name(key, _join(path, "key"))
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        raise invalid(exceeds_maximum_length(_join(path, "key"), MAX_ENTITY_KEY_LENGTH))
    text = "" if value is None else string(_join(path, "value"), value)
    return key, text[:MAX_TAG_VAL_LENGTH]


def metric_name(name: Any, path: str) -> str:
    if name is None:
        raise invalid(invalid_value(path, name, f"Metric name cannot be None. {_MISSING_KEY_NAME}"))
    name = string(path, name)
    _check_name(name, path)
    if len(name) > MAX_ENTITY_KEY_LENGTH:
        raise invalid(exceeds_maximum_length("Metric name", MAX_ENTITY_KEY_LENGTH))
    return name


# -- metrics ---------------------------------------------------------------------------------------


@dataclass
class Metrics:
    """Validated metrics as columns; ts in Unix seconds (MLflow sends milliseconds)."""

    key: list[str] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)

    def points(self) -> list[dict[str, Any]]:
        return [
            {"key": k, "step": s, "value": v, "ts": t}
            for k, s, v, t in zip(self.key, self.step, self.value, self.ts, strict=True)
        ]


def metrics(items: list[Any], *, single: bool = False) -> Metrics:
    """Check every metric as MLflow's _validate_metric does; a bad one fails the whole request."""
    out = Metrics()
    names_ok: set[str] = set()
    for index, item in enumerate(items):
        path = "" if single else f"metrics[{index}]"
        if not isinstance(item, dict):
            raise invalid(invalid_value(path or "metric", item))
        key: str = item.get("key")  # type: ignore[assignment]  # checked just below
        value, timestamp, step = item.get("value"), item.get("timestamp"), item.get("step", 0)
        if not single and (
            key is None or value is None or timestamp is None or "" in (key, value, timestamp)
        ):
            _missing(item, index)
        if not isinstance(key, str) or key not in names_ok:  # a list or object key is refused here
            names_ok.add(metric_name(key, _join(path, "name")))
        number = value if type(value) is float else _metric_value(key, value, timestamp, path)
        if type(timestamp) is not int or timestamp < 0:
            timestamp = _timestamp(key, value, timestamp, path)
        if type(step) is not int or not 0 <= step <= INT4_MAX:
            step = _step(key, value, step, path)
        out.key.append(key)
        out.step.append(step)
        out.value.append(number)
        out.ts.append(timestamp / 1000)
    return out


def _bad_metric(path: str, field: str, given: Any, message: str) -> MlflowError:
    """A metric's ``field`` that MLflow would refuse, in MLflow's words."""
    return invalid(invalid_value(_join(path, field), given, message))


def _missing(item: dict[str, Any], index: int) -> None:
    """log-batch's presence check (its request schema), folded into the one pass over the metrics."""
    for name in ("key", "value", "timestamp"):
        if item.get(name) is None or item.get(name) == "":
            raise invalid(missing_value(f"metrics[{index}].{name}") + _SEE_DOCS)


def _metric_value(key: str, value: Any, timestamp: Any, path: str) -> float:
    if value is None:
        raise invalid(missing_value(_join(path, "value")))
    number = None if isinstance(value, bool) else _float_like(value)
    if number is None:
        reason = f"(timestamp={timestamp}). Please specify value as a valid double (64-bit floating point)"
        raise _bad_metric(path, "value", value, reason)
    return number


def _timestamp(key: str, value: Any, timestamp: Any, path: str) -> int:
    number = _int_like(timestamp)
    if number is None or number < 0:
        reason = "Timestamp must be a nonnegative long (64-bit integer) "
        raise _bad_metric(path, "timestamp", timestamp, f"metric '{key}' (value={value}). {reason}")
    return number


def _step(key: str, value: Any, step: Any, path: str) -> int:
    number = 0 if step is None else _int_like(step)
    metric = f"metric '{key}' (value={value})."
    if number is None:
        raise _bad_metric(path, "step", step, f"{metric} Step must be a valid long (64-bit integer).")
    if not 0 <= number <= INT4_MAX:
        raise _bad_metric(path, "step", step, f"{metric} This server stores steps from 0 to {INT4_MAX}.")
    return number


def finite_or_name(value: float) -> float | str:
    """A double as proto3 JSON writes it: non-finite values as the strings NaN / Infinity."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


# -- batches ---------------------------------------------------------------------------------------


def batch_limits(n_metrics: int, n_params: int, n_tags: int) -> None:
    _batch_limit("metrics", MAX_METRICS_PER_BATCH, n_metrics)
    _batch_limit("params", MAX_PARAMS_TAGS_PER_BATCH, n_params)
    _batch_limit("tags", MAX_PARAMS_TAGS_PER_BATCH, n_tags)
    _batch_limit("metrics, params, and tags", MAX_ENTITIES_PER_BATCH, n_metrics + n_params + n_tags)


def _batch_limit(entity: str, limit: int, length: int) -> None:
    if length > limit:
        raise invalid(
            f"A batch logging request can contain at most {limit} {entity}. Got {length} {entity}. "
            f"Please split up {entity} across multiple requests and try again."
        )


def fields_present(items: list[Any], name: str, required_fields: tuple[str, ...]) -> None:
    for index, item in enumerate(items):
        for field_name in required_fields:
            value = item.get(field_name) if isinstance(item, dict) else None
            if value is None or value == "":
                raise invalid(missing_value(f"{name}[{index}].{field_name}") + _SEE_DOCS)


def unique_param_keys(params: list[tuple[str, str]]) -> None:
    seen: set[str] = set()
    dupes = []
    for key, _value in params:
        if key in seen:
            dupes.append(key)
        seen.add(key)
    if dupes:
        raise MlflowError(
            f"Duplicate parameter keys have been submitted: {dupes}. Please ensure the request contains "
            "only one param value per param key."
        )


def run_name(run_name: str | None, tags: list[tuple[str, str]], name_tag: str) -> str:
    """The name a new run takes: run_name, else its name tag; the two must agree when both are given."""
    tag_name = next((value for key, value in tags if key == name_tag), None)
    if run_name and tag_name and run_name != tag_name:
        raise invalid(
            "Both 'run_name' argument and 'mlflow.runName' tag are specified, but with different values "
            f"(run_name='{run_name}', mlflow.runName='{tag_name}')."
        )
    return checked_run_name(run_name or tag_name or "")


def checked_run_name(name: str) -> str:
    if len(name) > MAX_RUN_NAME_LENGTH:
        raise invalid(exceeds_maximum_length("run_name", MAX_RUN_NAME_LENGTH))
    return name


def unchanged_params(mlflow_run_id: str, changed: list[tuple[str, str, str]], logged: int) -> None:
    """MLflow refuses a new value for a param logged before: (key, stored, refused) of each."""
    if not changed:
        return
    if logged == 1:
        key, old, new = changed[0]
        raise invalid(
            f"Changing param values is not allowed. Param with key='{key}' was already logged with "
            f"value='{old}' for run ID='{mlflow_run_id}'. Attempted logging new value '{new}'."
        )
    described = [{"key": key, "old_value": old, "new_value": new} for key, old, new in changed]
    raise invalid(
        f"Changing param values is not allowed. Params were already logged='{described}' for run "
        f"ID='{mlflow_run_id}'."
    )
