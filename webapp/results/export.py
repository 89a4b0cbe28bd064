"""The comparison table as CSV, Markdown and LaTeX: our cells (mean ± std over seeds, run count)
and, in rows of their own, the labelled reference numbers.

Task names, algorithms and metric keys are text a member chose, so each format escapes them for
where the file is opened (docs/security.md#exports): a CSV cell that a spreadsheet would run as a
formula starts with an apostrophe, Markdown gets HTML entities instead of markup, LaTeX its escapes.
"""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Callable

from webapp.results.analytics import Matrix, ReferenceTable

HEADER = ["source", "task", "algorithm", "metric", "final_mean", "final_std", "best_mean", "best_std", "runs"]
OURS = "ours (this server)"


def rows(matrix: Matrix, references: list[ReferenceTable]) -> list[list[str]]:
    out: list[list[str]] = []
    for (task, algorithm), cell in sorted(matrix.cells.items()):
        (fm, fs), (bm, bs) = cell.final, cell.best
        out.append([OURS, task, algorithm, cell.key, _pct(fm), _pct(fs), _pct(bm), _pct(bs), str(cell.count)])
    for table in references:
        for method in table.methods:
            for task, metric in table.columns:
                value = table.value(method, task, metric)
                if value is not None:
                    out.append([table.source, task, method, metric, f"{value:.2f}", "", "", "", ""])
    return out


def _pct(value: float) -> str:
    """Ours are fractions; the papers print percent. Both leave here in percent."""
    return f"{value * 100:.2f}"


# What spreadsheets read as the start of a formula (OWASP's CSV injection list); a number stays a number.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def csv_cell(text: str) -> str:
    """A cell no spreadsheet runs: text that would start a formula gets a leading apostrophe."""
    if text.startswith(_FORMULA_START) and not _NUMBER.match(text):
        return "'" + text
    return text


def to_csv(matrix: Matrix, references: list[ReferenceTable]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(HEADER)
    writer.writerows([csv_cell(cell) for cell in row] for row in rows(matrix, references))
    return buffer.getvalue()


def markdown_cell(text: str) -> str:
    """Text in a Markdown table cell: HTML entities for markup (renderers pass raw HTML through),
    backslash, pipe and link brackets escaped, line breaks folded."""
    escaped = html.escape(text, quote=False)
    for special in ("\\", "|", "[", "]"):
        escaped = escaped.replace(special, "\\" + special)
    return " ".join(escaped.split())


def to_markdown(matrix: Matrix, references: list[ReferenceTable]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += [
        "| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows(matrix, references)
    ]
    return "\n".join(lines) + "\n"


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def to_latex(matrix: Matrix, references: list[ReferenceTable]) -> str:
    lines = [
        r"\begin{tabular}{" + "l" * 4 + "r" * 5 + "}",
        r"\hline",
        " & ".join(latex_escape(h) for h in HEADER) + r" \\",
        r"\hline",
    ]
    lines += [" & ".join(latex_escape(cell) for cell in row) + r" \\" for row in rows(matrix, references)]
    lines += [r"\hline", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


FORMATS: dict[str, tuple[Callable[[Matrix, list[ReferenceTable]], str], str]] = {
    "csv": (to_csv, "text/csv"),
    "md": (to_markdown, "text/markdown"),
    "tex": (to_latex, "application/x-tex"),
}
