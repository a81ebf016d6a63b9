"""Where an imported model's network comes from: ``timm:<name>``, ``torchvision:<name>`` or
``python:<module>:<callable>`` (the ``MODEL_SOURCES`` registry), and the ``"imported"`` architecture that
rebuilds one from its checkpoint's ``arch_kwargs`` (source, keyword arguments, outputs, preprocessing,
readout) with no download, so ``load_checkpoint`` needs no special case.

A checkpoint or model file may come from someone else, so what it records is untrusted: a ``python:`` source
is imported only from a module the user allows (``$CONTROVERSIAL_TRUSTED_MODULES``, or the module named on
``import_model.py``'s own command line), and only a ``torch.nn.Module`` class or a plain function defined
there is called (``trusted_factory``); timm and torchvision get no keyword argument that could download or
read a file (``check_builder_kwargs``).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from controversial.errors import UserError
from controversial.registry import Registry
from controversial.zoo.imagenet16 import ImageNet16Readout
from controversial.zoo.preprocessing import Imported, Preprocess
from controversial.zoo.registry import register_arch

SourceBuilder = Callable[[str, int, dict[str, Any], bool, bool], nn.Module]
"""``(name, num_classes, arch_kwargs, pretrained, named) -> nn.Module``; ``pretrained``: the source's own
download; ``named``: the user named this source on the command line (``import_model.py``), not a file."""
MODEL_SOURCES: Registry[SourceBuilder] = Registry("model source")
IMAGENET16_READOUT = "imagenet16"
TRUSTED_MODULES_ENV = "CONTROVERSIAL_TRUSTED_MODULES"
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
# Words of keyword arguments through which timm or torchvision download or read files (``pretrained=True``,
# ``pretrained_cfg_overlay={file: ...}``, ``checkpoint_path=``, ``weights=``, ``cache_dir=``, ...).
_IO_WORDS = frozenset({"pretrained", "weights", "checkpoint", "cache", "file", "url", "hub", "download", "dir", "root"})


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


def _construct(what: str, build: Callable[[], Any], arch_kwargs: dict[str, Any]) -> Any:
    """``build()``, with a constructor that refuses the keyword arguments reported as a UserError; ``what``:
    e.g. ``source=timm:resnet18``."""
    try:
        return build()
    except TypeError as error:
        raise UserError(
            f"{what} could not be built with arch_kwargs={arch_kwargs}: {error}. arch_kwargs are "
            "passed to the model's constructor as keyword arguments; drop or rename the ones it does not take"
        ) from None


@MODEL_SOURCES.register("timm")
def timm_source(
    name: str, num_classes: int, arch_kwargs: dict[str, Any], pretrained: bool, named: bool = False
) -> nn.Module:
    """``timm.create_model(name, pretrained=..., num_classes=K, **arch_kwargs)``."""
    import timm

    check_builder_kwargs(f"timm:{name}", arch_kwargs)
    if not timm.is_model(name):
        raise UserError(
            f"source=timm:{name}: timm {timm.__version__} has no model '{name}'"
            f"{_did_you_mean(name, timm.list_models())} (timm.list_models('<pattern>*') lists them)"
        )
    if not pretrained:
        return _construct(
            f"source=timm:{name}", lambda: timm.create_model(name, num_classes=num_classes, **arch_kwargs), arch_kwargs
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
def torchvision_source(
    name: str, num_classes: int, arch_kwargs: dict[str, Any], pretrained: bool, named: bool = False
) -> nn.Module:
    """``torchvision.models.get_model(name, weights=None | "DEFAULT", num_classes=K, **arch_kwargs)``."""
    import torchvision

    check_builder_kwargs(f"torchvision:{name}", arch_kwargs)
    known = torchvision.models.list_models()
    if name not in known:
        raise UserError(
            f"source=torchvision:{name}: torchvision {torchvision.__version__} has no model '{name}'"
            f"{_did_you_mean(name, known)} (torchvision.models.list_models() lists them)"
        )
    if not pretrained:
        return _construct(
            f"source=torchvision:{name}",
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


def trusted_modules() -> tuple[str, ...]:
    """What ``$CONTROVERSIAL_TRUSTED_MODULES`` allows: comma-separated modules (a package allows its submodules)
    or single callables (``module:callable``)."""
    return tuple(entry.strip() for entry in os.environ.get(TRUSTED_MODULES_ENV, "").split(",") if entry.strip())


def _allowed(module: str, attribute: str | None, entries: Sequence[str]) -> bool:
    """Whether ``entries`` allow ``module`` (any callable of it, when ``attribute`` is None) or ``module:attribute``."""
    for entry in entries:
        allowed, sep, name = entry.partition(":")
        if sep and module == allowed and attribute == name:
            return True
        if not sep and (module == allowed or module.startswith(allowed + ".")):
            return True
    return False


def module_trusted(module: str) -> bool:
    """Whether ``$CONTROVERSIAL_TRUSTED_MODULES`` allows every callable of ``module``."""
    return _allowed(module, None, trusted_modules())


def _how_to_allow(entry: str) -> str:
    current = os.environ.get(TRUSTED_MODULES_ENV, "")
    return f"{TRUSTED_MODULES_ENV}={current + ',' if current else ''}{entry}"


def trusted_factory(spec: str, what: str, named: bool = False) -> Callable[..., Any]:
    """The callable ``<module>:<callable>`` that ``what`` (e.g. ``source=python:...`` in a file) asks for, once the
    user allows it: its module (or ``module:callable``) listed in ``$CONTROVERSIAL_TRUSTED_MODULES``, or
    ``named`` (the user typed this spec on the command line). Nothing is imported before that check; then it must be
    a ``torch.nn.Module`` class, or a plain Python function, defined in an allowed module (not re-exported from
    another, e.g. ``os.system``). The caller checks that a function's result is an ``nn.Module``
    (``call_trusted``). Any other case is a ``UserError`` naming the module and how to allow it."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not _MODULE.match(module_name) or not attribute.isidentifier():
        raise UserError(f"{what}: expected <module>:<callable>, e.g. python:my_models:build_net")
    entries = trusted_modules() + ((spec,) if named else ())
    if not _allowed(module_name, attribute, entries):
        raise UserError(
            f"{what} asks to import the Python module '{module_name}' and call its '{attribute}', which could run "
            f"any code, and '{module_name}' is not among the modules you allow. If you trust that code (your own, "
            f"or a colleague's you have read), allow it and run the command again: {_how_to_allow(module_name)} "
            f"(a comma-separated list of modules, or module:callable entries, in the environment of every command "
            f"that loads the model); otherwise do not use this file"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UserError(
            f"{what}: module '{module_name}' cannot be imported ({error}). Put the folder that "
            "holds it on PYTHONPATH (e.g. PYTHONPATH=/path/to/code python import_model.py ...); every command "
            "that loads this model needs it importable the same way, since the checkpoint stores weights, not code"
        ) from None
    factory = getattr(module, attribute, None)
    if factory is None:
        public = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        raise UserError(
            f"{what}: module '{module_name}' ({module.__file__}) has no callable '{attribute}'"
            f"{_did_you_mean(attribute, public)}"
        )
    is_module_class = inspect.isclass(factory) and issubclass(factory, nn.Module)
    if not (is_module_class or inspect.isfunction(factory)):
        raise UserError(
            f"{what}: '{attribute}' in '{module_name}' is a {type(factory).__name__}, not a torch.nn.Module class "
            "or a Python function returning one; nothing was called"
        )
    defined_in = str(getattr(factory, "__module__", ""))
    if defined_in != module_name and not _allowed(defined_in, attribute, entries):
        raise UserError(
            f"{what}: '{attribute}' is defined in '{defined_in}', not in '{module_name}', and '{defined_in}' is not "
            f"among the modules you allow; nothing was called. If you trust it: {_how_to_allow(defined_in)}"
        )
    return factory


def call_trusted(spec: str, what: str, kwargs: dict[str, Any], named: bool = False) -> nn.Module:
    """``trusted_factory(spec)(**kwargs)``, refused unless the result is a ``torch.nn.Module``."""
    factory = trusted_factory(spec, what, named)
    net = _construct(what, lambda: factory(**kwargs), kwargs)
    if not isinstance(net, nn.Module):
        raise UserError(f"{what} returned a {type(net).__name__}, not a torch.nn.Module")
    return net


def check_builder_kwargs(source: str, arch_kwargs: dict[str, Any]) -> None:
    """Refuse keyword arguments for timm/torchvision that could download or read a file (a word such as
    ``pretrained``, ``weights``, ``checkpoint``, ``file``, ``dir`` in the name) or that are not plain values (a
    nested mapping, such as a pretrained config): a checkpoint records them, and loading one must touch nothing."""
    for key, value in arch_kwargs.items():
        words = set(str(key).lower().split("_"))
        if words & _IO_WORDS:
            raise UserError(
                f"source={source}: arch_kwargs {key}= is refused: through it the model's library could download "
                f"or read a file. Weights come only from import_model.py weights=<file> (or its pretrained "
                f"download at import), never from arch_kwargs; refused words: {', '.join(sorted(_IO_WORDS))}"
            )
        if not _plain(value):
            raise UserError(
                f"source={source}: arch_kwargs {key}={value!r} is refused: values are numbers, strings, booleans, "
                "null or lists of them, not mappings or objects"
            )


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    return value is None or isinstance(value, (bool, int, float, str))


@MODEL_SOURCES.register("python")
def python_source(
    spec: str, num_classes: int, arch_kwargs: dict[str, Any], pretrained: bool, named: bool = False
) -> nn.Module:
    """``<module>:<callable>`` on the PYTHONPATH, called with ``arch_kwargs`` (the factory sets its own outputs),
    once the user allows it (``trusted_factory``)."""
    return call_trusted(spec, f"source=python:{spec}", arch_kwargs, named)


class NoNetworkError(UserError):
    """A source's pretrained download failed; the message says which file to pass as ``weights=`` instead."""


def _refuse_a_pretrained_head_of_another_size(source: str, pretrained_classes: int | None, num_classes: int) -> None:
    if pretrained_classes is not None and pretrained_classes != num_classes:
        raise UserError(
            f"source={source} without weights= would take its pretrained weights, whose classifier has "
            f"{pretrained_classes} outputs, but this dataset needs {num_classes}: a new head would be random. Pass "
            f"weights=<file> with a state dict trained for these {num_classes} classes"
        )


def build_network(
    source: str, num_classes: int, arch_kwargs: dict[str, Any], pretrained: bool = False, named: bool = False
) -> nn.Module:
    """The bare network of ``source`` (no preprocessing); ``pretrained`` lets the source download its weights;
    ``named``: the user typed ``source`` on the command line, so a ``python:`` module needs no allowance."""
    kind, name = parse_source(source)
    return MODEL_SOURCES.get(kind)(name, num_classes, dict(arch_kwargs), pretrained, named)


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
