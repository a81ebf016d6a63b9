"""One shape for every extension point: a name -> entry table that refuses duplicates and lists the known names.

Architectures, training methods, calibrations, augmentations, image parametrisations and synthesis
objectives are each a :class:`Registry`. A user's entry plugs in by name (``@OBJECTIVES.register("mine")``)
and is then selectable from the YAML like a built-in one.

Torch-free on purpose: option groups validate their names against these registries, and commands that
never touch a model (the study server) read those groups. So a registry declares its built-in names with
the module that implements each (``builtins``); that module, which may import torch, is imported only
when the entry itself is looked up, and registers the entry with the same decorator a user would.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from controversial.errors import UserError

T = TypeVar("T")
E = TypeVar("E")


class UnknownNameError(UserError, KeyError):
    """An unknown registry or config name; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Registry(Generic[T]):
    """Named entries of one kind (``kind`` names it in errors), with built-ins imported on first lookup."""

    def __init__(self, kind: str, builtins: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self._builtins = dict(builtins or {})
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[E], E]:
        """Decorator: add the decorated object under ``name``; a name already taken is refused."""

        def decorator(entry: E) -> E:
            self.add(name, entry)  # type: ignore[arg-type]  # E is a T: a TypeVar cannot be bound by T
            return entry

        return decorator

    def add(self, name: str, entry: T) -> None:
        """Add ``entry`` under ``name``; a name already taken (built-in or not) is refused."""
        if name in self._builtins and name not in self._entries:
            # Import the built-in's module first: that registers the built-in, so a user's entry of the
            # same name is refused below. While that module is itself being imported, import_module
            # returns it as it is and this call is the built-in's own registration.
            importlib.import_module(self._builtins[name])
        if name in self._entries:
            raise UserError(f"{self.kind} '{name}' is already registered")
        self._entries[name] = entry

    def names(self) -> list[str]:
        """Every registered name, built-ins included, sorted; imports nothing."""
        return sorted(self._builtins.keys() | self._entries.keys())

    def __contains__(self, name: object) -> bool:
        return name in self._builtins or name in self._entries

    def get(self, name: str) -> T:
        """The entry registered as ``name``; an unknown name is an error that lists the known ones."""
        if name not in self._entries and name in self._builtins:
            importlib.import_module(self._builtins[name])
        if name not in self._entries:
            known = ", ".join(self.names())
            if name in self._builtins:
                raise LookupError(f"{self._builtins[name]} was imported but did not register {self.kind} '{name}'")
            raise UnknownNameError(f"unknown {self.kind} '{name}'; known: {known}")
        return self._entries[name]

    def check(self, name: str) -> str:
        """``name`` if it is registered, else a ValueError listing the known names (a validator for option
        groups: pydantic reports a ValueError as the field's error); imports nothing."""
        if name not in self:
            raise UserError(f"unknown {self.kind} '{name}'; known: {', '.join(self.names())}")
        return name
