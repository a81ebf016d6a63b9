"""Typed settings of every command: the one place that says what each option means and which values it takes.

The YAML files in ``conf/`` hold the defaults; these schemas validate the composed config before a
command does any work (ranges, allowed values, combinations), and ``--help`` is generated from their
descriptions. Tasks receive these objects, never a DictConfig.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from controversial.datasets import DATASETS
from controversial.options import (
    DEVICE_PATTERN,
    Count,
    Fraction,
    Options as Settings,
    Probability,
    Seed,
    one_of,
    ordered_range,
)
from controversial.records.names import Scheme
from controversial.synthesis.stimuli import Inversion
from controversial.zoo.train_settings import AUGMENTATION_NAMES, CALIBRATION_METHODS, TrainSettings

MIRROR_SYMMETRIC_DATASETS = tuple(name for name, info in DATASETS.items() if info.mirror_symmetric)


@dataclass(frozen=True)
class Invocation:
    """Where a task writes and how it was called (for its records); the entry point fills it in."""

    out_dir: Path
    command: str = ""
    multirun: bool = False


class DataSettings(Settings):
    root: str = Field(description="data root with MNIST/ and cifar10/ (default: $CONTROVERSIAL_DATA_ROOT, else ./data)")
    download: bool = Field(description="fall back to torchvision's download when the data root lacks a dataset")


class ModelDataSettings(Settings):
    root: str = Field(description="data root; the KDE models read their training images from here")


class TrainOptions(Settings):
    method: str = Field("supervised", description="training method (a key of zoo.training.TRAINING_METHODS)")
    epochs: int = Field(3, ge=0, description="passes over the training set (0: methods without epochs)")
    batch_size: Count = Field(128, description="images per optimisation step")
    lr: float = Field(1e-3, gt=0, description="learning rate")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay")
    seed: Seed = 0
    max_shift: int = Field(0, ge=0, description="random translation augmentation, in pixels")
    augment: str = Field("shift", description=f"how max_shift is applied: {', '.join(AUGMENTATION_NAMES)}")
    extra: dict[str, Any] = Field(default_factory=dict, description="method-specific settings")

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        # Imported here, not at the top: the registry needs torch (and families may add to it), while
        # commands that never train or load a model (the study server) read these settings too.
        from controversial.zoo.training import TRAINING_METHODS

        return one_of(value, TRAINING_METHODS)

    @field_validator("augment")
    @classmethod
    def _known_augment(cls, value: str) -> str:
        return one_of(value, AUGMENTATION_NAMES)

    def typed(self) -> TrainSettings:
        return TrainSettings(**self.model_dump())


class ModelSettings(Settings):
    name: str = Field(description="model name (conf/model/<name>.yaml)")
    dataset: str = Field(description=f"dataset the model was trained on: {', '.join(DATASETS)}")
    arch: str = Field(description="registered architecture")
    arch_kwargs: dict[str, Any] = Field(default_factory=dict, description="architecture constructor arguments")
    calibration: str = Field("cross_entropy", description=f"readout calibration: {', '.join(CALIBRATION_METHODS)}")
    checkpoint: str | None = Field(None, description="checkpoint file (relative: to the working directory)")
    test_time_flip: bool = Field(
        False,
        description="read out the mean logits of the image and its mirror image (test-time augmentation; "
        "training sees single views); only for datasets with mirror-symmetric classes: "
        f"{', '.join(MIRROR_SYMMETRIC_DATASETS)}",
    )
    paper_name: str = ""
    description: str = ""
    differences: str = ""
    synthesis_init: Literal["noise", "test_image"] = Field(
        "noise",
        description="where synthesis starts under init=auto: noise, or test_image for a model whose input "
        "gradient leads nowhere from uniform noise (the JEM)",
    )
    train: TrainOptions = Field(default_factory=TrainOptions)

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        return one_of(value, DATASETS)

    @field_validator("calibration")
    @classmethod
    def _known_calibration(cls, value: str) -> str:
        return one_of(value, CALIBRATION_METHODS)

    @model_validator(mode="after")
    def _flip_only_where_classes_are_symmetric(self) -> ModelSettings:
        if self.test_time_flip and self.dataset not in MIRROR_SYMMETRIC_DATASETS:
            raise ValueError(
                f"model {self.name}: test_time_flip is for datasets whose classes look the same mirrored "
                f"({', '.join(MIRROR_SYMMETRIC_DATASETS)}), not {self.dataset}"
            )
        return self


class WandbSettings(Settings):
    mode: Literal["offline", "online", "disabled"] = Field(
        description="offline: <run dir>/wandb, no network; online; disabled (default: $WANDB_MODE, else offline)"
    )
    project: str = Field(description="wandb project")
    group: str | None = Field(None, description="groups a sweep's runs (experiments set it)")


class OptimizerSettings(BaseModel):
    """Any torch.optim class by ``_target_``; the other keys are its keyword arguments."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    target: str = Field(alias="_target_", description="optimizer class, e.g. torch.optim.Adam")
    lr: float = Field(gt=0, description="learning rate of the image parameters")

    @field_validator("target")
    @classmethod
    def _importable(cls, value: str) -> str:
        module, _, name = value.rpartition(".")
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            raise ValueError(f"{value!r} is not an importable class; e.g. torch.optim.Adam") from None
        return value

    def factory(self) -> partial:
        """``factory(params)`` builds the optimizer."""
        module, _, name = self.target.rpartition(".")
        return partial(getattr(importlib.import_module(module), name), lr=self.lr, **(self.model_extra or {}))


