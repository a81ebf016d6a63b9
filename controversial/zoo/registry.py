"""Architecture registry, so checkpoints can name the code that builds them (see :mod:`controversial.registry`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, TypeVar

from controversial.registry import Registry

if TYPE_CHECKING:
    from torch import nn

Builder = Callable[..., "nn.Module"]
B = TypeVar("B", bound=Builder)


@dataclass(frozen=True)
class ArchSpec:
    """A registered architecture: its builder, and what it needs at build time besides its kwargs."""

    builder: Builder
    # The builder also takes the training split: ``train_images``/``train_labels`` when training, or
    # ``data_root`` to read it when a checkpoint loads (the KDE keeps its training images out of the file).
    training_data: bool = False


_ARCHS = "controversial.zoo.archs."
ARCHITECTURES: Registry[ArchSpec] = Registry(
    "architecture",
    builtins={
        "abs": _ARCHS + "abs_vae",
        "capsnet": _ARCHS + "capsnet",
        "jem": _ARCHS + "jem",
        "gaussian_kde": _ARCHS + "kde",
        "imported": "controversial.zoo.sources",  # a model trained elsewhere (import_model.py)
        "madry_mnist": _ARCHS + "madry",
        "pcn": _ARCHS + "pcn",
        "tiny_mlp": _ARCHS + "tiny",
        "small_vgg": _ARCHS + "vgg",
        "vgg16_bn": _ARCHS + "vgg",
        "wrn": _ARCHS + "wrn",
    },
)


def register_arch(name: str, *, training_data: bool = False) -> Callable[[B], B]:
    """Register an ``nn.Module`` builder under ``name``; duplicate names are refused.

    ``training_data=True`` declares that the builder takes the training split (see ``ArchSpec``).
    """

    def decorator(builder: B) -> B:
        ARCHITECTURES.add(name, ArchSpec(builder, training_data))
        return builder

    return decorator


def list_archs() -> list[str]:
    return ARCHITECTURES.names()


def arch_spec(name: str) -> ArchSpec:
    """The registration of an architecture; unknown names get the list of valid ones."""
    return ARCHITECTURES.get(name)


def create_arch(name: str, **kwargs) -> nn.Module:
    """Build a registered architecture; unknown names get the list of valid ones."""
    return arch_spec(name).builder(**kwargs)
