"""Start a command in a new session and exit at once, printing its process group id.

The command is re-parented to init when we exit, so the Celery worker that launched it is not its
parent: a worker restart neither kills the training run nor leaves a zombie behind.
"""

from __future__ import annotations

import subprocess
import sys


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m webapp.experiments.detach COMMAND [ARGS...]\n")
        return 2
    proc = subprocess.Popen(
        argv,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sys.stdout.write(f"{proc.pid}\n")  # a new session's leader: its pid is the process group id
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
