"""Valid values of RunConfig fields for the tests that change one field at a time."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from trainer.config import RunConfig, field_value, section_model


def field_info(path: str) -> FieldInfo:
    model: Any = RunConfig
    *sections, leaf = path.split(".")
    for name in sections:
        model = section_model(model, name)
    return typing.cast(FieldInfo, model.model_fields[leaf])


def _candidates(annotation: Any, default: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    if annotation is bool:
        return [not default]
    # Only a union is unwrapped (X | None): dict[str, float]'s arguments are its key and value types.
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    options = [a for a in typing.get_args(annotation) if a is not type(None)] if union else [annotation]
    values: list[Any] = []
    for option in options:
        number = default if isinstance(default, int | float) and not isinstance(default, bool) else 1
        if typing.get_origin(option) is typing.Literal:  # an optional choice
            values += list(typing.get_args(option))
        elif option in (int, float):
            values += [option(number * 2), option(number + 1), option(number / 2), option(1)]
        elif option is str:
            values.append("x")
        elif typing.get_origin(option) is list:
            values.append(["x"])
        elif typing.get_origin(option) is dict:
            values.append({"x": 1})
    return values


def other_value(config: RunConfig, path: str) -> Any:
    """A valid value of the field other than its value in ``config`` (any bounds respected)."""
    info = field_info(path)
    current = field_value(config, path)
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[info.annotation, info])
    for candidate in _candidates(info.annotation, current):
        if candidate == current:
            continue
        try:
            return adapter.validate_python(candidate)
        except ValidationError:
            continue
    raise AssertionError(f"no other value for {path}: teach _candidates its type {info.annotation}")


def with_value(config: RunConfig, path: str, value: Any) -> RunConfig:
    """``config`` with one field changed, without validation (the backend's problems() is the test)."""
    section, _, leaf = path.rpartition(".")
    if not section:
        return config.model_copy(update={leaf: value})
    inner = getattr(config, section).model_copy(update={leaf: value})
    return config.model_copy(update={section: inner})
