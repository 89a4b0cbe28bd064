"""The dataset validator shared by ``python -m tasks_lib validate`` and the webapp's upload.

:func:`validate` checks a parquet file (or an Arrow table) against the data contract (DESIGN.md) and
returns every problem it finds, each naming its row and column, instead of stopping at the first. It
streams record batches, so a large file is never loaded whole; only the seen ``extra_info.index``
values are kept, to catch duplicates.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.registry import load_recipes
from trainer.contract import DATA_SOURCE_MAX, INT4_MAX
from trainer.envs import ENVS, parse_env_kwargs
from trainer.flows import FLOWS
from trainer.rewards import REWARDS
from trainer.tools import TOOLS

logger = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info")
OPTIONAL_COLUMNS = ("ability", "agent_name", "env_kwargs")
ROLES = frozenset({"system", "user", "assistant", "tool"})

Source: TypeAlias = "str | Path | IO[bytes] | pa.Table"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset. ``row`` is 0-based; both are None for a file-level problem."""

    message: str
    row: int | None = None
    column: str | None = None

    def __str__(self) -> str:
        if self.row is None and self.column is None:
            return f"file: {self.message}"
        if self.row is None:
            return f"column {self.column}: {self.message}"
        return f"row {self.row}, column {self.column}: {self.message}"


class _Bad:
    """Stands for a value that could not be read (invalid UTF-8); its problem is already recorded."""


_BAD = _Bad()


# A parquet file ends with its footer's length (4 bytes, little-endian) and b"PAR1"; pyarrow reads
# the footer into memory whole, so a file that claims a huge one costs the reader that much.
FOOTER_MAX_BYTES = 16 * 2**20
_MAGIC = b"PAR1"


def footer_problem(path: Path) -> Problem | None:
    """A Problem when the file's footer claims more than the file holds or than FOOTER_MAX_BYTES."""
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            file.seek(max(0, size - 8))
            tail = file.read(8)
    except OSError:
        return None  # pyarrow reports an unreadable file in its own words
    if len(tail) < 8 or tail[4:] != _MAGIC:
        return None
    claimed = int.from_bytes(tail[:4], "little")
    if claimed > size - 12:  # the leading magic, the length and the trailing magic take 12 bytes
        return Problem(
            f"the parquet footer claims {claimed:,} bytes but the file has {size:,} (corrupt file)"
        )
    if claimed > FOOTER_MAX_BYTES:
        return Problem(
            f"the parquet footer is {claimed:,} bytes, over the {FOOTER_MAX_BYTES:,} this server reads; "
            "write the file with fewer columns or row groups"
        )
    return None


def validate(source: Source, *, max_problems: int = 100, batch_size: int = 1024) -> list[Problem]:
    """Every problem in ``source`` (a parquet path, a binary file object or an Arrow table), up to
    ``max_problems``. An empty list means the rows can be trained on."""
    load_recipes()  # agent_name, tools and data_source are checked against the registries
    if isinstance(source, pa.Table):
        return _check(source.schema, iter(source.to_batches(max_chunksize=batch_size)), max_problems)
    if isinstance(source, str | Path) and (problem := footer_problem(Path(source))) is not None:
        return [problem]
    try:
        parquet = pq.ParquetFile(str(source) if isinstance(source, Path) else source)
    except (pa.ArrowException, OSError, ValueError) as exc:
        return [Problem(f"cannot read the parquet file (truncated or not parquet): {exc}")]
    try:
        return _check(parquet.schema_arrow, parquet.iter_batches(batch_size=batch_size), max_problems)
    finally:
        parquet.close()


def _check(schema: pa.Schema, batches: Iterator[pa.RecordBatch], max_problems: int) -> list[Problem]:
    problems = [
        Problem("missing required column", column=c) for c in REQUIRED_COLUMNS if c not in schema.names
    ]
    if problems:
        return problems
    checker = _RowChecker()
    offset = 0
    try:
        for batch in batches:
            rows = _decode_batch(batch, offset, problems)
            for number, row in enumerate(rows, start=offset):
                problems.extend(checker.check(row, number))
                if len(problems) >= max_problems:
                    return problems[:max_problems]
            offset += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        problems.append(
            Problem(f"cannot read the rows from here on (truncated or corrupt file): {exc}", row=offset)
        )
    if offset == 0 and not problems:
        problems.append(Problem("the dataset has no rows"))
    return problems[:max_problems]


def _decode_batch(batch: pa.RecordBatch, offset: int, problems: list[Problem]) -> list[dict[str, Any]]:
    """The batch as Python rows; a value with invalid UTF-8 becomes _BAD and a problem is recorded."""
    columns: dict[str, list[Any]] = {}
    for name, array in zip(batch.schema.names, batch.columns, strict=True):
        try:
            array.validate(full=True)
            columns[name] = array.to_pylist()
        except pa.ArrowInvalid:
            columns[name] = _decode_each(array, name, offset, problems)
    return [{name: values[i] for name, values in columns.items()} for i in range(batch.num_rows)]


