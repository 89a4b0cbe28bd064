"""Encryption of tool secrets at rest: Fernet with a key derived from SECRET_KEY.

The database alone does not reveal a secret; someone with both the database and SECRET_KEY can.
Changing SECRET_KEY makes stored secrets unreadable: the tool then has to be given its secret again.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

# A purpose label, so the same SECRET_KEY derives unrelated keys for unrelated uses.
_INFO = b"agent-r1-studio tool secrets v1"


class SecretUnreadable(ValueError):
    """The stored secret was encrypted under another SECRET_KEY (or is corrupt)."""


def _fernet() -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        settings.SECRET_KEY.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode("ascii")


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode("ascii")).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "the tool's secret cannot be decrypted (was SECRET_KEY changed?); enter it again"
        ) from None
