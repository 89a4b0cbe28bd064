"""The arithmetic demo uses the GSM8K recipe's calculator (registered once, as "calculator")."""

from __future__ import annotations

from tasks_lib.gsm8k.tools import CalculatorTool, evaluate, format_number

__all__ = ["CalculatorTool", "evaluate", "format_number"]