def _decode_each(array: pa.Array, name: str, offset: int, problems: list[Problem]) -> list[Any]:
    values: list[Any] = []
    for i in range(len(array)):
        try:
            values.append(array[i].as_py())
        except UnicodeDecodeError:
            problems.append(Problem("text is not valid UTF-8", row=offset + i, column=name))
            values.append(_BAD)
    return values


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class _RowChecker:
    """Per-row checks; remembers the ``extra_info.index`` values seen so far."""

    def __init__(self) -> None:
        self.seen_index: dict[int, int] = {}

    def check(self, row: Mapping[str, Any], number: int) -> list[Problem]:
        problems: list[Problem] = []
        for check in (
            self._data_source,
            self._prompt,
            self._ground_truth,
            self._index,
            self._agent,
            self._env,
        ):
            problems.extend(
                Problem(message, row=number, column=column) for column, message in check(row, number)
            )
        return problems

    def _data_source(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        value = row.get("data_source")
        if value is _BAD:
            return
        if not isinstance(value, str) or not value.strip():
            yield "data_source", "missing: every row needs the task id that routes its reward function"
        elif len(value) > DATA_SOURCE_MAX:
            yield "data_source", f"longer than {DATA_SOURCE_MAX} characters"
        elif value not in REWARDS:
            choices = ", ".join(REWARDS.names())
            yield "data_source", f"no reward function is registered for {value!r}; registered: {choices}"

    def _prompt(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        prompt = row.get("prompt")
        if prompt is _BAD:
            return
        if isinstance(prompt, bytes) and not _is_utf8(prompt):
            yield (
                "prompt",
                "is bytes that are not valid UTF-8 text; expected a list of {role, content} chat messages",
            )
            return
        if isinstance(prompt, str | bytes):
            yield "prompt", "is a string; expected a list of {role, content} chat messages"
            return
        if not isinstance(prompt, list) or not prompt:
            yield "prompt", "expected a non-empty list of {role, content} chat messages"
            return
        for i, message in enumerate(prompt):
            if not isinstance(message, Mapping):
                yield f"prompt[{i}]", "expected a {role, content} message"
                continue
            role = message.get("role")
            if role not in ROLES:
                yield f"prompt[{i}].role", f"unknown role {role!r}; use one of {', '.join(sorted(ROLES))}"
            if not isinstance(message.get("content"), str):
                yield f"prompt[{i}].content", "expected text"

    def _ground_truth(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        reward_model = row.get("reward_model")
        if reward_model is _BAD:
            return
        truth = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
        if truth is _BAD:
            return
        if truth is None or (isinstance(truth, str | list | dict) and not truth):
            yield "reward_model.ground_truth", "missing ground truth"

    def _index(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        extra_info = row.get("extra_info")
        if extra_info is _BAD:
            return
        index = extra_info.get("index") if isinstance(extra_info, Mapping) else None
        if index is None:
            yield "extra_info.index", "missing; every row needs a unique integer index"
        elif isinstance(index, bool) or not isinstance(index, int):
            yield "extra_info.index", f"expected an integer, got {type(index).__name__}"
        elif not 0 <= index <= INT4_MAX:
            yield "extra_info.index", f"{index} is outside 0 to {INT4_MAX}"
        elif index in self.seen_index:
            yield "extra_info.index", f"duplicate index {index} (first used by row {self.seen_index[index]})"
        else:
            self.seen_index[index] = number
        tools_kwargs = extra_info.get("tools_kwargs") if isinstance(extra_info, Mapping) else None
        if not isinstance(tools_kwargs, Mapping):
            return
        for name, kwargs in tools_kwargs.items():
            if kwargs is not None and name not in TOOLS:
                yield f"extra_info.tools_kwargs.{name}", f"tool {name!r} is not registered"

    def _agent(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        name = row.get("agent_name")
        if name is None or name is _BAD or name == "":
            return
        if name not in FLOWS:
            yield "agent_name", f"flow {name!r} is not registered; choose one of {', '.join(FLOWS.names())}"

    def _env(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        value = row.get("env_kwargs")
        if value is _BAD:
            return
        try:
            env_kwargs = parse_env_kwargs(value)
        except ValueError as exc:
            yield "env_kwargs", str(exc)
            return
        env_type = env_kwargs.get("env_type")
        if env_type is not None and env_type not in ENVS:
            yield (
                "env_kwargs.env_type",
                f"env {env_type!r} is not registered; choose one of {', '.join(ENVS.names())}",
            )
        tools = env_kwargs.get("tools", [])
        if isinstance(tools, str) or not isinstance(tools, list):
            yield "env_kwargs.tools", "expected a list of tool names"
            return
        for tool in tools:
            if tool not in TOOLS:
                yield (
                    "env_kwargs.tools",
                    f"tool {tool!r} is not registered; choose from {', '.join(TOOLS.names())}",
                )
