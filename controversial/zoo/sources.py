"""Where an imported model's network comes from: ``timm:<name>``, ``torchvision:<name>`` or
``python:<module>:<callable>`` (the ``MODEL_SOURCES`` registry), and the ``"imported"`` architecture that
rebuilds one from its checkpoint's ``arch_kwargs`` (source, keyword arguments, outputs, preprocessing,
readout) with no download, so ``load_checkpoint`` needs no special case.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from controversial.errors import UserError
from controversial.registry import Registry
from controversial.zoo.imagenet16 import ImageNet16Readout
from controversial.zoo.preprocessing import Imported, Preprocess
from controversial.zoo.registry import register_arch

SourceBuilder = Callable[[str, int, dict[str, Any], bool], nn.Module]
"""``(name, num_classes, arch_kwargs, pretrained) -> nn.Module``; ``pretrained``: the source's own download."""
MODEL_SOURCES: Registry[SourceBuilder] = Registry("model source")
IMAGENET16_READOUT = "imagenet16"


def parse_source(source: str) -> tuple[str, str]:
    """``"timm:resnet18"`` -> ``("timm", "resnet18")``; the kind must be a registered source."""
    kind, sep, name = source.partition(":")
    if not sep or not name or kind not in MODEL_SOURCES:
        raise UserError(
            f"source={source!r}: expected <kind>:<name>, e.g. timm:resnet18, torchvision:resnet50 or "
            f"python:my_package.models:build (kinds: {', '.join(MODEL_SOURCES.names())})"
        )
    return kind, name


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _what_failed(error: Exception) -> str:
    """``Type: first line`` of a download's error, for a one-paragraph message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0].rstrip('.') if lines else ''}"


def _construct(source: str, build: Callable[[], nn.Module], arch_kwargs: dict[str, Any]) -> nn.Module:
    """``build()``, with a constructor that refuses the keyword arguments reported as a UserError."""
    try:
        return build()
    except TypeError as error:
        raise UserError(
            f"source={source} could not be built with arch_kwargs={arch_kwargs}: {error}. arch_kwargs are "
            "passed to the model's constructor as keyword arguments; drop or rename the ones it does not take"
        ) from None


@MODEL_SOURCES.register("timm")
def timm_source(name: str, num_classes: int, arch_kwargs: dict[str, Any], pretrained: bool) -> nn.Module:
    """``timm.create_model(name, pretrained=..., num_classes=K, **arch_kwargs)``."""
    import timm

    if not timm.is_model(name):
        raise UserError(
            f"source=timm:{name}: timm {timm.__version__} has no model '{name}'"
            f"{_did_you_mean(name, timm.list_models())} (timm.list_models('<pattern>*') lists them)"
        )
    if not pretrained:
        return _construct(
            f"timm:{name}", lambda: timm.create_model(name, num_classes=num_classes, **arch_kwargs), arch_kwargs
        )
    config = timm.models.get_pretrained_cfg(name)
    hub = getattr(config, "hf_hub_id", None) or name
    _refuse_a_pretrained_head_of_another_size(f"timm:{name}", getattr(config, "num_classes", None), num_classes)
    try:
        return timm.create_model(name, pretrained=True, num_classes=num_classes, **arch_kwargs)
    except TypeError:
        raise
    except Exception as error:  # the hub's errors come in many types (offline, DNS, HTTP); name whichever it was
        raise NoNetworkError(
            f"source=timm:{name} without weights= asks timm to download its pretrained weights from the Hugging "
            f"Face hub ({hub}), and that failed: {_what_failed(error)}. Nothing "
            "is downloaded here: on a machine with a network, save the weights with `torch.save(timm.create_model("
            f"'{name}', pretrained=True).state_dict(), '{name}.pt')` (or download model.safetensors from "
            f"huggingface.co/{hub}), copy the file here and pass weights={name}.pt"
        ) from None


@MODEL_SOURCES.register("torchvision")
def torchvision_source(name: str, num_classes: int, arch_kwargs: dict[str, Any], pretrained: bool) -> nn.Module:
    """``torchvision.models.get_model(name, weights=None | "DEFAULT", num_classes=K, **arch_kwargs)``."""
    import torchvision

    known = torchvision.models.list_models()
    if name not in known:
        raise UserError(
            f"source=torchvision:{name}: torchvision {torchvision.__version__} has no model '{name}'"
            f"{_did_you_mean(name, known)} (torchvision.models.list_models() lists them)"
        )
    if not pretrained:
        return _construct(
            f"torchvision:{name}",
            lambda: torchvision.models.get_model(name, weights=None, num_classes=num_classes, **arch_kwargs),
            arch_kwargs,
        )
    weights = torchvision.models.get_model_weights(name).DEFAULT
    _refuse_a_pretrained_head_of_another_size(f"torchvision:{name}", len(weights.meta["categories"]), num_classes)
    try:
        return torchvision.models.get_model(name, weights=weights, **arch_kwargs)
    except TypeError:
        raise
    except Exception as error:
        raise NoNetworkError(
            f"source=torchvision:{name} without weights= asks torchvision to download {weights.url}, and that "
            f"failed: {_what_failed(error)}. Nothing is downloaded here: on a "
            f"machine with a network, download that file (or save `torchvision.models.get_model('{name}', "
            f"weights='DEFAULT').state_dict()` with torch.save), copy it here and pass weights=<that file>"
        ) from None


@MODEL_SOURCES.register("python")
def python_source(spec: str, num_classes: int, arch_kwargs: dict[str, Any], pretrained: bool) -> nn.Module:
    """``<module>:<callable>`` on the PYTHONPATH, called with ``arch_kwargs`` (the factory sets its own outputs)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UserError(f"source=python:{spec}: expected python:<module>:<callable>, e.g. python:my_models:build_net")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UserError(
            f"source=python:{spec}: module '{module_name}' cannot be imported ({error}). Put the folder that "
            "holds it on PYTHONPATH (e.g. PYTHONPATH=/path/to/code python import_model.py ...); every command "
            "that loads this model needs it importable the same way, since the checkpoint stores weights, not code"
        ) from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        public = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        raise UserError(
            f"source=python:{spec}: module '{module_name}' ({module.__file__}) has no callable '{attribute}'"
            f"{_did_you_mean(attribute, public)}"
        )
    net = _construct(f"python:{spec}", lambda: factory(**arch_kwargs), arch_kwargs)
    if not isinstance(net, nn.Module):
        raise UserError(f"source=python:{spec} returned a {type(net).__name__}, not a torch.nn.Module")
    return net