class SynthesisOptions(Settings):
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
        "hard", description="the watched score: hard (Eq. 2, a probability) | smooth (Eq. 4, in logit units)"
    )
    parametrization: Literal["pixel", "fourier"] = Field(
        "pixel", description="pixel (sigmoid) | fourier (decorrelated)"
    )
    fourier_decay: float = Field(1.0, ge=0, description="spectral decay of the Fourier parametrisation")
    jitter: int = Field(0, ge=0, description="random circular shift of up to this many pixels per step")
    precision: Literal["fp32", "bf16", "auto"] = Field(
        "fp32",
        description="fp32 | bf16 (the models' forward/backward in the steps under bfloat16 autocast; families "
        "that declare bfloat16_synthesis = False stay fp32; scores for acceptance always fp32) | auto (bf16 where "
        "the device has bfloat16 in hardware)",
    )


class SynthesizeSettings(Settings):
    model_a: ModelSettings = Field(description="model A (a name from conf/model/)")
    model_b: ModelSettings = Field(description="model B, of the same dataset")
    seed: Seed = 0
    seeds_per_cell: Count = Field(1, description="independent starts per cell in the first attempt")
    max_attempts: Count = Field(5, description="failed cells are retried with new seeds until this many attempts")
    retry_lookahead: bool = Field(
        True, description="a retry also runs later attempts' seeds while the batch stays small"
    )
    init: Literal["auto", "noise", "test_image"] = Field(
        "auto",
        description="auto (noise, unless a model declares synthesis_init: test_image) | noise (uniform) | "
        "test_image (random test images)",
    )
    device: str = Field("auto", pattern=DEVICE_PATTERN, description="auto (GPU when present) | cpu | cuda[:k]")
    synthesis: SynthesisOptions = Field(default_factory=SynthesisOptions)
    optimizer: OptimizerSettings
    data: DataSettings
    progress: bool = Field(True, description="progress bar on a terminal, periodic lines in a log file")
    output_dir: str | None = Field(None, description="re-enter a run dir to resume it; default: a new timestamped one")
    sweep_dir: str | None = Field(None, description="the multirun folder; set it so a re-run resumes the sweep")
    wandb: WandbSettings
    experiment_name: str | None = Field(None, description="set by experiment=<name>")
    models: list[str] | None = Field(None, description="set by experiment=<name>: the models whose pairs are swept")

    @model_validator(mode="after")
    def _a_pair(self) -> SynthesizeSettings:
        return _check_pair(self)

    @property
    def start(self) -> Literal["noise", "test_image"]:
        """The initialisation this run uses: ``init`` itself, or under ``auto`` what the models declare."""
        if self.init != "auto":
            return self.init
        declared = {self.model_a.synthesis_init, self.model_b.synthesis_init}
        return "test_image" if "test_image" in declared else "noise"


