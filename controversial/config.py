"""Config schemas, and the registration that makes ``model_a=abs model_b=vgg`` select model files.

Hydra's ``defaults: [model@model_a: abs]`` would turn the override ``model_a=vgg`` into a plain
string. Instead every ``conf/model/<name>.yaml`` is validated against :class:`ModelConfig` and
stored in the ConfigStore as an option of the groups ``model_a``, ``model_b`` and ``models``
(the latter for lists of more than two models). Unknown names then get Hydra's list of options.

Imported models (``import_model.py``) are described by a model file beside their checkpoint,
``<models dir>/<dataset>/<name>.yaml`` (a "sidecar"), registered the same way. The models dirs searched
are the repository's ``models/`` and the user's: those listed in ``$CONTROVERSIAL_MODELS_DIR`` (separated by
``os.pathsep``), else a per-user data folder (``user_models_dirs``) where ``import_model.py`` writes by
default. Registration runs before Hydra reads the command line, so a folder is named by the environment or
the default, not by an option.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import platformdirs
import yaml
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from pydantic import Field, field_validator, model_validator

from controversial.datasets import DATASETS, DatasetInfo, dataset_info, register_dataset
from controversial.errors import UserError
from controversial.options import Options, one_of
from controversial.untrusted import inside, safe_component
from controversial.zoo.train_options import CALIBRATIONS, TRAINING_METHODS, CalibrationName, TrainOptions

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"

# ``${if_null:${output_dir},default}``: OmegaConf's oc.select falls back only when a key is *missing*,
# not when it is null, so optional path options such as ``output_dir: null`` need this resolver.
OmegaConf.register_new_resolver("if_null", lambda value, default: default if value is None else value, replace=True)
# ``${repo:models}``: a default that points into the repository (bundled checkpoints) is absolute; every
# other relative path, given on the command line or in conf/, is relative to the working directory.
OmegaConf.register_new_resolver("repo", lambda sub="": str(REPO_ROOT / sub), replace=True)
MODEL_GROUPS = ("model_a", "model_b")
MODELS_DIR_ENV = "CONTROVERSIAL_MODELS_DIR"
SIDECAR_DATASET_KEY = "dataset_info"  # a sidecar's description of a dataset that is not built in
MIRROR_SYMMETRIC_DATASETS = tuple(name for name, info in DATASETS.items() if info.mirror_symmetric)


class ModelOptions(Options):
    """One model: its family, the dataset, the readout, and how it is trained (conf/model/<name>.yaml)."""

    name: str = Field(description="model name (conf/model/<name>.yaml)")
    dataset: str = Field(description=f"dataset the model was trained on: {', '.join(DATASETS)}")
    arch: str = Field(description="registered architecture")
    arch_kwargs: dict[str, Any] = Field(default_factory=dict, description="architecture constructor arguments")
    calibration: CalibrationName = Field(
        "cross_entropy", description=f"readout calibration: {', '.join(CALIBRATIONS.names())}"
    )
    checkpoint: str = Field(
        description="checkpoint file (relative: to the working directory); default: the bundled "
        "models/<dataset>/<name>.pt"
    )
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
    instances: list[int] | Literal["all"] | None = Field(
        None,
        description="synthesize against these trained instances (seeds) together, each of which must see its "
        "target (docs/synthesis.md, Instances); all: every trained one but the seeds in instances_except (what a "
        "sweep over models with different instances needs); default: the checkpoint alone",
    )
    purpose: Literal["classifier", "features"] = Field(
        "classifier",
        description="classifier: a model of synthesis pairs (models/<dataset>/<name>.pt); features: the dataset's "
        "fixed feature network of the naturalness measure (KID), never a model of a pair: conf/model/features/, "
        "written to models/features/<dataset>.pt with the features of a sample of test images",
    )

    @model_validator(mode="before")
    @classmethod
    def _bundled_checkpoint(cls, values: Any) -> Any:
        if isinstance(values, dict) and values.get("checkpoint") is None and "name" in values and "dataset" in values:
            return {**values, "checkpoint": str(REPO_ROOT / "models" / str(values["dataset"]) / f"{values['name']}.pt")}
        return values

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        return one_of(value, DATASETS)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        return safe_component(value, "model name")  # it names output files and folders (<a>_vs_<b>/)

    @model_validator(mode="after")
    def _flip_only_where_classes_are_symmetric(self) -> ModelOptions:
        if self.test_time_flip and self.dataset not in MIRROR_SYMMETRIC_DATASETS:
            raise UserError(
                f"model {self.name}: test_time_flip is for datasets whose classes look the same mirrored "
                f"({', '.join(MIRROR_SYMMETRIC_DATASETS)}), not {self.dataset}"
            )
        return self


def check_pair(a: ModelOptions, b: ModelOptions) -> None:
    """Two different models of one dataset (the same classes, in the same order): what a controversial pair needs."""
    if a.name == b.name:
        raise UserError(
            f"model_a and model_b are both '{a.name}': a model cannot disagree with itself; "
            f"pick two different models, e.g. model_a={a.name} model_b={'vgg' if a.name != 'vgg' else 'abs'}"
        )
    classes_a, classes_b = dataset_info(a.dataset).class_names, dataset_info(b.dataset).class_names
    if classes_a != classes_b:
        raise UserError(
            f"model_a={a.name} ({a.dataset}) tells apart the classes {list(classes_a)} but model_b={b.name} "
            f"({b.dataset}) the classes {list(classes_b)}; controversial stimuli need two models of the same "
            "dataset, whose outputs are the same classes in the same order"
        )
    if a.dataset != b.dataset:
        raise UserError(
            f"model_a={a.name} was trained on {a.dataset} but model_b={b.name} on {b.dataset}; "
            "controversial stimuli need two models of the same dataset"
        )


def model_config_files(conf_dir: Path = CONF_DIR) -> list[Path]:
    return sorted((conf_dir / "model").glob("*.yaml"))


def load_model_config(path: Path) -> ModelOptions:
    """A model YAML as validated options; a wrong key or type (``train.extra`` included) names the file."""
    try:
        options = ModelOptions.model_validate(OmegaConf.to_container(OmegaConf.load(path), resolve=True))
        TRAINING_METHODS.get(options.train.method).options(options.train.extra)
    except Exception as error:
        raise UserError(f"{path}: invalid model config: {error}") from None
    return options


def user_models_dirs() -> list[Path]:
    """The user's folders of imported models: those of $CONTROVERSIAL_MODELS_DIR when set, else one per-user data
    folder (platformdirs: ~/.local/share/controversial/models on Linux), found by every command without an
    environment variable. The first is where ``import_model.py`` writes by default."""
    listed = [Path(p).expanduser() for p in os.environ.get(MODELS_DIR_ENV, "").split(os.pathsep) if p]
    return listed or [Path(platformdirs.user_data_dir("controversial")) / "models"]


def models_dirs() -> list[Path]:
    """Where models' files are looked for: the repository's models/ (bundled), then the user's folders."""
    return [REPO_ROOT / "models", *user_models_dirs()]