class NoNetworkError(UserError):
    """A source's pretrained download failed; the message says which file to pass as ``weights=`` instead."""


def _refuse_a_pretrained_head_of_another_size(source: str, pretrained_classes: int | None, num_classes: int) -> None:
    if pretrained_classes is not None and pretrained_classes != num_classes:
        raise UserError(
            f"source={source} without weights= would take its pretrained weights, whose classifier has "
            f"{pretrained_classes} outputs, but this dataset needs {num_classes}: a new head would be random. Pass "
            f"weights=<file> with a state dict trained for these {num_classes} classes"
        )


def build_network(source: str, num_classes: int, arch_kwargs: dict[str, Any], pretrained: bool = False) -> nn.Module:
    """The bare network of ``source`` (no preprocessing); ``pretrained`` lets the source download its weights."""
    kind, name = parse_source(source)
    return MODEL_SOURCES.get(kind)(name, num_classes, dict(arch_kwargs), pretrained)


def readout_module(name: str) -> nn.Module | None:
    """The readout after the network: none, or the ImageNet 16-class one (``zoo/imagenet16.py``)."""
    if not name:
        return None
    if name != IMAGENET16_READOUT:
        raise UserError(f"readout '{name}' unknown; allowed: '' (none), {IMAGENET16_READOUT}")
    return ImageNet16Readout()


@register_arch("imported")
def imported(
    source: str,
    num_classes: int,
    input_size: Sequence[int],
    mean: Sequence[float],
    std: Sequence[float],
    arch_kwargs: dict[str, Any] | None = None,
    readout: str = "",
) -> Imported:
    """An imported model as its checkpoint records it: the source's network (no download) behind its preprocessing."""
    net = build_network(source, num_classes, arch_kwargs or {}, pretrained=False)
    return Imported(net, Preprocess(input_size, mean, std), readout_module(readout))
