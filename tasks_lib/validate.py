"""The dataset validator shared by ``python -m tasks_lib validate`` and the webapp's upload.

:func:`validate` checks a parquet file (or an Arrow table) against the data contract
(docs/contract.md#the-data-contract) and returns every problem it finds, each naming its row and
column, instead of stopping at the first. It streams record batches page by page (no pre-buffering of
whole row groups), so a large file is never loaded whole; only the seen ``extra_info.index`` values
are kept, to catch duplicates. A footer larger than MAX_FOOTER_BYTES, or claiming more than the file
holds, is refused before it is read (docs/reliability.md#parquet-memory).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.registry import load_recipes
from trainer.contract import (
    DATA_SOURCE_MAX,
    INT4_MAX,
    MESSAGES_KEY,
    TOOLS_KEY,
    conversation_problems,
    is_messages_layout,
    tool_schemas_of,
)
from trainer.envs import ENVS, parse_env_kwargs
from trainer.flows import FLOWS
from trainer.rewards import REWARDS, route
from trainer.tools import TOOLS

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info")
ROLES = frozenset({"system", "user", "assistant", "tool"})
# Parquet's metadata footer is read into memory whole. Real datasets have footers of kilobytes to a
# few megabytes (one entry per row group and column); a larger one is a hostile or broken file.
MAX_FOOTER_BYTES = 64 * 2**20
READ_BUFFER_BYTES = 2**20  # pages are read through a buffer of this size instead of whole row groups

Source: TypeAlias = "str | Path | IO[bytes] | pa.Table"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset. ``row`` is 0-based; both are None for a file-level problem.

    A grouped problem covers several rows: ``spans`` are its (first, last) row ranges and ``count``
    how many rows; ``row`` is its first. ``data_source`` is set when the cause is a data_source that
    no reward scores, the one kind of problem a mapping on the dataset's page fixes."""

    message: str
    row: int | None = None
    column: str | None = None
    spans: tuple[tuple[int, int], ...] = ()
    count: int = 0
    data_source: str | None = None

    @property
    def where(self) -> str:
        """``rows 0-29 (30 rows)`` (with an en dash), ``row 3`` or ``file``."""
        if self.spans and self.count > 1:
            shown = ", ".join(f"{a}\u2013{b}" if a != b else str(a) for a, b in self.spans[:_SPANS_SHOWN])
            more = ", …" if len(self.spans) > _SPANS_SHOWN else ""
            return f"rows {shown}{more} ({self.count} rows)"
        return "file" if self.row is None else f"row {self.row}"

    def __str__(self) -> str:
        if self.row is None and self.column is None:
            return f"file: {self.message}"
        if self.row is None:
            return f"column {self.column}: {self.message}"
        return f"{self.where}, column {self.column}: {self.message}"


_SPANS_SHOWN = 5


@dataclass
class _Group:
    """The rows that share one (column, message) cause, as contiguous ranges."""

    column: str
    message: str
    data_source: str | None
    spans: list[list[int]] = field(default_factory=list)
    count: int = 0

    def add(self, row: int) -> None:
        if self.spans and self.spans[-1][1] == row - 1:
            self.spans[-1][1] = row
        else:
            self.spans.append([row, row])
        self.count += 1

    def problem(self) -> Problem:
        return Problem(
            self.message,
            row=self.spans[0][0],
            column=self.column,
            spans=tuple((a, b) for a, b in self.spans),
            count=self.count,
            data_source=self.data_source,
        )


class _Bad:
    """Stands for a value that could not be read (invalid UTF-8); its problem is already recorded."""


_BAD = _Bad()


def _nested(row: Mapping[str, Any], column: str, key: str) -> Any:
    """``row[column][key]``: _BAD when the column could not be read, None when it is no mapping or lacks
    the key."""
    value = row.get(column)
    if value is _BAD:
        return _BAD
    return value.get(key) if isinstance(value, Mapping) else None


@dataclass(frozen=True)
class Context:
    """What a dataset is checked against besides the registries: its own data_source → reward
    mapping, and the names of the team's own rewards and tools (the web app's)."""

    reward_map: Mapping[str, str] = field(default_factory=dict)
    team_rewards: Collection[str] = ()
    team_tools: Collection[str] = ()


