"""The trainer ↔ web app contract: one package both sides import, so nothing is spelled twice.

One module per concern: :mod:`.env` (the environment variables a launched run reads), :mod:`.keys`
(metric keys), :mod:`.paths` (the API paths the trainer calls and their headers), :mod:`.limits` (what
the database can hold), :mod:`.messages` (the chat-messages layout of demonstrations),
:mod:`.token_signals` (per-token signals and their encoding), :mod:`.wire` (the
bodies the trainer sends) and :mod:`.specs` (the team tools and rewards a run receives). Import the
names from here; the modules import each other, never this package.

What Postgres cannot store never reaches it (docs/security.md#limits): integers stored in integer
columns lie in 0..2**31 - 1, identifiers fit their columns and are refused otherwise, text the model or a
tool produced is cut to its column, NUL characters become U+FFFD, NaN and ±Infinity inside JSON
fields become null (jsonb has no such numbers; the float columns of metric points keep them), and
JSON nested deeper than ``JSON_MAX_DEPTH`` is refused. A refusal is a 400 naming the field, which the
reporter does not retry (docs/security.md#refusals).

The calls about the run's life need no batch id: a claim retried by its own worker is answered yes
again, the first terminal status wins, and a status message or a heartbeat sent twice changes
nothing more.
"""

from __future__ import annotations

# Each module declares its names in its __all__; this package re-exports them all, once.
from trainer.contract import env, keys, limits, messages, paths, specs, token_signals, wire
from trainer.contract.env import *  # noqa: F403
from trainer.contract.keys import *  # noqa: F403
from trainer.contract.limits import *  # noqa: F403
from trainer.contract.messages import *  # noqa: F403
from trainer.contract.paths import *  # noqa: F403
from trainer.contract.specs import *  # noqa: F403
from trainer.contract.token_signals import *  # noqa: F403
from trainer.contract.wire import *  # noqa: F403

__all__ = [
    *env.__all__,
    *keys.__all__,
    *limits.__all__,
    *messages.__all__,
    *paths.__all__,
    *specs.__all__,
    *token_signals.__all__,
    *wire.__all__,
]