class RankNaturalSettings(Settings):
    model_a: ModelSettings = Field(description="model A (a name from conf/model/)")
    model_b: ModelSettings = Field(description="model B, of the same dataset")
    top_k: Count = Field(1, description="images exported per cell (ordered class pair)")
    split: Literal["test", "train"] = Field("test", description="dataset split to rank")
    limit: Count | None = Field(None, description="score only the first N images; null: all")
    threshold: Probability = Field(0.75, description="'accepted' column: the image's hard score reaches this")
    sharpness: float = Field(
        1.0, gt=0, description="LogSumExp sharpness of the smooth_score column (the paper's alpha in Eq. 4)"
    )
    batch_size: Count = Field(500, description="images per forward pass")
    device: str = Field("auto", pattern=DEVICE_PATTERN, description="auto (GPU when present) | cpu | cuda[:k]")
    output_dir: str | None = Field(None, description="default: a new timestamped folder")
    progress: bool = Field(True, description="progress bar on a terminal, periodic lines in a log file")
    data: DataSettings

    @model_validator(mode="after")
    def _a_pair(self) -> RankNaturalSettings:
        return _check_pair(self)


class TrainCommandSettings(Settings):
    model: ModelSettings = Field(description="the model to train (a name from conf/model/)")
    data: DataSettings
    models_dir: str = Field(description="checkpoints go to <models_dir>/<dataset>/<name>.pt")
    float16: bool = Field(True, description="store weights in float16 (half the size)")
    device: str = Field("cpu", description="cpu | cuda (a GPU; the fast CIFAR-10 recipe only, same draws)")
    update_model_card: bool = Field(True, description="regenerate <models_dir>/README.md")
    resume: bool = Field(True, description="continue from resume_file; false: delete it and start over")
    resume_file: str = Field(description="per-epoch training state of long runs")

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        return one_of(value, ("cpu", "cuda"))


class BootstrapSettings(Settings):
    n_resamples: int = Field(100_000, ge=0, description="participant x stimulus resamples (0: no inference)")
    subset_resamples: int = Field(10_000, ge=0, description="for the natural-only and controversial-only subsets")
    other_subset_resamples: int = Field(0, ge=0, description="for every targeted-pair and targeted-model subset")
    chunk_size: Count = Field(
        10_000, description="resamples per matrix product (memory bound; results do not depend on it)"
    )
    include_copies: bool = Field(False, description="lower ceiling: a participant's own copies count as 'others'")
    ci_level: float = Field(0.95, gt=0, lt=1, description="confidence level of the percentile intervals")
    alpha: float = Field(0.05, gt=0, lt=1, description="family-wise level, Holm-Sidak over all pairs")


class ErrorConsistencySettings(Settings):
    enabled: bool = Field(True, description="compute error consistency (kappa) between participants and models")
    n_resamples: int = Field(1000, ge=0, description="trial bootstrap for per-pair kappa CIs (0: skip)")
    null_band_grid: int = Field(200, ge=2, description="accuracy grid per axis for the independent-observer band")
    null_band_repeats: Count = Field(5, description="repeats per grid point of the band")


class NoiseModel(Settings):
    """How simulated participants rate: a generating model (or mixture) plus per-participant noise and gain."""

    true_model: str = Field("sim3", description="the generating model, or a mixture sim3:0.7+sim5:0.3")
    noise_sd: tuple[float, float] = Field((0.8, 1.6), description="per-participant logit noise range")
    gain: tuple[float, float] = Field((0.7, 1.3), description="per-participant gain range")

    @field_validator("true_model")
    @classmethod
    def _mixture(cls, value: str) -> str:
        parse_mixture(value)
        return value

    _range = field_validator("noise_sd", "gain")(lambda bounds: ordered_range(bounds))


class SimulatedModelsSettings(Settings):
    n_models: int = Field(9, ge=2, description="simulated models")
    dataset: str = Field("MNIST", description="class names of the simulated stimuli: MNIST | CIFAR10")
    stimuli_per_pair: Count = Field(20, description="controversial stimuli per model pair")
    natural_per_class: int = Field(10, ge=0, description="natural images per class")