def validate(
    source: Source, *, max_problems: int = 50, batch_size: int = 1024, context: Context | None = None
) -> list[Problem]:
    """Every problem in ``source`` (a parquet path, a binary file object or an Arrow table): at most
    ``max_problems`` of them, then one that counts the rest. An empty list means the rows can be
    trained on."""
    load_recipes()  # agent_name, tools and data_source are checked against the registries
    context = context or Context()
    if isinstance(source, pa.Table):
        return _check(source.schema, iter(source.to_batches(max_chunksize=batch_size)), max_problems, context)
    footer = _footer_problem(source)
    if footer is not None:
        return [footer]
    try:
        parquet = open_parquet(source)
    except (pa.ArrowException, OSError, ValueError) as exc:
        return [Problem(f"cannot read the parquet file (truncated or not parquet): {exc}")]
    try:
        return _check(
            parquet.schema_arrow, parquet.iter_batches(batch_size=batch_size), max_problems, context
        )
    finally:
        parquet.close()


def open_parquet(source: str | Path | IO[bytes]) -> pq.ParquetFile:
    """A parquet file read page by page: pre_buffer (pyarrow's default) reads every column chunk
    of a row group into memory first, 1.2x the file at its peak for a file of one row group."""
    path = str(source) if isinstance(source, Path) else source
    return pq.ParquetFile(path, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)


def _footer_problem(source: str | Path | IO[bytes]) -> Problem | None:
    """A footer too large to read, or claiming more than the file holds (pyarrow would allocate what
    it claims), from the length parquet writes before its closing magic bytes."""
    try:
        if isinstance(source, (str, Path)):
            with open(source, "rb") as handle:
                return _footer_size_problem(handle)
        position = source.tell()
        try:
            return _footer_size_problem(source)
        finally:
            source.seek(position)
    except OSError:
        return None  # pyarrow says what is wrong with a file it cannot read


def _footer_size_problem(handle: IO[bytes]) -> Problem | None:
    size = handle.seek(0, os.SEEK_END)
    if size < 12:
        return None
    handle.seek(size - 8)
    tail = handle.read(8)
    if tail[4:] != b"PAR1":
        return None
    (length,) = struct.unpack("<I", tail[:4])
    if length > MAX_FOOTER_BYTES:
        return Problem(
            f"the parquet metadata footer is {length / 2**20:.0f} MiB, more than the "
            f"{MAX_FOOTER_BYTES // 2**20} MiB it may be; write the file with fewer row groups or columns"
        )
    if length > size - 12:  # the leading magic, the length and the trailing magic take 12 bytes
        return Problem(f"the parquet footer claims {length:,} bytes but the file has {size:,} (corrupt file)")
    return None


def unrouted_data_sources(problems: list[Problem]) -> list[str]:
    """The data_source values that need a mapping, when they are the only problems (else [])."""
    if not problems or any(problem.data_source is None for problem in problems):
        return []
    return sorted({problem.data_source for problem in problems if problem.data_source is not None})


def _check(
    schema: pa.Schema, batches: Iterator[pa.RecordBatch], max_problems: int, context: Context
) -> list[Problem]:
    checker: _RowChecker | _MessagesChecker
    if is_messages_layout(schema.names):  # demonstrations for an SFT run (docs/sft.md#demonstrations)
        checker = _MessagesChecker()
    else:
        missing = [
            Problem("missing required column", column=c) for c in REQUIRED_COLUMNS if c not in schema.names
        ]
        if missing:
            return missing
        checker = _RowChecker(context)
    groups: dict[tuple[str, str], _Group] = {}
    file_problems: list[Problem] = []
    offset = 0
    try:
        for batch in batches:
            rows = _decode_batch(batch, offset, file_problems)
            for number, row in enumerate(rows, start=offset):
                for column, message, data_source in checker.check(row, number):
                    group = groups.get((column, message))
                    if group is None:
                        group = groups[(column, message)] = _Group(column, message, data_source)
                    group.add(number)
            offset += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        file_problems.append(
            Problem(f"cannot read the rows from here on (truncated or corrupt file): {exc}", row=offset)
        )
    if offset == 0 and not file_problems:
        file_problems.append(Problem("the dataset has no rows"))
    return _listed([group.problem() for group in groups.values()] + file_problems, max_problems)


