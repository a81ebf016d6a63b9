"""Find and load the bundled, trained models by name."""

from __future__ import annotations

from pathlib import Path

from controversial.errors import UserError
from controversial.registry import UnknownNameError
from controversial.zoo.checkpoints import load_checkpoint
from controversial.zoo.readout import CalibratedModel

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = PROJECT_ROOT / "models"


def checkpoint_path(name: str, dataset: str, models_dir: str | Path | None = None) -> Path:
    """Where ``train.py`` writes and ``synthesize.py`` reads model ``name``: models/<dataset>/<name>.pt."""
    return Path(models_dir or MODELS_DIR) / dataset / f"{name}.pt"


def list_checkpoints(models_dir: str | Path | None = None) -> dict[str, list[Path]]:
    """Bundled checkpoints by model name (a name may exist for several datasets)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(Path(models_dir or MODELS_DIR).glob("*/*.pt")):
        found.setdefault(path.stem, []).append(path)
    return found


def load_model(
    name_or_path: str, dataset: str | None = None, models_dir: str | Path | None = None, data_root: str | None = None
) -> CalibratedModel:
    """Load by checkpoint path, or by model name (plus dataset when the name exists for several)."""
    as_path = Path(name_or_path)
    if as_path.suffix == ".pt" or as_path.is_file():
        return load_checkpoint(as_path, data_root)
    available = list_checkpoints(models_dir)
    candidates = [p for p in available.get(name_or_path, []) if dataset is None or p.parent.name == dataset]
    if not candidates:
        known = ", ".join(f"{p.parent.name}/{n}" for n, paths in available.items() for p in paths) or "none"
        raise UnknownNameError(f"no trained model '{name_or_path}'; bundled checkpoints: {known}")
    if len(candidates) > 1:
        raise UserError(
            f"model '{name_or_path}' exists for several datasets "
            f"({', '.join(p.parent.name for p in candidates)}); pass dataset="
        )
    return load_checkpoint(candidates[0], data_root)