class SimulatedStudySettings(SimulatedModelsSettings, NoiseModel):
    n_participants: int = Field(30, ge=2, description="simulated participants")


class AnalyzeSettings(Settings):
    human_ratings: str | list[str] | None = Field(
        None,
        description="PNAS long-format ratings CSV, or a list (replications split by subject code and pooled); "
        "null: a SIMULATED study (or, with choices, error consistency only)",
    )
    model_responses: str | list[str] | dict[str, str | list[str]] | None = Field(
        None, description="PNAS model-format CSV, a list (merged), or a mapping replication -> file(s)"
    )
    choices: str | None = Field(
        None,
        description="folder (one dataset), folder of dataset folders, or glob of "
        "model-vs-human trial CSVs for error consistency",
    )
    choices_humans: str = Field("^subject", description="regex on `subj` marking the human decision makers")
    seed: Seed = 0
    rating_scale: list[float] = Field(description="the rating levels, ascending, in [0, 1]")
    exclude_repetitions: bool = Field(True, description="score first presentations only; false: repeats are errors")
    exclude_participants: list[str] = Field(default_factory=list, description="participant ids to drop")
    min_natural_accuracy: Fraction | None = Field(None, description="drop participants below this natural accuracy")
    attention_checks: str | None = Field(None, description="the study server's attention.csv")
    min_attention_passed: Fraction | None = Field(None, description="drop participants below this attention pass rate")
    quality_flags: str | None = Field(None, description="the study server's participants.csv (subject, ..., flags)")
    exclude_flags: list[str] = Field(
        default_factory=list, description="drop participants with any of these flags, e.g. [too_fast, straight_lining]"
    )
    measures: list[Literal["pearson", "spearman", "kendall"]] = Field(min_length=1, description="correlation measures")
    tie_rule: Literal["random", "first", "abstain"] = Field("random", description="arg-max ties in ratings")
    c_exp_one: Literal["nan", "one"] = Field("nan", description='kappa when c_exp = 1: "nan" | "one"')
    bootstrap: BootstrapSettings = Field(default_factory=BootstrapSettings)
    error_consistency: ErrorConsistencySettings = Field(default_factory=ErrorConsistencySettings)
    figures: bool = Field(True, description="draw the figures")
    simulate: SimulatedStudySettings = Field(default_factory=SimulatedStudySettings)

    @field_validator("choices_humans")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a regular expression: {error}") from None
        return value

    @field_validator("rating_scale")
    @classmethod
    def _scale(cls, value: list[float]) -> list[float]:
        if len(value) < 2 or sorted(set(value)) != list(value) or not 0 <= value[0] <= value[-1] <= 1:
            raise ValueError("needs at least two distinct ascending levels in [0, 1], e.g. [0, 0.25, 0.5, 0.75, 1]")
        return value

    @field_validator("human_ratings", "model_responses")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, (list, dict)) and not value:
            raise ValueError("an empty list or mapping; give at least one file (or null)")
        return value

    @model_validator(mode="after")
    def _inputs(self) -> AnalyzeSettings:
        if self.human_ratings is not None and self.model_responses is None:
            raise ValueError("human_ratings is set but model_responses is not; pass model_responses=PATH")
        return self


class EvaluateSettings(Settings):
    models: list[str] = Field(min_length=1, description="trained model names (models/<dataset>/<name>.pt) or .pt paths")
    dataset: str | None = Field(None, description="needed only when a model name exists for several datasets")
    models_dir: str | None = Field(None, description="default: the repository's models/")
    images: str | None = Field(
        None, description="folder of PNG stimuli; targets parsed from the file names (see naming)"
    )
    naming: Scheme = Field(
        "project", description="file-name scheme of images: project | pnas2020 (the PNAS 2020 release)"
    )
    invert: Inversion = Field("auto", description="greyscale stored dark-on-light (as displayed)? auto | true | false")
    manifests: list[str] = Field(
        default_factory=list, description="synthesis manifest.csv files; their accepted images"
    )
    include_rejected: bool = Field(False, description="also evaluate manifest rows below the acceptance threshold")
    batch_size: Count = Field(256, description="images per forward pass")
    data: ModelDataSettings

    _invert = field_validator("invert", mode="before")(lambda value: _inversion(value))

    @model_validator(mode="after")
    def _stimuli(self) -> EvaluateSettings:
        if self.images is None and not self.manifests:
            raise ValueError("no stimuli: pass images=FOLDER or manifests=[PATH,...]")
        return self