def sidecar_files(dirs: Sequence[Path]) -> list[Path]:
    """The model files ``<dir>/<dataset>/<name>.yaml`` that import_model.py writes beside its checkpoints."""
    seen: dict[Path, None] = {}
    for folder in dirs:
        for path in sorted(Path(folder).glob("*/*.yaml")):
            seen.setdefault(path.resolve(), None)
    return list(seen)


def load_sidecar(path: Path) -> ModelOptions:
    """An imported model's file as validated options: its dataset registered first (a folder dataset is known by
    name from then on), its ``checkpoint`` resolved against the file's folder, which it must not leave."""
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))  # plain YAML: no ${oc.env:...} resolved from others
        if not isinstance(values, dict):
            raise UserError("not a mapping of model options")
        described = values.pop(SIDECAR_DATASET_KEY, None)
        if described is not None:
            register_dataset(DatasetInfo.from_dict(described))
        checkpoint = str(values.get("checkpoint", f"{path.stem}.pt"))
        values["checkpoint"] = str(inside(path.parent, checkpoint, "checkpoint"))  # a model file may come from others
        return ModelOptions.model_validate(values)
    except Exception as error:
        raise UserError(f"{path}: invalid model file of an imported model: {error}") from None


def register_model_options(conf_dir: Path = CONF_DIR, dirs: Sequence[Path] | None = None) -> dict[str, str]:
    """Store every model YAML, and every imported model's file found in ``dirs`` (default: ``models_dirs()``), as
    an option of model_a and model_b; returns model name -> dataset. Two files of one name are an error."""
    store = ConfigStore.instance()
    datasets: dict[str, str] = {}
    origin: dict[str, Path] = {}
    configs = [(path, load_model_config(path)) for path in model_config_files(conf_dir)]
    sidecars = [(path, load_sidecar(path)) for path in sidecar_files(models_dirs() if dirs is None else dirs)]
    for path, node in configs + sidecars:
        if node.purpose == "features":  # a feature network (KID) is never a model of a pair
            continue
        if path.stem in origin:
            raise UserError(
                f"two model files are named '{path.stem}': {origin[path.stem]} and {path}; model_a={path.stem} "
                "must name one model. Rename the imported one (import_model.py name=<another name>) or remove it"
            )
        origin[path.stem] = path
        for group in MODEL_GROUPS:
            store.store(group=group, name=path.stem, node=node.model_dump(by_alias=True))
        datasets[path.stem] = str(node.dataset)
    return datasets
