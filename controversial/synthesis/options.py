"""The ``synthesis:`` and ``optimizer:`` option groups of ``synthesize.py``, and the registries they choose from.

Torch-free on purpose (see :mod:`controversial.registry`): the objective and the image parametrisation
are chosen by name, and the names are checked before any model is loaded. :func:`synthesize_batch`
(``synthesis/engine.py``) takes these groups as they are.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal, Protocol

from pydantic import AfterValidator, ConfigDict, Field, field_validator

from controversial.errors import UserError
from controversial.options import Count, Fraction, Options, Probability
from controversial.registry import Registry

if TYPE_CHECKING:
    import torch


class Objective(Protocol):
    """What synthesis maximises: one value per batch element from the calibrated logits of the N models
    (one (batch, classes) tensor each) and the (batch, N) target classes; the options carry its settings.

    Synthesis against ensembles of trained instances passes ``groups=`` (the model each logits tensor is an
    instance of, targets then having one column per model); an objective without that keyword serves pairs
    of single checkpoints only."""

    def __call__(self, logits: list[torch.Tensor], targets: torch.Tensor, options: SynthesisOptions) -> torch.Tensor:
        """(batch,) values; higher is more controversial."""
        ...


class Parametrization(Protocol):
    """Maps unconstrained parameters, which the optimiser moves, to images in [0, 1] and back."""

    def from_images(self, images: torch.Tensor) -> torch.Tensor:
        """The parameters a synthesis starts from, one row per start image: parameters that reproduce
        ``images`` (up to a clamp away from exactly 0 and 1), or the closest the parametrisation can express
        (cppn), or a draw from its prior seeded by the image (generator). A row depends on its image only."""
        ...

    def to_images(self, params: torch.Tensor) -> torch.Tensor:
        """The (N, C, H, W) images in [0, 1] of these parameters."""
        ...


@dataclass(frozen=True)
class MethodRun:
    """Everything a synthesis method gets for one batch besides the models, targets, starts and ``synthesis:``
    options: the batch's seed, the other option groups (a method uses the one that is its own), the dataset's
    name, the task's hooks, and ``groups`` (``groups[i]``: the model, i.e. target column, of instance
    ``models[i]`` when the models are ensembles of trained instances, see ``objectives.py``; None for one
    checkpoint each). ``on_step(step, n_active)`` reports progress, ``on_scores(step, hard)`` the hard scores of
    a step, ``on_finished(index, finished)`` each element that leaves the batch early."""

    seed: int
    optimizer: OptimizerOptions
    diffusion: DiffusionOptions
    dataset: str
    on_step: Callable[[int, int], None] | None = None
    on_scores: Callable[[int, torch.Tensor], None] | None = None
    on_finished: Callable[[int, Any], None] | None = None
    groups: Sequence[int] | None = None


class SynthesisMethod(Protocol):
    """Makes one batch of stimuli from its starts (``initial_images``: the method's own kind of start, e.g.
    uniform noise images for gradient ascent, Gaussian noise for a diffusion sampler). Returns an
    ``engine.BatchResult``."""

    def __call__(
        self,
        models: Sequence[Any],
        targets: torch.Tensor,
        initial_images: torch.Tensor,
        options: SynthesisOptions,
        run: MethodRun,
    ) -> Any:
        """The batch's ``BatchResult``."""
        ...


OBJECTIVES: Registry[Objective] = Registry("objective", builtins={"lse": "controversial.synthesis.objectives"})
"""Objectives by name (``synthesis.objective``); ``lse`` is the paper's LogSumExp score (Eq. 4)."""
ObjectiveName = Annotated[str, AfterValidator(OBJECTIVES.check)]

ParametrizationBuilder = Callable[[tuple[int, int, int], "SynthesisOptions"], Parametrization]
PARAMETRIZATIONS: Registry[ParametrizationBuilder] = Registry(
    "parametrization",
    builtins={
        "pixel": "controversial.synthesis.parametrization",
        "fourier": "controversial.synthesis.parametrization",
        "cppn": "controversial.synthesis.cppn",
        "generator": "controversial.synthesis.latent",
    },
)
"""``builder(image_shape, options) -> Parametrization``, by name (``synthesis.parametrization``)."""
ParametrizationName = Annotated[str, AfterValidator(PARAMETRIZATIONS.check)]


