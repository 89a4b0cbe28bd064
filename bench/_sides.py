"""Run each side of a benchmark (ours, the peer) in a process of its own, one after the other.

A process per side: neither inherits the other's allocator, thread pools or warmed caches, and each
runs with the environment it would have on its own (the OpenMP settings among them,
docs/performance.md#cpu-threads).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def run_sides(script: str, argv: Sequence[str], sides: Sequence[str]) -> dict[str, Any]:
    """``script --only SIDE --json FILE`` for each side, in order; each side's JSON by its name."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side in sides:
            out = Path(tmp) / f"{side}.json"
            command = [sys.executable, script, *argv, "--only", side, "--json", str(out)]
            subprocess.run(command, check=True)
            results[side] = json.loads(out.read_text())
    return results