def _listed(problems: list[Problem], max_problems: int) -> list[Problem]:
    """Shared causes first (widest first), then single-row problems in row order, capped."""
    ordered = sorted(problems, key=lambda p: (p.count <= 1, -p.count, p.row if p.row is not None else -1))
    if len(ordered) <= max_problems:
        return ordered
    rest = len(ordered) - max_problems
    return [
        *ordered[:max_problems],
        Problem(f"… and {rest} more problems not listed; fix the ones above first"),
    ]


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


class _MessagesChecker:
    """The row checks of a demonstrations file: the chat-messages contract (trainer.contract.messages)."""

    def check(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str, str | None]]:
        for problem in conversation_problems(row.get(MESSAGES_KEY))[:1]:
            yield MESSAGES_KEY, problem, None
        try:
            tool_schemas_of(row.get(TOOLS_KEY))
        except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
            yield TOOLS_KEY, str(exc), None


class _RowChecker:
    """Per-row checks; remembers the ``extra_info.index`` values seen so far."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.seen_index: dict[int, int] = {}
        self.rewards = {*REWARDS.names(), *context.team_rewards}
        self.tools = {*TOOLS.names(), *context.team_tools}

    def check(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str, str | None]]:
        """(column, message, the unrouted data_source or None) for each problem of the row."""
        yield from self._data_source(row)
        checks = (self._prompt, self._ground_truth, self._index, self._tools_kwargs, self._agent, self._env)
        for check in checks:
            for column, message in check(row, number):
                yield column, message, None

    def _data_source(self, row: Mapping[str, Any]) -> Iterator[tuple[str, str, str | None]]:
        value = row.get("data_source")
        if value is _BAD:
            return
        if not isinstance(value, str) or not value.strip():
            yield "data_source", "missing: every row needs the task id that routes its reward function", None
            return
        if len(value) > DATA_SOURCE_MAX:
            # data_source is stored with every trajectory, in a column of this length.
            yield "data_source", f"longer than {DATA_SOURCE_MAX} characters", None
            return
        routing = route(value, self.context.reward_map)
        if routing.reward is None:
            yield "data_source", routing.message, value
        elif routing.reward not in self.rewards:
            yield (
                "data_source",
                f"{value!r} is mapped to the reward {routing.reward!r}, which does not exist (any more); "
                "map it to another reward on the dataset's page",
                value,
            )

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
        truth = _nested(row, "reward_model", "ground_truth")
        if truth is _BAD:
            return
        if truth is None or (isinstance(truth, str | list | dict) and not truth):
            yield "reward_model.ground_truth", "missing ground truth"

    def _index(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        index = _nested(row, "extra_info", "index")
        if index is _BAD:
            return
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

    def _tools_kwargs(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        extra_info = row.get("extra_info")
        if not isinstance(extra_info, Mapping):
            return
        tools_kwargs = extra_info.get("tools_kwargs")
        # verl's rows say need_tools_kwargs when their tools cannot work without per-row settings.
        if extra_info.get("need_tools_kwargs") and not tools_kwargs:
            yield "extra_info.tools_kwargs", "need_tools_kwargs is true but the row gives no tools_kwargs"
        if not isinstance(tools_kwargs, Mapping):
            return
        for name, kwargs in tools_kwargs.items():
            if kwargs is not None and name not in self.tools:
                yield f"extra_info.tools_kwargs.{name}", f"tool {name!r} is not registered"

    def _agent(self, row: Mapping[str, Any], number: int) -> Iterator[tuple[str, str]]:
        name = row.get("agent_name")
        if name is None or name is _BAD or name == "":
            return
        if name not in FLOWS:
            choices = ", ".join([*FLOWS.names(), *FLOWS.aliases()])
            yield "agent_name", f"flow {name!r} is not registered; choose one of {choices}"

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
            if tool not in self.tools:
                yield (
                    "env_kwargs.tools",
                    f"tool {tool!r} is not registered; choose from {', '.join(TOOLS.names())}",
                )
