"""One registry per kind (estimators, losses, tools, envs, flows, rewards, presets).

A registry may also hold *aliases* (another project's name for one of its entries: verl's
``tool_agent`` for our ``agent_env_loop``) and a *scoped overlay*: entries that exist only inside a
``with registry.scoped({...})`` block, in the current thread or asyncio task and the tasks it starts
(a :class:`contextvars.ContextVar`). That is how one run's team tools and rewards are registered for
that run only: two runs in one process (tests, a verl worker reused across runs) never see each
other's entries, and nothing is left behind when the block ends (docs/tools.md#team-tools-in-runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Generic, TypeVar

T = TypeVar("T")

_NO_OVERLAY: Mapping[str, object] = MappingProxyType({})


class RegistryError(KeyError):
    """An unknown or duplicate name. The message lists what is registered."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """A name -> entry mapping where a duplicate name is an error and an unknown name lists the choices."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._overlay: ContextVar[Mapping[str, T]] = ContextVar(f"overlay of {kind}", default=_NO_OVERLAY)  # type: ignore[arg-type]

    def add(self, name: str, entry: T) -> T:
        if name in self._entries or name in self._aliases:
            raise RegistryError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""

        def decorate(entry: T) -> T:
            return self.add(name, entry)

        return decorate

    def alias(self, name: str, target: str) -> None:
        """Let ``name`` stand for the registered ``target`` (get, ``in`` and :meth:`canonical` follow it)."""
        if name in self._entries or name in self._aliases:
            raise RegistryError(f"{self.kind} {name!r} is already registered")
        if target not in self._entries:
            raise RegistryError(f"cannot alias {name!r} to {target!r}: no {self.kind} {target!r}")
        self._aliases[name] = target

    def aliases(self) -> dict[str, str]:
        """alias -> the name it stands for."""
        return dict(sorted(self._aliases.items()))

    def canonical(self, name: str) -> str:
        """The registered name ``name`` stands for (itself unless it is an alias)."""
        return self._aliases.get(name, name)

    @contextlib.contextmanager
    def scoped(self, entries: Mapping[str, T]) -> Iterator[None]:
        """Entries visible only inside this block (this thread or task and the tasks it starts).

        A name that is registered for every run already is refused: a team's entry must never
        shadow a built-in one.
        """
        clashes = sorted(name for name in entries if name in self._entries or name in self._aliases)
        if clashes:
            raise RegistryError(f"{self.kind} {', '.join(map(repr, clashes))} is already registered")
        token = self._overlay.set(MappingProxyType({**self._overlay.get(), **entries}))
        try:
            yield
        finally:
            self._overlay.reset(token)

    def get(self, name: str) -> T:
        overlay = self._overlay.get()
        if name in overlay:
            return overlay[name]
        try:
            return self._entries[self.canonical(name)]
        except KeyError:
            choices = ", ".join(self.names()) or "(none registered)"
            raise RegistryError(f"unknown {self.kind} {name!r}; choose one of: {choices}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._aliases or name in self._overlay.get()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def names(self) -> list[str]:
        """Registered names, the scoped ones of the current block included (aliases not)."""
        return sorted({*self._entries, *self._overlay.get()})

    def unregister(self, name: str) -> None:
        """For tests that register throwaway entries."""
        self._entries.pop(name, None)
        self._aliases.pop(name, None)
