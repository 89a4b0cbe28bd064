"""What the database can hold (docs/security.md#limits): column limits, the cleaning of text and JSON
Postgres cannot store, and the constrained types the wire models are built from."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field, JsonValue

__all__ = [
    "BATCH_ID_MAX",
    "BATCH_ID_PATTERN",
    "DATA_SOURCE_MAX",
    "ID_MAX",
    "INT4_MAX",
    "JSON_MAX_DEPTH",
    "METRIC_KEY_MAX",
    "REPLACEMENT",
    "TOOL_ERROR_MAX",
    "BatchId",
    "Count",
    "Identifier",
    "JsonField",
    "JsonFloat",
    "JsonFloats",
    "JsonObject",
    "Text",
    "clean_text",
    "cut_to",
    "finite_or_none",
    "jsonb_safe",
    "no_nul",
]

INT4_MAX = 2**31 - 1  # the largest value of a Postgres integer column (steps, indices, counts)
BATCH_ID_MAX = 64  # the column of stored batch ids
ID_MAX = 200  # trajectory ids, group ids, anchors, tool names
DATA_SOURCE_MAX = 100
TOOL_ERROR_MAX = 100
METRIC_KEY_MAX = 200
JSON_MAX_DEPTH = 64
REPLACEMENT = "\ufffd"
BATCH_ID_PATTERN = re.compile(r"^[\x21-\x7e]{1,64}$")  # printable ASCII, no spaces: a header value too


def clean_text(value: str) -> str:
    """Postgres text cannot hold NUL: it becomes U+FFFD, so the text stays and the spot shows."""
    return value.replace("\x00", REPLACEMENT) if "\x00" in value else value


def cut_to(limit: int) -> AfterValidator:
    return AfterValidator(lambda value: clean_text(value)[:limit])


def no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def finite_or_none(value: float | None) -> float | None:
    """jsonb has no NaN or ±Infinity: inside JSON fields they are stored as null."""
    return value if value is None or math.isfinite(value) else None


def jsonb_safe(value: Any, depth: int = 0) -> Any:
    """A JSON value Postgres' jsonb can store: NUL in strings and keys replaced, non-finite numbers
    null; ValueError when nested deeper than JSON_MAX_DEPTH."""
    if depth > JSON_MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {JSON_MAX_DEPTH} levels")
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): jsonb_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonb_safe(v, depth + 1) for v in value]
    return value


Count = Annotated[int, Field(ge=0, le=INT4_MAX)]  # what an integer column holds, from 0
Text = Annotated[str, AfterValidator(clean_text)]
Identifier = Annotated[str, Field(min_length=1, max_length=ID_MAX), AfterValidator(no_nul)]
BatchId = Annotated[
    str, Field(pattern=BATCH_ID_PATTERN.pattern, description="Idempotency key of this batch.")
]
JsonField = Annotated[JsonValue, AfterValidator(jsonb_safe)]
JsonFloat = Annotated[float | None, AfterValidator(finite_or_none)]
JsonObject = Annotated[dict[str, JsonValue], AfterValidator(jsonb_safe)]
JsonFloats = Annotated[Mapping[str, JsonFloat], AfterValidator(jsonb_safe)]
