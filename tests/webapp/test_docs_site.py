"""The documentation site builds with ``--strict`` and its code samples still run.

A sample is a fenced block right after a ``<!-- sample -->`` line (offline: run in an empty folder
with this venv first on PATH) or a ``<!-- sample: needs a server -->`` line (run against the live
test server with a member's token in ``STUDIO_URL`` / ``STUDIO_TEAM`` / ``STUDIO_TOKEN`` and the
MLflow variables the pages tell users to export). Every other Python block must at least compile.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from webapp import docs_site

DOCS = docs_site.ROOT / "docs"
BLOCK = re.compile(
    r"(?:^<!-- sample(?P<server>: needs a server)? -->\n)?^```(?P<lang>\w*)\n(?P<code>.*?)^```$", re.M | re.S
)


@dataclass(frozen=True)
class Sample:
    where: str
    lang: str
    code: str
    marked: bool
    needs_server: bool


def samples() -> list[Sample]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            marked = match.group(0).startswith("<!-- sample")
            found.append(
                Sample(f"{page.name}:{line}", match["lang"], match["code"], marked, bool(match["server"]))
            )
    return found


def ids(sample: Sample) -> str:
    return sample.where


def run_sample(sample: Sample, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = (
        [sys.executable, "-c", sample.code]
        if sample.lang == "python"
        else ["bash", "-euo", "pipefail", "-c", sample.code]
    )
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_site_builds_strictly_with_every_api_operation(tmp_path: Path) -> None:
    docs_site.write_schema()
    result = docs_site.build(tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    html = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    api_page = re.sub(r"<[^>]+>", "", html)  # a path's parameters are wrapped in spans
    schema = json.loads(docs_site.SCHEMA.read_text(encoding="utf-8"))
    missing = [path for path in schema["paths"] if path not in api_page]
    assert schema["paths"] and missing == []


def test_pages_carry_samples_of_both_kinds() -> None:
    marked = [sample for sample in samples() if sample.marked]
    assert any(s.needs_server for s in marked) and any(not s.needs_server for s in marked)
    assert all(s.lang in {"python", "bash"} for s in marked), "a sample is Python or bash"


@pytest.mark.parametrize("sample", [s for s in samples() if s.lang == "python" and not s.marked], ids=ids)
def test_every_python_block_compiles(sample: Sample) -> None:
    compile(sample.code, sample.where, "exec")


@pytest.mark.parametrize("sample", [s for s in samples() if s.marked and not s.needs_server], ids=ids)
def test_an_offline_sample_runs(sample: Sample, tmp_path: Path) -> None:
    result = run_sample(sample, tmp_path, {})
    assert result.returncode == 0, f"{sample.where}:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("sample", [s for s in samples() if s.needs_server], ids=ids)
def test_a_server_sample_runs_against_the_live_server(
    sample: Sample, tmp_path: Path, live_server: Any, personas: dict[str, Any]
) -> None:
    from webapp.accounts.models import ApiToken

    team = personas["acme"].slug
    token = ApiToken.issue(personas["bob"], "docs sample")[1]
    env = {
        "STUDIO_URL": live_server.url,
        "STUDIO_TEAM": team,
        "STUDIO_TOKEN": token,
        "MLFLOW_TRACKING_URI": f"{live_server.url}/mlflow/t/{team}",
        "MLFLOW_TRACKING_TOKEN": token,
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    }
    result = run_sample(sample, tmp_path, env)
    assert result.returncode == 0, f"{sample.where}:\n{result.stdout}\n{result.stderr}"
