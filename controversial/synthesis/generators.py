"""Image generators whose latent space a synthesis can search (``synthesis.parametrization=generator``).

A generator maps a (N, latent_dim) code to (N, C, H, W) images in [0, 1]. Its architecture comes from the
``GENERATORS`` registry (built in: ``mlp_decoder`` and ``conv_decoder``, VAE decoders), fed like the model
zoo: a bundled generator is a self-describing file ``models/generators/<dataset>/<name>.pt`` (architecture,
keyword arguments, float16 weights, card), named ``<dataset>/<name>`` (e.g. ``mnist/vae``); a user's own is
``python:<module>:<callable>`` (imported under the same rule as an imported model's ``python:`` source)
with its weights from a file, read as tensors only (``torch.load(weights_only=True)``).

Every generator is checked once when loaded (:func:`check_generator`): its output for a batch of codes must
have the pair's image shape and lie in [0, 1]; a generator of another size or channel count is refused by
name. The bundled folder is one level deeper than the classifiers' ``models/<dataset>/<name>.pt``, so the
model registry never takes a generator for a model or ``generators`` for a dataset.
"""

from __future__ import annotations

import functools
import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from controversial.atomic import atomic_write_bytes
from controversial.errors import UserError
from controversial.registry import Registry
from controversial.synthesis.options import GeneratorOptions

GeneratorBuilder = Callable[..., nn.Module]
GENERATORS: Registry[GeneratorBuilder] = Registry("generator architecture")
"""Generator architectures by name: ``builder(**arch_kwargs) -> nn.Module`` mapping codes to images in [0, 1]."""
GENERATORS_DIR = Path(__file__).resolve().parents[2] / "models" / "generators"
PYTHON_PREFIX = "python:"
LOAD_ERRORS = (OSError, RuntimeError, KeyError, TypeError, ValueError, AttributeError, pickle.UnpicklingError)


