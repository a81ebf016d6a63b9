"""What ``import_model.py`` checks beside the import itself: where the model may be written (never over a bundled
model, over an imported one only when asked), whether the network takes the images it will get, and whether
the imported model can be of any use (accuracy above chance, a calibration that helps, a sensible input size).

Each check turns a user's mistake into a message that names the option and the numbers; nothing here writes.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from controversial.config import REPO_ROOT, model_config_files, models_dirs
from controversial.datasets import DatasetInfo
from controversial.errors import UserError

BUNDLED_MODELS = REPO_ROOT / "models"
# Per-dataset normalisation that models trained on them commonly use (an example in messages, never a default).
COMMON_NORMALIZATION: dict[str, tuple[list[float], list[float]]] = {
    "mnist": ([0.1307], [0.3081]),
    "cifar10": ([0.4914, 0.4822, 0.4465], [0.247, 0.2435, 0.2616]),
}
SLOPE_FLOOR = 1e-3  # a calibrated sigmoid readout flatter than this is (nearly) constant: nothing to synthesize
UPSAMPLING_WARNING = 2.0  # warn when the network's input is this many times larger than the images (per side)


def bundled_names() -> set[str]:
    """The bundled models' names: the ``conf/model`` files and the checkpoints in the repository's models/."""
    return {p.stem for p in model_config_files()} | {p.stem for p in BUNDLED_MODELS.glob("*/*.pt")}


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def check_target(name: str, dataset: str, models_dir: Path, overwrite: bool) -> None:
    """Refuse an import that would replace a bundled model, write into the repository's models/, replace an
    imported model without ``overwrite=true``, or leave two imported models of one name where commands look."""
    if name in bundled_names():
        raise UserError(
            f"name={name} is a bundled model (conf/model/{name}.yaml or models/*/{name}.pt); an import never "
            "replaces a bundled model: choose another name (name=my_" + name + ")"
        )
    if _inside(models_dir, BUNDLED_MODELS):
        raise UserError(
            f"models_dir={models_dir} is the repository's models/ (the bundled checkpoints and their tracked model "
            "card): imported models go to a folder of yours. Leave models_dir unset (the per-user folder every "
            "command searches, or $CONTROVERSIAL_MODELS_DIR when set) or name another folder"
        )
    target = models_dir / dataset / f"{name}.pt"
    for folder in dict.fromkeys([models_dir, *models_dirs()]):
        for found in sorted(Path(folder).glob(f"*/{name}.*")):
            if found.suffix not in {".pt", ".yaml"}:
                continue
            if found.with_suffix(".pt").resolve() == target.resolve():
                if not overwrite:
                    raise UserError(
                        f"an imported model '{name}' exists already ({found}): pass overwrite=true to replace it, "
                        "or choose another name"
                    )
                continue
            raise UserError(
                f"an imported model '{name}' exists already at {found} (a folder every command searches); "
                f"model_a={name} must name one model: choose another name, or remove that model first"
            )


def first_layer(net: nn.Module) -> tuple[str, nn.Module] | None:
    """The first convolution or linear layer in definition order (what the input meets first, for common nets)."""
    for layer_name, module in net.named_modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            return layer_name, module
    return None


def input_size_error(net: nn.Module, input_size: list[int], error: Exception) -> UserError:
    """A network that fails on ``input_size`` images: say which dimension disagrees where its first layer tells."""
    c, h, w = input_size
    layer = first_layer(net)
    detail = ""
    if layer is not None:
        layer_name, module = layer
        if isinstance(module, nn.Conv2d) and module.in_channels != c:
            detail = (
                f"channels disagree: input_size gives {c} but the first layer ({layer_name}, a Conv2d) takes "
                f"{module.in_channels}; pass input_size=[{module.in_channels},{h},{w}]"
            )
        elif isinstance(module, nn.Linear) and module.in_features != c * h * w:
            detail = (
                f"sizes disagree: input_size gives C*H*W = {c}*{h}*{w} = {c * h * w} values but the first layer "
                f"({layer_name}, a Linear) takes {module.in_features}; pass the [C,H,W] the network was trained on"
            )
    if not detail:
        detail = f"the network fails on images of that size ({str(error).splitlines()[0]})"
    return UserError(f"input_size={list(input_size)} does not fit the network: {detail}")


def missing_preprocessing_message(source: str, missing: list[str], info: DatasetInfo) -> str:
    """What to pass when the source has no pretrained configuration: an example for this dataset only."""
    channels = info.image_shape[0]
    mean, std = COMMON_NORMALIZATION.get(info.name, ([0.5] * channels, [0.5] * channels))
    fmt = ",".join
    return (
        f"source={source} has no pretrained configuration to take {', '.join(missing)} from: pass input_size=[C,H,W] "
        f"mean=[...] std=[...] as the model was trained, e.g. for a {info.name} model at its own size: "
        f"input_size={list(info.image_shape)} mean=[{fmt(map(str, mean))}] std=[{fmt(map(str, std))}]; "
        f"mean=[{fmt(['0'] * channels)}] std=[{fmt(['1'] * channels)}] if it takes images in [0, 1]"
    )


def upsampling_warning(input_size: list[int], info: DatasetInfo, origin: str) -> str | None:
    """A network input much larger than the images (timm's 224 px default on 28 px digits) costs time for nothing
    when the model was trained at the images' size: say so, with the factor, before the slow part."""
    factor = max(input_size[1] / info.image_shape[1], input_size[2] / info.image_shape[2])
    if factor < UPSAMPLING_WARNING:
        return None
    return (
        f"input_size={input_size} ({origin}) upsamples the {info.image_shape[1]}x{info.image_shape[2]} images of "
        f"{info.name} {factor:.1f}x per side: every forward pass costs about {factor**2:.0f}x the pixels. If the "
        f"model was trained at the images' size, pass input_size={[input_size[0], *info.image_shape[1:]]}"
    )


def quality_warnings(accuracy: float, n_test: int, n_classes: int, slope: float, nll: tuple[float, float]) -> list[str]:
    """Numbers that say the imported model cannot be of use as it is: accuracy within noise of chance, a flat
    calibrated readout, a calibration that makes the test NLL worse."""
    warnings = []
    chance = 1.0 / n_classes
    noise = 3 * math.sqrt(chance * (1 - chance) / max(n_test, 1))
    if accuracy <= chance + noise:
        warnings.append(
            f"test accuracy {100 * accuracy:.2f}% is at chance for {n_classes} classes ({100 * chance:.2f}% "
            f"+- {100 * noise:.2f}%): are these the trained weights, and the preprocessing the model was trained with?"
        )
    if abs(slope) < SLOPE_FLOOR:
        warnings.append(
            f"calibration slope {slope:.3g}: the calibrated probabilities are nearly constant, so synthesis cannot "
            "push them apart (expect no controversial stimuli)"
        )
    before, after = nll
    if after > before:
        warnings.append(
            f"the calibration makes the test NLL worse ({before:.4g} -> {after:.4g}): try another calibration= "
            "or more calibration_images"
        )
    return warnings


@torch.no_grad()
def probe(net: nn.Module, input_size: list[int]) -> torch.Tensor:
    """Two random images of ``input_size`` through ``net`` in eval mode (batch norms keep their statistics); a
    failure becomes ``input_size_error``."""
    training = net.training
    try:
        return net.eval()(torch.rand(2, *input_size, generator=torch.Generator().manual_seed(0)))
    except RuntimeError as error:
        raise input_size_error(net, input_size, error) from None
    finally:
        net.train(training)