class FidelitySettings(Settings):
    images: str | None = Field(None, description="folder of the PNAS 2020 release's PNG stimuli, one experiment")
    naming: Scheme = Field("pnas2020", description="file-name scheme: project | pnas2020")
    models: list[str] | None = Field(
        None, description="our models to score; null: every model standing in for one of the paper's"
    )
    invert: Inversion = Field("auto", description="greyscale stored dark-on-light? auto | true | false")
    models_dir: str | None = Field(None, description="default: the repository's models/")
    batch_size: Count = Field(256, description="images per forward pass")
    data: ModelDataSettings

    _invert = field_validator("invert", mode="before")(lambda value: _inversion(value))

    @field_validator("models")
    @classmethod
    def _some(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("an empty list; name at least one model, or null for all")
        return value

    @model_validator(mode="after")
    def _stimuli(self) -> FidelitySettings:
        if self.images is None:
            raise ValueError("no stimuli: pass images=FOLDER (e.g. the release's experiment_1 or experiment_2 images)")
        return self


class PowerSettings(NoiseModel):
    model_responses: str | None = Field(None, description="PNAS model-format CSV; null: a SIMULATED stimulus set")
    participant_counts: list[Annotated[int, Field(ge=2)]] = Field(min_length=1, description="participant counts to try")
    n_simulations: Count = Field(40, description="simulated studies per participant count")
    n_resamples: Count = Field(1000, description="bootstrap resamples per simulated study")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level")
    target_power: float = Field(0.8, gt=0, lt=1, description="the power to reach")
    correction: Literal["holm-sidak", "none"] = Field("holm-sidak", description="multiple-comparison correction")
    reference_participants: int = Field(200, ge=2, description="simulated panel that picks the top two models")
    seed: Seed = 0
    simulate: SimulatedModelsSettings = Field(default_factory=SimulatedModelsSettings)


class OverviewSettings(Settings):
    sweep_dir: str = Field(description="a synthesis sweep folder (with <a>_vs_<b>/manifest.csv)")
    out_dir: str = Field(description="where the overview goes (default: <sweep_dir>/overview)")
    models: list[str] | None = Field(None, description="row/column order; default: the sweep's experiment list")
    fig2_class_pairs: list[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]] = Field(
        description="class a (row model) and class b (column model) of each Fig. 2"
    )
    progress: bool = Field(True, description="progress bar on a terminal, periodic lines in a log file")


class DisplaySettings(Settings):
    size: int = Field(224, ge=8, le=4096, description="displayed image size in pixels")
    resample: Literal["nearest", "bilinear", "bicubic", "lanczos"] = Field("bicubic", description="upsampling filter")
    invert_mnist: bool = Field(True, description="dark digit on light background, as in the paper")


class ExportStudySettings(Settings):
    sweep_dir: str = Field(description="a synthesize run dir or sweep (every */manifest.csv below it is read)")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="study name: letters, digits, '_', '.', '-'")
    studies_dir: str = Field("studies", description="bundles go to <studies_dir>/<name>/v<k>/")
    per_pair: int = Field(
        20, ge=10, multiple_of=10, description="controversial stimuli per model pair (multiple of 10)"
    )
    sources: list[Literal["synthetic", "natural"]] = Field(min_length=1, description="manifest sources to select from")
    natural_per_class: int = Field(10, ge=0, description="natural test images per class")
    n_repeats: int = Field(42, ge=0, description="stimuli shown a second time (test-retest reliability)")
    n_attention: int = Field(4, ge=0, description="instructional attention checks")
    n_demo: int = Field(2, ge=0, description="practice trials (natural test images, not recorded)")
    seed: Seed = 0
    display: DisplaySettings = Field(default_factory=DisplaySettings)
    title: str = Field(description="the study's title")
    attention_prompt: str = Field(description="attention-check text; {category} is replaced")
    web_source: str | None = Field(None, description="the experiment's HTML/JS/CSS; null: human_study/src")
    pilot: bool = Field(False, description="allow the placeholder consent/instruction texts; never for Prolific")
    data: DataSettings


