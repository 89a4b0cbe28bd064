"""``import studio``: the SDK's name in scripts (docs/sdk.md).

The top-level folders of the repository are fixed, so this package lives here and pyproject.toml's
package finder looks in ``trainer/toplevel`` too, which installs it as the top-level ``studio``. It
holds no code of its own: every name is :mod:`trainer.studio.sdk`'s, so there is one module, one
current run, whichever name a script imports.
"""

from __future__ import annotations

from typing import Any

from trainer.studio.sdk import Run, current_run, finish, init, log

__all__ = ["Run", "finish", "init", "log"]


def __getattr__(name: str) -> Any:
    """W&B's module attributes: ``studio.run``, ``studio.config`` and ``studio.summary`` are the
    current run's (``studio.run`` is None between runs)."""
    from trainer.studio import sdk

    if name == "run":
        return sdk._current
    if name in ("config", "summary"):
        return getattr(current_run(), name)
    raise AttributeError(f"module 'studio' has no attribute {name!r}")
