"""Tools the agent can call (Agent-R1's BaseTool layer, docs/algorithms.md#basetool).

A tool has a name, a description and JSON-Schema ``parameters``; ``execute`` is async and returns a
:class:`ToolResult`. :func:`run_tool_call` is the one place that turns a parsed call into a
:class:`~trainer.mdp.ToolCallRecord`: unknown tools, arguments that fail the schema, exceptions and
timeouts all become error records whose ``result`` is the observation the model sees, never exceptions.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import jsonschema

from trainer.mdp import ToolCallRecord
from trainer.registry import Registry

logger = logging.getLogger(__name__)

# OpenAI function names; chat templates and parsers assume nothing more exotic.
_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolError(Exception):
    """A failure a tool reports to the model as it is: a key not found, an endpoint's error status.
    The model reads it like any failed call's observation; the log says it in one line, with no
    traceback, since nothing is wrong with the tool itself."""


@dataclass
class ToolResult:
    """What one tool execution gives back: the observation text, an optional reward, extra info."""

    text: str
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


def one_string_parameter(name: str, description: str) -> dict[str, Any]:
    """The ``parameters`` of a tool that takes one required string argument and nothing else."""
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": description}},
        "required": [name],
        "additionalProperties": False,
    }


def check_tool_definition(name: str, parameters: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``name`` is a valid function name and ``parameters`` an object schema."""
    if not _NAME_PATTERN.match(name):
        raise ValueError(f"tool name {name!r} must be 1-64 characters of letters, digits, '_' or '-'")
    if parameters.get("type") != "object":
        raise ValueError(f"tool {name!r}: parameters must be a JSON Schema with type 'object'")
    try:
        jsonschema.Draft202012Validator.check_schema(dict(parameters))
    except jsonschema.SchemaError as exc:
        raise ValueError(f"tool {name!r}: parameters is not a valid JSON Schema: {exc.message}") from exc


class BaseTool(ABC):
    """A tool: subclass, set ``name``/``description``/``parameters`` and implement ``execute``.

    Register the class with ``@register_tool``: TOOLS then knows it by its ``name``.
    ``execute`` receives the validated arguments and, as keyword arguments, the per-row
    ``tools_kwargs`` entry for this tool (so implementations should accept ``**ctx``).
    """

    # Class attributes for registered tools; instances may set their own (HttpTool does).
    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Check class-level definitions at import time so a bad schema fails when the recipe
        # loads, not in the middle of a rollout. Instance-defined tools check in __init__.
        if cls.__dict__.get("name"):
            check_tool_definition(cls.name, cls.parameters)

    def __init__(self, **tool_kwargs: Any) -> None:
        self.tool_kwargs = tool_kwargs
        self._validator: jsonschema.Draft202012Validator | None = None

    @abstractmethod
    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult: ...

    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema that chat templates render."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def argument_error(self, args: Any) -> str | None:
        """The reason ``args`` does not satisfy ``parameters``, or None when it does."""
        if self._validator is None:
            self._validator = jsonschema.Draft202012Validator(self.parameters)
        return argument_error(self._validator, args)


def argument_error(validator: jsonschema.Draft202012Validator, args: Any) -> str | None:
    """Why ``args`` fails a tool's parameter schema, in the words the model sees (None: it passes)."""
    if not isinstance(args, dict):
        return f"arguments must be a JSON object, got {type(args).__name__}"
    error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


TOOLS: Registry[type[BaseTool]] = Registry("tool")
ToolClass = TypeVar("ToolClass", bound=type[BaseTool])


def register_tool(tool: ToolClass) -> ToolClass:
    """Class decorator: add a tool class to TOOLS under its own ``name``, the name the model calls."""
    TOOLS.add(tool.name, tool)
    return tool


ENTRY_POINT = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def load_tool_class(entry_point: str) -> type[BaseTool]:
    """Import ``package.module:Class``; it must be a BaseTool subclass (a staff-registered python tool)."""
    if not ENTRY_POINT.match(entry_point):
        raise ValueError(f"{entry_point!r} is not of the form package.module:Class")
    module_name, _, attribute = entry_point.partition(":")
    tool_class = getattr(importlib.import_module(module_name), attribute)
    if not (isinstance(tool_class, type) and issubclass(tool_class, BaseTool)):
        raise TypeError(f"{entry_point} is not a subclass of trainer.tools.BaseTool")
    return tool_class


def _failed(record: ToolCallRecord, error: str, message: str) -> ToolCallRecord:
    record.error = error
    record.result = f"Error: {message}"
    return record


async def run_tool_call(
    record: ToolCallRecord,
    tools: Mapping[str, BaseTool],
    *,
    timeout_s: float,
    ctx: Mapping[str, Any] | None = None,
) -> ToolCallRecord:
    """Run one well-formed parsed call and fill in ``record`` (result, reward, error, latency).

    Never raises for anything the model or the tool did wrong; only cancellation propagates.
    """
    tool = tools.get(record.name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "(none)"
        return _failed(
            record, "unknown_tool", f"tool {record.name!r} not found. Available tools: [{available}]"
        )
    problem = tool.argument_error(record.arguments)
    if problem is not None:
        return _failed(record, "invalid_arguments", f"invalid arguments for tool {record.name!r}: {problem}")
    started = time.perf_counter()
    try:
        result = await asyncio.wait_for(tool.execute(record.arguments, **dict(ctx or {})), timeout_s)
    except TimeoutError as exc:
        # wait_for raises it bare; HttpTool raises it with its own HTTP timeout in the message.
        detail = str(exc) or f"timed out after {timeout_s:g} s"
        _failed(record, "timeout", f"tool {record.name!r} {detail}")
    except ToolError as exc:
        logger.info("tool %r failed: %s", record.name, exc)
        _failed(record, "execution", f"tool {record.name!r} failed: {type(exc).__name__}: {exc}")
    except Exception as exc:
        logger.warning("tool %r raised", record.name, exc_info=True)
        _failed(record, "execution", f"tool {record.name!r} failed: {type(exc).__name__}: {exc}")
    else:
        if isinstance(result, ToolResult):
            record.result, record.reward, record.info = result.text, result.reward, dict(result.info)
        else:
            _failed(
                record, "execution", f"tool {record.name!r} returned {type(result).__name__}, not ToolResult"
            )
    record.latency_s = time.perf_counter() - started
    return record
