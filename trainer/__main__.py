"""``python -m trainer``: see :mod:`trainer.cli`."""

from __future__ import annotations

from trainer.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