class DesignBudget(Settings):
    trials: Count = Field(866, description="trials per participant: rated stimuli + repeats + attention checks")
    n_repeats: int = Field(42, ge=0, description="repeated presentations (test-retest; not used to score models)")
    n_attention: int = Field(4, ge=0, description="instructional attention checks")
    natural_per_class: int = Field(10, ge=0, description="natural test images in the study, per class")
    natural_candidates_per_class: int = Field(50, ge=0, description="natural test images the design chooses from")
    seeds_per_cell: Count = Field(
        1, description="accepted seeds per sweep cell the design may choose from, the most controversial first"
    )
    min_per_pair: int = Field(2, ge=0, description="every targeted model pair at least this often (a stratum)")
    class_tolerance: Fraction = Field(0.1, description="each class a target within +- this fraction of the mean")

    @model_validator(mode="after")
    def _fits(self) -> DesignBudget:
        if self.natural_candidates_per_class < self.natural_per_class:
            raise ValueError(
                f"natural_candidates_per_class={self.natural_candidates_per_class} is below natural_per_class="
                f"{self.natural_per_class}: the design needs at least as many candidates as it chooses"
            )
        if self.trials <= self.n_repeats + self.n_attention:
            raise ValueError(
                f"trials={self.trials} leaves no rated stimuli after {self.n_repeats} repeats and "
                f"{self.n_attention} attention checks"
            )
        return self


class DesignPlan(Settings):
    n_participants: int = Field(30, ge=2, description="participants the design is optimised (and power reported) for")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level of the final test")
    power: float = Field(0.8, gt=0, lt=1, description="power the participants needed are reported for")
    correction: Literal["holm-sidak", "none"] = Field(
        "holm-sidak", description="holm-sidak: Sidak over all pairs of models + lower ceiling (conservative)"
    )
    truths: list[str] = Field(default_factory=list, description="models that may be the truth; []: all")
    noise_sd: tuple[float, float] = Field((0.8, 1.6), description="participant logit noise range (no pilot)")
    gain: tuple[float, float] = Field((0.7, 1.3), description="participant gain range (no pilot)")
    pilot_ratings: str | None = Field(None, description="pilot ratings (PNAS format): fit the noise model to them")
    pilot_model_responses: str | None = Field(None, description="model responses for the pilot's images")
    n_panel: int = Field(
        256, ge=2, description="simulated reference participants per truth (fewer: the optimiser fits their noise)"
    )
    shared_sd: float | Literal["fit"] = Field(
        0.0,
        description="sd of a deviation from the truth that people share (logit units; integrated out); 0: none; "
        "fit: from the pilot or the earlier batches, by how much more people agree than the best model explains",
    )
    criterion: Literal["maximin", "relative", "participants", "total"] = Field(
        "participants",
        description="maximin: the weakest pairwise z; relative: each truth's weakest z as a fraction of the "
        "balanced design's (no truth worse off than under the paper's kind of design); participants: the weakest "
        "z with each truth's taken at plan.fraction of the participants the balanced design needs for it; total: "
        "the fewest predicted participants averaged over truths, none more than under the balanced design",
    )
    fraction: float = Field(
        0.5, gt=0, le=1, description="criterion participants: each truth planned for this share of its balanced need"
    )
    cap_rule: Literal["participants", "ratio"] = Field(
        "ratio",
        description="criterion total: what a truth needing more than under the balanced design costs; participants: "
        "3 of the mean per participant over; ratio: 3 times the mean balanced need per 100 % over, whatever the "
        "truth's own need (protects truths the balanced design identifies with the minimum)",
    )
    temperature: float = Field(0.5, gt=0, description="smooth minimum over pairs, in z units")
    max_exchanges: int = Field(200, ge=0, description="exchange steps after greedy selection")

    _range = field_validator("noise_sd", "gain")(lambda bounds: ordered_range(bounds))

    @field_validator("shared_sd", mode="before")
    @classmethod
    def _shared_sd(cls, value: Any) -> float | Literal["fit"]:
        if value == "fit":
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = -1.0
        if not number >= 0:
            raise ValueError(f"{value!r} is neither a number >= 0 (logit units) nor 'fit'")
        return number

    @model_validator(mode="after")
    def _pilot(self) -> DesignPlan:
        if (self.pilot_ratings is None) != (self.pilot_model_responses is None):
            raise ValueError("plan.pilot_ratings and plan.pilot_model_responses go together: pass both or neither")
        return self


