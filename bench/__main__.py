"""Run the benchmarks: `python -m bench [NAME ...]` (names without the bench_ prefix).

Each benchmark is a script that measures ours and its named peer in the same run and prints the
ratio. They run one after another in their own processes so one cannot warm the other's caches.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if argv:
        wanted = {name.removeprefix("bench_").removesuffix(".py") for name in argv}
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in wanted]
    failures = 0
    for script in scripts:
        print(f"\n=== {script.stem} ===", flush=True)
        started = time.monotonic()
        code = subprocess.run([sys.executable, str(script)], cwd=HERE.parent, check=False).returncode
        print(f"--- {script.stem}: exit {code}, {time.monotonic() - started:.0f} s", flush=True)
        failures += code != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
