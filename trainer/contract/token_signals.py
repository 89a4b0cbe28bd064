"""Per-token signals (docs/rollouts.md#token-signals): their names and their one encoding on the wire.

What the update computed for each response token, so the trajectory page can colour the tokens:
the advantage, the log-prob under the rollout policy (π_old, as the update used it), the importance
ratio and the entropy at update time, whether the clipped surrogate was taken (1/0), and the KL to
the reference. Each travels as base64 of little-endian float32 (4 bytes a token, exact), the same
bytes the web app stores, compressed.
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from collections.abc import Sequence
from typing import Literal

__all__ = [
    "TOKEN_SIGNALS",
    "TOKEN_SIGNALS_MAX_TOKENS",
    "TOKEN_TEXT_MAX",
    "TokenSignal",
    "decode_floats",
    "encode_floats",
]

TokenSignal = Literal["advantage", "log_prob", "ratio", "entropy", "clipped", "kl"]
TOKEN_SIGNALS: tuple[TokenSignal, ...] = ("advantage", "log_prob", "ratio", "entropy", "clipped", "kl")
TOKEN_SIGNALS_MAX_TOKENS = 65_536  # tokens of one step's response that signals are kept for
TOKEN_TEXT_MAX = 200  # characters of one token's text (a token is a few characters; the rest is noise)


def encode_floats(values: Sequence[float]) -> str:
    """base64 of little-endian float32: the one encoding of a per-token array on the wire."""
    packed = array("f", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def decode_floats(text: str) -> list[float]:
    """The floats of :func:`encode_floats`; ValueError when the text is not such an array."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError("is not base64") from None
    if len(raw) % 4:
        raise ValueError("is not a float32 array (length not a multiple of 4 bytes)")
    packed = array("f")
    packed.frombytes(raw)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()