class PreviousBatch(Settings):
    bundle: str = Field(description="an earlier batch's bundle (studies/<name>/v<k>)")
    responses: str = Field(description="that batch's responses.csv (the study server's export)")


class AdaptiveSettings(Settings):
    previous: list[PreviousBatch] = Field(default_factory=list, description="earlier batches; []: batch 1")
    screen_alpha: float = Field(
        0.05, gt=0, lt=1, description="a model stays a candidate truth unless this significantly below the leader"
    )
    interim_alpha: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="each interim look (before every batch after the first) stops the study when one model is "
        "above every other at this alpha; spent out of plan.alpha, the final test gets the rest; 0: no early stop",
    )
    n_resamples: int = Field(
        100_000, ge=1000, description="bootstrap resamples of the screen and the interim look (analyze.py's default)"
    )


class DesignStudySettings(Settings):
    sweep_dir: str = Field(description="a synthesize run dir or sweep: its accepted cells are the candidates")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="study name: letters, digits, '_', '.', '-'")
    models: list[str] = Field(min_length=2, description="the models to compare (trained names or .pt paths)")
    models_dir: str | None = Field(None, description="default: the repository's models/")
    studies_dir: str = Field("studies", description="bundles go to <studies_dir>/<name>/v<k>/")
    sources: list[Literal["synthetic", "natural"]] = Field(min_length=1, description="manifest sources eligible")
    budget: DesignBudget = Field(default_factory=DesignBudget)
    plan: DesignPlan = Field(default_factory=DesignPlan)
    adaptive: AdaptiveSettings = Field(default_factory=AdaptiveSettings)
    display: DisplaySettings = Field(default_factory=DisplaySettings)
    title: str = Field(description="the study's title")
    attention_prompt: str = Field(description="attention-check text; {category} is replaced")
    n_demo: int = Field(2, ge=0, description="practice trials (natural test images, not recorded)")
    seed: Seed = 0
    batch_size: Count = Field(256, description="images per forward pass when the models rate the candidates")
    web_source: str | None = Field(None, description="the experiment's HTML/JS/CSS; null: human_study/src")
    pilot: bool = Field(False, description="allow the placeholder consent/instruction texts; never for Prolific")
    progress: bool = Field(True, description="progress bar on a terminal, periodic lines in a log file")
    data: DataSettings

    @model_validator(mode="after")
    def _truths(self) -> DesignStudySettings:
        names = [Path(m).stem for m in self.models]
        if len(set(names)) < len(names):
            raise ValueError(f"models lists a model twice: {self.models}")
        unknown = [t for t in self.plan.truths if t not in names]
        if unknown:
            raise ValueError(f"plan.truths: {', '.join(unknown)} not among models ({', '.join(names)})")
        looks = len(self.adaptive.previous)
        if self.adaptive.interim_alpha * max(looks, 1) >= self.plan.alpha:
            raise ValueError(
                f"adaptive.interim_alpha={self.adaptive.interim_alpha:g} over {max(looks, 1)} interim look(s) leaves "
                f"nothing of plan.alpha={self.plan.alpha:g} for the final test: each look's alpha is spent out of it"
            )
        return self


class ExportCsvSettings(Settings):
    out_dir: str | None = Field(None, description="where mode=export writes its CSV files; null: the run dir")
    include_incomplete: bool = Field(False, description="also export participants who did not finish")


class RateLimitSettings(Settings):
    sessions_per_minute: float = Field(10, gt=0, description="POST /api/session per client address (token bucket)")
    burst: Count = Field(20, description="bucket size")


