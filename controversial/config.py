"""Config schemas, and the registration that makes ``model_a=abs model_b=vgg`` select model files.

Hydra's ``defaults: [model@model_a: abs]`` would turn the override ``model_a=vgg`` into a plain
string. Instead every ``conf/model/<name>.yaml`` is validated against :class:`ModelConfig` and
stored in the ConfigStore as an option of the groups ``model_a``, ``model_b`` and ``models``
(the latter for lists of more than two models). Unknown names then get Hydra's list of options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from controversial.zoo.train_options import TRAINING_METHODS, TrainOptions

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"

# ``${if_null:${output_dir},default}``: OmegaConf's oc.select falls back only when a key is *missing*,
# not when it is null, so optional path options such as ``output_dir: null`` need this resolver.
OmegaConf.register_new_resolver("if_null", lambda value, default: default if value is None else value, replace=True)
# ``${repo:models}``: a default that points into the repository (bundled checkpoints) is absolute; every
# other relative path, given on the command line or in conf/, is relative to the working directory.
OmegaConf.register_new_resolver("repo", lambda sub="": str(REPO_ROOT / sub), replace=True)
MODEL_GROUPS = ("model_a", "model_b")


@dataclass
class ModelConfig:
    name: str
    dataset: str
    arch: str
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    calibration: str = "cross_entropy"
    checkpoint: str = "${repo:models}/${.dataset}/${.name}.pt"
    test_time_flip: bool = False  # read out the mean logits of the image and its mirror image
    paper_name: str = ""
    description: str = ""
    differences: str = ""
    synthesis_init: str = "noise"  # noise | test_image: where synthesis starts under init=auto
    # TrainOptions is a pydantic model, which OmegaConf cannot hold as a schema: its defaults go in as a
    # plain mapping, and load_model_config validates the merged block against TrainOptions itself.
    train: Any = field(default_factory=lambda: TrainOptions().model_dump())


def model_config_files(conf_dir: Path = CONF_DIR) -> list[Path]:
    return sorted((conf_dir / "model").glob("*.yaml"))


def load_model_config(path: Path):
    """A model YAML merged onto the schema; a wrong key or type (``train.extra`` included) names the file."""
    try:
        node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(path))
        train = TrainOptions.model_validate(OmegaConf.to_container(node.train))
        TRAINING_METHODS.get(train.method).options(train.extra)
    except Exception as error:
        raise ValueError(f"{path}: invalid model config: {error}") from None
    return node


def register_model_options(conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """Store every model YAML as an option of model_a and model_b; returns model name -> dataset."""
    store = ConfigStore.instance()
    datasets = {}
    for path in model_config_files(conf_dir):
        node = load_model_config(path)
        for group in MODEL_GROUPS:
            store.store(group=group, name=path.stem, node=node)
        datasets[path.stem] = str(node.dataset)
    return datasets
