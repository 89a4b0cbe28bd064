"""The comparison table as CSV, Markdown and LaTeX: our cells (mean ± std over seeds, run count)
and, in rows of their own, the labelled reference numbers."""

from __future__ import annotations

import csv
import io
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


def to_csv(matrix: Matrix, references: list[ReferenceTable]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(HEADER)
    writer.writerows(rows(matrix, references))
    return buffer.getvalue()


def to_markdown(matrix: Matrix, references: list[ReferenceTable]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += [
        "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows(matrix, references)
    ]
    return "\n".join(lines) + "\n"


_LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                   "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}  # fmt: skip


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def to_latex(matrix: Matrix, references: list[ReferenceTable]) -> str:
    lines = [r"\begin{tabular}{" + "l" * 4 + "r" * 5 + "}", r"\hline",
             " & ".join(latex_escape(h) for h in HEADER) + r" \\", r"\hline"]  # fmt: skip
    lines += [" & ".join(latex_escape(cell) for cell in row) + r" \\" for row in rows(matrix, references)]
    lines += [r"\hline", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


FORMATS: dict[str, tuple[Callable[[Matrix, list[ReferenceTable]], str], str]] = {
    "csv": (to_csv, "text/csv"),
    "md": (to_markdown, "text/markdown"),
    "tex": (to_latex, "application/x-tex"),
}