class QualityControlSettings(Settings):
    min_trial_rt_ms: float = Field(1500, ge=0, description='a trial is "fast" below this many milliseconds')
    max_fast_fraction: Fraction = Field(0.1, description="too_fast: more than this fraction of trials are fast")
    max_identical_run: Count = Field(10, description="straight_lining: this many consecutive identical ratings")
    min_attention_passed: Fraction = Field(1.0, description="attention_failed: passed fraction below this")


class ServeStudySettings(Settings):
    mode: Literal["serve", "export", "token"] = Field(
        "serve", description="serve the study, export the database as CSV, or write a new admin token file"
    )
    study_dir: str | None = Field(None, description="a bundle written by export_study.py (not needed for mode=token)")
    database_url: str | None = Field(None, description="null: sqlite:///<study_dir>/responses.db")
    completion_code: str | None = Field(None, description="from Prolific (default: $PROLIFIC_COMPLETION_CODE)")
    completion_url_template: str = Field(description="where finished participants are sent; {code} is replaced")
    admin_token_file: str | None = Field(
        None, description="file holding the admin token (else $STUDY_ADMIN_TOKEN; neither: /admin/* disabled)"
    )
    allow_test_ids: bool = Field(False, description="accept made-up Prolific ids (pilots, tests); never on Prolific")
    max_body_bytes: Count = Field(16384, description="larger request bodies get 413")
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    quality: QualityControlSettings = Field(default_factory=QualityControlSettings)
    host: str = Field("127.0.0.1", description="listen address; keep loopback behind a reverse proxy")
    port: int = Field(8000, ge=1, le=65535, description="listen port")
    forwarded_allow_ips: str = Field("127.0.0.1", description="the proxy's address, trusted for X-Forwarded-*")
    access_log: bool = Field(False, description="log every request")
    vendor_dir: str | None = Field(None, description="jsPsych from `npm ci`; null: human_study/node_modules")
    export: ExportCsvSettings = Field(default_factory=ExportCsvSettings)

    @model_validator(mode="after")
    def _bundle(self) -> ServeStudySettings:
        if self.mode != "token" and not self.study_dir:
            raise ValueError(f"study_dir is required for mode={self.mode}: a bundle written by export_study.py")
        return self


def _inversion(value: Any) -> Any:
    """``invert=true|false`` arrives from Hydra as a boolean; the option is the text auto | true | false."""
    return str(value).lower() if isinstance(value, bool) else value


def _check_pair(settings: SynthesizeSettings | RankNaturalSettings) -> Any:
    a, b = settings.model_a, settings.model_b
    if a.name == b.name:
        raise ValueError(
            f"model_a and model_b are both '{a.name}': a model cannot disagree with itself; "
            f"pick two different models, e.g. model_a={a.name} model_b={'vgg' if a.name != 'vgg' else 'abs'}"
        )
    if a.dataset != b.dataset:
        raise ValueError(
            f"model_a={a.name} was trained on {a.dataset} but model_b={b.name} on {b.dataset}; "
            "controversial stimuli need two models of the same dataset"
        )
    return settings


def parse_mixture(spec: str) -> dict[str, float]:
    """``"sim3"`` or ``"sim3:0.7+sim5:0.3"`` (``,`` also separates, but needs quoting for Hydra) -> weights."""
    weights = {}
    for part in spec.replace(",", "+").split("+"):
        name, _, weight = part.strip().partition(":")
        try:
            weights[name] = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"weight {weight!r} of {name!r} is not a number; use e.g. sim3:0.7+sim5:0.3") from None
        if not name or not weights[name] >= 0:
            raise ValueError(f"{part!r} needs a model name and a weight >= 0; use e.g. sim3:0.7+sim5:0.3")
    if sum(weights.values()) <= 0:
        raise ValueError("the weights sum to 0; give at least one positive weight")
    return weights


SCHEMAS: dict[str, type[Settings]] = {
    "synthesize": SynthesizeSettings,
    "rank_natural": RankNaturalSettings,
    "train": TrainCommandSettings,
    "analyze": AnalyzeSettings,
    "evaluate": EvaluateSettings,
    "power": PowerSettings,
    "overview": OverviewSettings,
    "export_study": ExportStudySettings,
    "design_study": DesignStudySettings,
    "serve_study": ServeStudySettings,
    "fidelity": FidelitySettings,
}
