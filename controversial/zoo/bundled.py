"""Find and load the bundled, trained models by name."""

from __future__ import annotations

from pathlib import Path

from controversial.errors import UserError
from controversial.registry import UnknownNameError
from controversial.zoo.checkpoints import load_checkpoint
from controversial.zoo.readout import CalibratedModel

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = PROJECT_ROOT / "models"
# models/features/<dataset>.pt: the datasets' fixed feature networks of the naturalness measure (KID). They are
# not models of synthesis pairs, so the folder is not a dataset's folder of checkpoints.
FEATURES_FOLDER = "features"


def checkpoint_path(name: str, dataset: str, models_dir: str | Path | None = None) -> Path:
    """Where ``train.py`` writes and ``synthesize.py`` reads model ``name``: models/<dataset>/<name>.pt."""
    return Path(models_dir or MODELS_DIR) / dataset / f"{name}.pt"


def feature_network_path(dataset: str, models_dir: str | Path | None = None) -> Path:
    """Where ``train.py model=features/<dataset>`` writes a dataset's feature network: models/features/<dataset>.pt."""
    return Path(models_dir or MODELS_DIR) / FEATURES_FOLDER / f"{dataset}.pt"


def list_checkpoints(models_dir: str | Path | None = None) -> dict[str, list[Path]]:
    """Bundled checkpoints by model name (a name may exist for several datasets); feature networks are not models."""
    found: dict[str, list[Path]] = {}
    for path in sorted(Path(models_dir or MODELS_DIR).glob("*/*.pt")):
        if path.parent.name != FEATURES_FOLDER:
            found.setdefault(path.stem, []).append(path)
    return found


def load_model(
    name_or_path: str, dataset: str | None = None, models_dir: str | Path | None = None, data_root: str | None = None
) -> CalibratedModel:
    """Load by checkpoint path, or by model name (plus dataset when the name exists for several).

    A name is looked up in ``models_dir`` when given, then in the repository's models/ and the folders of
    $CONTROVERSIAL_MODELS_DIR (imported models), the first folder that has it winning.
    """
    return load_checkpoint(locate_model(name_or_path, dataset, models_dir), data_root)


def locate_model(name_or_path: str, dataset: str | None = None, models_dir: str | Path | None = None) -> Path:
    """The checkpoint ``load_model`` loads for ``name_or_path`` (see there)."""
    from controversial.config import models_dirs

    as_path = Path(name_or_path)
    if as_path.suffix == ".pt" or as_path.is_file():
        return as_path
    folders = list(dict.fromkeys(Path(d).resolve() for d in [*([models_dir] if models_dir else []), *models_dirs()]))
    found: dict[str, Path] = {}  # dataset -> the first folder's checkpoint of this name
    known: list[str] = []
    for folder in folders:
        for name, paths in list_checkpoints(folder).items():
            known += [f"{p.parent.name}/{name}" for p in paths]
            if name == name_or_path:
                for path in paths:
                    found.setdefault(path.parent.name, path)
    candidates = [p for d, p in found.items() if dataset is None or d == dataset]
    if not candidates:
        raise UnknownNameError(
            f"no trained model '{name_or_path}'; bundled checkpoints: {', '.join(dict.fromkeys(known)) or 'none'} "
            f"(searched {', '.join(map(str, folders))}; imported models elsewhere: models_dir= or "
            "$CONTROVERSIAL_MODELS_DIR)"
        )
    if len(candidates) > 1:
        raise UserError(
            f"model '{name_or_path}' exists for several datasets "
            f"({', '.join(p.parent.name for p in candidates)}); pass dataset="
        )
    return candidates[0]