class GeneratorOptions(Options):
    """The generator whose latent space ``parametrization=generator`` searches (``synthesis/generators.py``)."""

    name: str | None = Field(
        None,
        description="a bundled generator <dataset>/<name> (models/generators/, e.g. mnist/vae) or "
        "python:<module>:<callable> (your own; imported only under the python: source rule)",
    )
    weights: str | None = Field(None, description="python: only: a state-dict file for it (tensors only)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="python: only: keyword arguments of the callable")
    latent_dim: int | None = Field(
        None, ge=1, description="python: only: the size of its code (default: the module's latent_dim attribute)"
    )
    truncation: float = Field(
        2.0, gt=0, description="each code coordinate is t * tanh(w / t): the code stays within +-t prior s.d."
    )
    residual: float = Field(
        0.0,
        ge=0,
        le=1,
        description="a pixel residual of at most this much (of the [0, 1] range) on the "
        "generator's image; 0: the generator's images only",
    )


METHODS: Registry[SynthesisMethod] = Registry(
    "synthesis method",
    builtins={"gradient": "controversial.synthesis.engine", "diffusion": "controversial.synthesis.diffusion"},
)
"""How a batch of stimuli is made, by name (``synthesis.method``): ``gradient`` ascent on the image (the paper's),
or ``diffusion``, a guided DDIM sampler of an image prior."""
MethodName = Annotated[str, AfterValidator(METHODS.check)]
EnsembleStrategy = Literal["joint", "round_robin"]


class SynthesisOptions(Options):
    """How one batch of stimuli is optimised; ``synthesize.py``'s ``synthesis:`` block."""

    method: MethodName = Field(
        "gradient",
        description=f"by name: {', '.join(METHODS.names())} (gradient: ascent on the pixels, the paper's; "
        "diffusion: a DDIM sampler steered by the objective, options in diffusion:)",
    )

    objective: ObjectiveName = Field(
        "lse", description=f"what is maximised, by name: {', '.join(OBJECTIVES.names())} (lse: the paper's Eq. 4)"
    )
    sharpness: float = Field(
        1.0, gt=0, description="LogSumExp sharpness of the smooth score (the paper's alpha in Eq. 4)"
    )
    max_steps: Count = Field(1000, description="optimisation steps per attempt at most")
    patience: int = Field(10, ge=0, description="converged after more than this many quiet steps ...")
    tolerance_levels: float = Field(
        0.5, ge=0, description="... in which no pixel moves more than this many 8-bit levels"
    )
    threshold: Probability = Field(0.75, description="accept when the hard score of the 8-bit image reaches this")
    stop_score: Probability | None = Field(0.9, description="stop an image early at this hard score; null: never")
    stall_steps: Count | None = Field(
        None, description="stop an image whose watched score has not gained stall_gain in this many steps; null: never"
    )
    stall_gain: float = Field(0.01, gt=0, description="the gain in the watched score that resets the stall count")
    stall_on: Literal["hard", "smooth"] = Field(
        "hard", description="the watched score: hard (Eq. 2, a probability) | smooth (the objective)"
    )
    ensemble: EnsembleStrategy = Field(
        "joint",
        description="with model_a/model_b.instances: joint (every instance at every step) | round_robin (one "
        "instance per model per step, in turn: a single checkpoint's cost per step; gradient method only)",
    )
    parametrization: ParametrizationName = Field(
        "pixel",
        description=f"by name: {', '.join(PARAMETRIZATIONS.names())} (pixel: sigmoid; fourier: decorrelated; "
        "cppn: a coordinate network; generator: a generator's latent code)",
    )
    fourier_decay: float = Field(1.0, ge=0, description="spectral decay of the Fourier parametrisation")
    jitter: int = Field(0, ge=0, description="random circular shift of up to this many pixels per step")
    scale: float = Field(
        0.0, ge=0, lt=1, description="random zoom by a factor in [1 - scale, 1 + scale] per step (e.g. 0.1); 0: none"
    )
    rotate: float = Field(0.0, ge=0, le=180, description="random rotation of up to this many degrees per step; 0: none")
    cppn_layers: Count = Field(8, description="hidden layers of the CPPN parametrisation")
    cppn_width: Count = Field(24, description="units per hidden layer of the CPPN parametrisation")
    generator: GeneratorOptions = Field(
        default_factory=GeneratorOptions, description="the generator of parametrization=generator"
    )
    classes: list[int | str] | None = Field(
        None,
        min_length=2,
        description="synthesize only the cells among these classes (the dataset's class names or indices, at "
        "least 2: |S| x (|S|-1) cells); null: every class",
    )
    precision: Literal["fp32", "bf16", "auto"] = Field(
        "fp32",
        description="fp32 | bf16 (the models' forward/backward in the steps under bfloat16 autocast; families "
        "that declare bfloat16_synthesis = False stay fp32; scores for acceptance always fp32) | auto (bf16 where "
        "the device has bfloat16 in hardware)",
    )
    torch_compile: bool = Field(
        False,
        description="wrap each model's network in torch.compile(dynamic=True) for the run; the first steps "
        "compile for minutes, and on the CPUs measured it did not pay (docs/benchmarks.md): try it on a GPU",
    )


def chosen_classes(classes: list[int | str] | None, class_names: tuple[str, ...]) -> tuple[int, ...]:
    """The class indices ``synthesis.classes`` names, in the dataset's order (every class when null).

    An entry is a class name, else an index; the indices in manifests stay the dataset's, so a subset's
    cells are the same cells (and the same noise starts) as in a run of every class."""
    if classes is None:
        return tuple(range(len(class_names)))
    allowed = f"the dataset's class names ({', '.join(class_names)}) or indices 0..{len(class_names) - 1}"
    chosen: list[int] = []
    for entry in classes:
        if str(entry) in class_names:
            index = class_names.index(str(entry))
        elif isinstance(entry, int) and 0 <= entry < len(class_names):
            index = entry
        else:
            raise UserError(f"synthesis.classes: {entry!r} is not a class of this dataset; allowed: {allowed}")
        if index in chosen:
            raise UserError(f"synthesis.classes: class {class_names[index]!r} is listed twice")
        chosen.append(index)
    if len(chosen) < 2:
        raise UserError(f"synthesis.classes: at least 2 classes are needed for a cell; allowed: {allowed}")
    return tuple(sorted(chosen))


OptimizerFactory = Callable[[list["torch.Tensor"]], "torch.optim.Optimizer"]


class OptimizerOptions(Options):
    """Any torch.optim class by ``_target_``; the other keys are its keyword arguments. The defaults are the
    paper's: Adam, lr 0.05, betas (0.9, 0.999)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    target: str = Field("torch.optim.Adam", alias="_target_", description="optimizer class, e.g. torch.optim.Adam")
    lr: float = Field(0.05, gt=0, description="learning rate of the image parameters")
    betas: tuple[float, float] | None = Field(
        (0.9, 0.999), description="Adam's moment decays; null for an optimizer that takes none (e.g. SGD)"
    )

    @field_validator("target")
    @classmethod
    def _importable(cls, value: str) -> str:
        module, _, name = value.rpartition(".")
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            raise UserError(f"{value!r} is not an importable class; e.g. torch.optim.Adam") from None
        return value

    def factory(self) -> OptimizerFactory:
        """``factory(params)`` builds the optimizer."""
        module, _, name = self.target.rpartition(".")
        betas = {} if self.betas is None else {"betas": self.betas}
        return partial(getattr(importlib.import_module(module), name), lr=self.lr, **betas, **(self.model_extra or {}))


class DiffusionOptions(Options):
    """The guided DDIM sampler of ``synthesis.method=diffusion``; ``synthesize.py``'s ``diffusion:`` block."""

    model: str = Field(
        "bundled",
        description="the image prior: bundled (models/diffusion/<dataset>/ddpm) or the path of a diffusers folder "
        "(a UNet2DModel saved with save_pretrained, or a pipeline folder with unet/ and scheduler/)",
    )
    guidance_scale: float = Field(
        0.05,
        ge=0,
        description="s, how hard the objective steers (under guidance=clean: the RMS move of the clean estimate "
        "per step, in the [-1, 1] pixel units of the prior); 0: unguided",
    )
    guidance: Literal["noise", "clean"] = Field(
        "clean",
        description="noise: classifier guidance, eps - s sqrt(1 - abar_t) grad_{x_t} f(x0_hat) through the UNet | "
        "clean: the clean estimate moves by s times the unit-RMS gradient of f (on x0_hat) per step and the DDIM "
        "step keeps its noise direction (manifold-preserving guidance; no UNet backward)",
    )
    guide_until: Probability | None = Field(
        0.9,
        description="guide an image only while the hard score of its clean estimate is below this: once there, the "
        "prior alone takes the step, keeping the image closer to it; null: guide every step",
    )
    sampling_steps: Count = Field(50, description="DDIM steps from noise to image")
    recurrence: Count = Field(
        1, description="universal guidance's k: each step is taken k times, re-noising to the step's level in between"
    )
    eta: Fraction = Field(
        1.0,
        description="DDIM's eta: the share of each step's noise drawn fresh (0: deterministic DDIM; 1: DDPM-like "
        "ancestral steps, whose fresh noise lets the prior undo some of what guidance pushed off its manifold)",
    )
