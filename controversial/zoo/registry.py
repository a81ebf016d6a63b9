"""Architecture registry: a dict plus a decorator, so checkpoints can name the code that builds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

from controversial.errors import UserError

from torch import nn

Builder = Callable[..., nn.Module]
B = TypeVar("B", bound=Builder)


@dataclass(frozen=True)
class ArchSpec:
    """A registered architecture: its builder, and what it needs at build time besides its kwargs."""

    builder: Builder
    # The builder also takes the training split: ``train_images``/``train_labels`` when training, or
    # ``data_root`` to read it when a checkpoint loads (the KDE keeps its training images out of the file).
    training_data: bool = False


_ARCHITECTURES: dict[str, ArchSpec] = {}


class UnknownNameError(UserError, KeyError):
    """An unknown registry or config name; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def register_arch(name: str, *, training_data: bool = False) -> Callable[[B], B]:
    """Register an ``nn.Module`` builder under ``name``; duplicate names are refused.

    ``training_data=True`` declares that the builder takes the training split (see ``ArchSpec``).
    """

    def decorator(builder: B) -> B:
        if name in _ARCHITECTURES:
            raise ValueError(f"architecture '{name}' is already registered")
        _ARCHITECTURES[name] = ArchSpec(builder, training_data)
        return builder

    return decorator


def _ensure_builtin_archs_imported() -> None:
    import controversial.zoo.archs  # noqa: F401  (registers the built-in architectures)


def list_archs() -> list[str]:
    _ensure_builtin_archs_imported()
    return sorted(_ARCHITECTURES)


def arch_spec(name: str) -> ArchSpec:
    """The registration of an architecture; unknown names get the list of valid ones."""
    _ensure_builtin_archs_imported()
    if name not in _ARCHITECTURES:
        raise UnknownNameError(f"unknown architecture '{name}'; known: {', '.join(sorted(_ARCHITECTURES))}")
    return _ARCHITECTURES[name]


def create_arch(name: str, **kwargs) -> nn.Module:
    """Build a registered architecture; unknown names get the list of valid ones."""
    return arch_spec(name).builder(**kwargs)
