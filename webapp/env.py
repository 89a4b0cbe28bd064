"""Typed readers for the environment variables the settings use.

Every read is recorded in :data:`KNOWN_VARS`, so tests can check that docker-compose.yml and the
docs/deployment.md name only variables the product really reads. A malformed value fails at start-up with a
message that names the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class EnvVar:
    name: str
    kind: str
    default: str
    help: str


KNOWN_VARS: dict[str, EnvVar] = {}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _record(name: str, kind: str, default: object, help: str) -> str | None:
    KNOWN_VARS[name] = EnvVar(name, kind, "" if default is None else str(default), help)
    value = os.environ.get(name)
    return None if value is None else value.strip()


def string(name: str, default: str | None = None, *, help: str = "") -> str | None:
    value = _record(name, "string", default, help)
    return default if value in (None, "") else value


def integer(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None, help: str = ""
) -> int:
    value = _record(name, "integer", default, help)
    if value in (None, ""):
        return default
    try:
        number = int(value)  # type: ignore[arg-type]
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, got {number}")
    return number


def boolean(name: str, default: bool, *, help: str = "") -> bool:
    value = _record(name, "boolean", default, help)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {value!r}")


def url(name: str, schemes: tuple[str, ...], default: str | None = None, *, help: str = "") -> str | None:
    value = _record(name, "url", default, help)
    if value in (None, ""):
        return default
    parts = urlsplit(value)
    if parts.scheme not in schemes or not (parts.hostname or parts.path):
        raise ImproperlyConfigured(
            f"{name} must be a URL starting with {' or '.join(s + '://' for s in schemes)}; got {value!r}"
        )
    return value


def string_list(name: str, default: list[str], *, help: str = "") -> list[str]:
    value = _record(name, "comma-separated list", ",".join(default), help)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def choice(name: str, choices: tuple[str, ...], default: str, *, help: str = "") -> str:
    value = _record(name, "one of " + "|".join(choices), default, help)
    if value in (None, ""):
        return default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value
