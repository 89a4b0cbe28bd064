"""The calculator tool: arithmetic evaluated by walking the expression's AST (never ``eval``).

Numbers are exact fractions, so ``0.1 + 0.2`` is ``0.3`` and ``7 / 2`` is ``3.5``; only the operators
below are allowed, and sizes are bounded so that no expression can tie up the worker.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from trainer.tools import BaseTool, ToolResult, one_string_parameter, register_tool

MAX_EXPRESSION_CHARS = 256
MAX_MAGNITUDE = 1e18
MAX_EXPONENT = 64

Number = Fraction | float


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or its result is out of range."""


def _checked(value: Number) -> Number:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if abs(float(value)) > MAX_MAGNITUDE:
        raise CalculatorError("the result is too large")
    return value


def _divide(left: Number, right: Number) -> Number:
    if right == 0:
        raise CalculatorError("division by zero")
    return left / right


def _floor_divide(left: Number, right: Number) -> Number:
    if right == 0:
        raise CalculatorError("division by zero")
    return Fraction(math.floor(left / right))


def _modulo(left: Number, right: Number) -> Number:
    if right == 0:
        raise CalculatorError("modulo by zero")
    return left % right


def _power(base: Number, exponent: Number) -> Number:
    if abs(float(exponent)) > MAX_EXPONENT:
        raise CalculatorError(f"exponents are limited to ±{MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    if abs(float(base)) > 1 and float(exponent) * math.log10(abs(float(base))) > 18:
        raise CalculatorError("the result is too large")
    if isinstance(exponent, Fraction) and exponent.denominator == 1:
        return Fraction(base) ** int(exponent)
    if base < 0:
        raise CalculatorError("a negative number has no real fractional power")
    return float(base) ** float(exponent)


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _divide,
    ast.FloorDiv: _floor_divide,
    ast.Mod: _modulo,
    ast.Pow: _power,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: lambda v: v, ast.USub: lambda v: -v}

# Thousands separators ("1,000") and the symbols people type for the operators.
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_SYMBOLS = {"\u00d7": "*", "\u00f7": "/", "^": "**", "\u2212": "-", "$": ""}  # x, divide, minus signs


def _node(node: ast.AST) -> Number:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _checked(_BINARY[type(node.op)](_node(node.left), _node(node.right)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_node(node.operand))
    raise CalculatorError(f"unsupported expression element: {ast.dump(node)[:60]}")


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression (+ - * / // % ** and parentheses over numbers)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    text = _THOUSANDS.sub("", expression)
    for symbol, replacement in _SYMBOLS.items():
        text = text.replace(symbol, replacement)
    if not text.strip():
        raise CalculatorError("the expression is empty")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not a valid arithmetic expression: {exc.msg}") from None
    return _node(tree.body)


def format_number(value: Number) -> str:
    """Integers without a decimal point; other values to at most 10 decimal places."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.10f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


@register_tool
class CalculatorTool(BaseTool):
    """Evaluates one arithmetic expression.

    A row may set ``tools_kwargs.calculator.reward``: the first call that evaluates cleanly in the
    episode earns it (the arithmetic demo's shaping); GSM8K rows set none, so calls earn nothing.
    """

    name = "calculator"
    description = (
        "Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. '(12 + 7) * 3'."
    )
    parameters = one_string_parameter("expression", "The arithmetic expression to evaluate.")

    def __init__(self, **tool_kwargs: Any) -> None:
        super().__init__(**tool_kwargs)
        self.rewarded = False  # tools are made per episode, so this is "rewarded in this episode"

    async def execute(self, args: dict[str, Any], *, reward: float | None = None, **ctx: Any) -> ToolResult:
        text = format_number(evaluate(args["expression"]))
        if reward is None or self.rewarded:
            return ToolResult(text=text)
        self.rewarded = True
        return ToolResult(text=text, reward=float(reward))


VERL_DATA_SOURCE = "openai/gsm8k"  # the data source of verl's GSM8K rows, which this tool scores as


@register_tool
class Gsm8kRewardTool(BaseTool):
    """verl's GSM8K tool (``verl/tools/gsm8k_tool.py`` and its ``gsm8k_tool_config.yaml``): the model
    submits its answer and reads back its score (docs/datasets.md#calc_gsm8k_reward).

    Same name, parameters, response text and reward semantics: the answer is scored as ``#### <answer>``
    the way the run scores ``openai/gsm8k`` rows (verl's rule or our lenient one, ``data.reward_rule``;
    1.0 right, 0.0 otherwise); the text the model sees is ``Current parsed
    answer='...' reward=...``; the call's own reward is 0.0 when the score beats the previous
    submission's (0.0 before the first) and -0.05 otherwise. The ground truth comes from the row's
    ``extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth``, as verl's data has it
    (or ``ground_truth`` directly).
    """

    name = "calc_gsm8k_reward"
    description = (
        "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is correct, 0.0 if parsed "
        "answer is incorrect or not correctly parsed)"
    )
    parameters = {
        "type": "object",
        "properties": {
            "answer": {
                "type": "string",
                "description": "The model's answer to the GSM8K math problem, must be a digits",
            }
        },
        "required": ["answer"],
    }

    def __init__(self, **tool_kwargs: Any) -> None:
        super().__init__(**tool_kwargs)
        self.last = 0.0  # tools are made per episode: the score of the episode's previous submission

    async def execute(
        self, args: dict[str, Any], *, create_kwargs: dict[str, Any] | None = None, **ctx: Any
    ) -> ToolResult:
        from trainer.rewards import score_step

        answer = args.get("answer", "")
        answer = answer if isinstance(answer, str) else str(answer)
        truth = (create_kwargs or {}).get("ground_truth", ctx.get("ground_truth"))
        if truth is None:
            raise ValueError("no ground truth: the row's tools_kwargs give calc_gsm8k_reward none")
        response = answer if answer.startswith("#### ") else "#### " + answer
        reward, _ = score_step(VERL_DATA_SOURCE, response, truth)
        tool_reward = 0.0 if reward > self.last else -0.05
        self.last = reward
        return ToolResult(text=f"Current parsed {answer=} {reward=}", reward=tool_reward)