@GENERATORS.register("conv_decoder")
class ConvDecoder(nn.Module):
    """Linear to a (2w, s/4, s/4) map, two stride-2 transposed convolutions, a 3x3 convolution, a sigmoid."""

    def __init__(self, latent_dim: int, channels: int, size: int, width: int = 64) -> None:
        super().__init__()
        if size % 4:
            raise UserError(f"conv_decoder: size {size} is not a multiple of 4")
        self.latent_dim = latent_dim
        base = size // 4
        self.logits = nn.Sequential(
            nn.Linear(latent_dim, 2 * width * base * base),
            nn.ReLU(),
            nn.Unflatten(1, (2 * width, base, base)),
            nn.ConvTranspose2d(2 * width, width, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(width, width, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(width, channels, 3, padding=1),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(z))


@GENERATORS.register("mlp_decoder")
class MLPDecoder(nn.Module):
    """Two hidden ReLU layers of ``width`` units to every pixel, a sigmoid: cheap to train on a CPU."""

    def __init__(self, latent_dim: int, channels: int, size: int, width: int = 512) -> None:
        super().__init__()
        self.latent_dim = latent_dim
        self.logits = nn.Sequential(
            nn.Linear(latent_dim, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, channels * size * size),
            nn.Unflatten(1, (channels, size, size)),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(z))


@dataclass
class GeneratorInfo:
    """Everything about a bundled generator except its weights (its model-card entry included)."""

    name: str
    dataset: str
    arch: str
    arch_kwargs: dict[str, Any]
    latent_dim: int
    metrics: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    card: dict[str, str] = field(default_factory=dict)
    created: str = ""


def generator_path(dataset: str, name: str, folder: Path | None = None) -> Path:
    """``models/generators/<dataset>/<name>.pt``."""
    return (folder or GENERATORS_DIR) / dataset / f"{name}.pt"


def bundled_generators(folder: Path | None = None) -> list[str]:
    """The bundled generators' names, ``<dataset>/<name>``."""
    return [f"{p.parent.name}/{p.stem}" for p in sorted((folder or GENERATORS_DIR).glob("*/*.pt"))]


def save_generator(path: Path, net: nn.Module, info: GeneratorInfo) -> None:
    """Float16 weights and the metadata (as JSON text, so reading needs no code), written atomically."""
    import io

    state = {k: v.half() if v.is_floating_point() else v for k, v in net.state_dict().items()}
    buffer = io.BytesIO()
    torch.save({"info": json.dumps(info.__dict__), "state": state}, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buffer.getvalue())


def read_generator(path: Path) -> tuple[GeneratorInfo, dict[str, torch.Tensor]]:
    """A bundled generator's metadata and float32 weights; tensors and plain data only."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        info = GeneratorInfo(**json.loads(payload["info"]))
    except LOAD_ERRORS as error:
        raise UserError(
            f"{path}: not a generator file written by train_generator.py ({type(error).__name__})"
        ) from None
    return info, {k: v.float() if v.is_floating_point() else v for k, v in payload["state"].items()}


def _bundled(name: str) -> tuple[nn.Module, int]:
    dataset, _, stem = name.partition("/")
    path = generator_path(dataset, stem)
    if not stem or not path.is_file():
        raise UserError(
            f"synthesis.generator.name={name!r}: no such generator; bundled: "
            f"{', '.join(bundled_generators()) or 'none'}, or python:<module>:<callable> with "
            "synthesis.generator.weights=<file>"
        )
    info, state = read_generator(path)
    net = GENERATORS.get(info.arch)(**info.arch_kwargs)
    net.load_state_dict(state)
    return net, info.latent_dim


def _user_generator(options: GeneratorOptions) -> tuple[nn.Module, int]:
    from controversial.zoo.sources import call_trusted

    spec = str(options.name).removeprefix(PYTHON_PREFIX)
    # Synthesis settings travel in sweeps and run folders, so the name alone allows nothing: only a module
    # listed in $CONTROVERSIAL_TRUSTED_MODULES is imported (the rule of every python: source).
    net = call_trusted(spec, f"synthesis.generator.name={options.name}", dict(options.kwargs))
    latent_dim = options.latent_dim or getattr(net, "latent_dim", None)
    if not isinstance(latent_dim, int) or latent_dim < 1:
        raise UserError(
            f"synthesis.generator.name={options.name}: the size of its code is unknown; set "
            "synthesis.generator.latent_dim=<int> or give the module a latent_dim attribute"
        )
    if options.weights:
        try:
            state = torch.load(options.weights, map_location="cpu", weights_only=True)
            net.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
        except LOAD_ERRORS as error:
            raise UserError(
                f"synthesis.generator.weights={options.weights}: not a state dict of {options.name} "
                f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
            ) from None
    return net, latent_dim


@functools.lru_cache(maxsize=4)
def _load(options_json: str) -> tuple[nn.Module, int]:
    options = GeneratorOptions.model_validate_json(options_json)
    if options.name is None:
        raise UserError(
            "synthesis.parametrization=generator needs synthesis.generator.name: a bundled generator "
            f"({', '.join(bundled_generators()) or 'none yet'}) or python:<module>:<callable>"
        )
    net, latent_dim = _user_generator(options) if options.name.startswith(PYTHON_PREFIX) else _bundled(options.name)
    net.eval().requires_grad_(False)
    return net, latent_dim


def check_generator(net: nn.Module, latent_dim: int, shape: tuple[int, int, int], name: str) -> None:
    """Refuse, by name, a generator whose images are not ``shape`` (C, H, W) or leave [0, 1]."""
    with torch.no_grad():
        try:
            out = net(torch.randn(2, latent_dim, generator=torch.Generator().manual_seed(0)))
        except RuntimeError as error:
            raise UserError(f"generator {name}: it fails on a code of size {latent_dim} ({error})") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape[1:]) != tuple(shape):
        got = tuple(out.shape[1:]) if isinstance(out, torch.Tensor) else type(out).__name__
        raise UserError(
            f"generator {name} makes images of shape {got} (channels, height, width), but this pair's dataset "
            f"has {tuple(shape)}: pick a generator trained on the pair's dataset"
        )
    if out.min() < 0 or out.max() > 1:
        raise UserError(
            f"generator {name}: its images range over [{out.min():.3g}, {out.max():.3g}], not [0, 1]; end the "
            "network with a sigmoid (or map a tanh output with (x + 1) / 2)"
        )


def load_generator(options: GeneratorOptions, shape: tuple[int, int, int]) -> tuple[nn.Module, int]:
    """The generator ``options`` names, checked against the image ``shape``, and its code size (cached)."""
    net, latent_dim = _load(options.model_dump_json())
    check_generator(net, latent_dim, shape, str(options.name))
    return net, latent_dim


CARD_HEADER = """# Generator card

Generated by `train_generator.py` from the metadata inside each generator file; do not edit by hand.
These are the bundled generators of `synthesis.parametrization=generator` (docs/synthesis.md, "Image priors"),
not classifiers: the model registry does not list them. Weights are stored in float16. KID x 10^3 is that of the
generator's own samples (z ~ N(0, I), untruncated, as 8-bit images) to the dataset's test images, in the
feature space of the dataset's feature network, beside the measure's floor (test vs training images) and its
noise ceiling (uniform noise). Training times are wall seconds of one thread on the shared 2-core VM, under
heavy load from other jobs.
"""


def write_generator_card(folder: Path | None = None) -> Path:
    """Regenerate ``<folder>/README.md`` from every generator file in ``<folder>/<dataset>/``."""
    from controversial.atomic import atomic_write_text

    folder = folder or GENERATORS_DIR
    sections = []
    for path in sorted(folder.glob("*/*.pt")):
        info, _ = read_generator(path)
        metrics = "".join(f"- **{k}:** {v}\n" for k, v in info.metrics.items())
        sections.append(
            f"## {info.dataset}/{info.name}\n\n{info.card.get('description', '')}\n\n"
            f"- **Reproduce:** `{info.command}`\n- **Architecture:** `{info.arch}` with `{info.arch_kwargs}`\n"
            f"{metrics}- **File:** `{path.parent.name}/{path.name}` ({path.stat().st_size / 1e6:.2f} MB), "
            f"created {info.created}\n"
        )
    out = folder / "README.md"
    atomic_write_text(out, CARD_HEADER + "\n" + "\n".join(sections))
    return out
