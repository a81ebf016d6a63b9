"""controversial: synthesize controversial stimuli and score models of human perception.

For notebooks, the stages without the command line (names are imported on first use, so ``import
controversial`` stays light)::

    import controversial as cv
    vgg = cv.load_model("vgg", dataset="mnist")                                  # a calibrated model
    train = cv.load_dataset("mnist", "train")           # the exact tensors train.py uses: to train your own model
    cv.run_command("synthesize", ["model_a=abs", "model_b=vgg"], "out/abs_vgg")  # any command, in-process
    study = cv.build_study(cv.read_human_ratings("responses.csv"), cv.read_model_responses("models.csv"),
                           exclude_repetitions=True)  # an exported study has repeats: scored on first presentations
    results = cv.analyze_study(study, cv.AnalysisOptions(bootstrap={"n_resamples": 10_000}))
    cv.write_analysis(results, "out/analysis")                    # report.md, results.json and figures
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "run_command": "controversial.api",
    "settings": "controversial.api",
    "load_model": "controversial.zoo.bundled",
    "load_images": "controversial.data",
    "load_dataset": "controversial.data",
    "hard_score": "controversial.synthesis.objectives",
    "synthesize_batch": "controversial.synthesis.engine",
    "read_human_ratings": "controversial.records.responses",
    "read_model_responses": "controversial.records.responses",
    "build_study": "controversial.analysis.study",
    "analyze_study": "controversial.analysis.pipeline",
    "AnalysisOptions": "controversial.analysis.options",
    "write_analysis": "controversial.analysis.report",
}
__all__ = [
    "AnalysisOptions",
    "__version__",
    "analyze_study",
    "build_study",
    "hard_score",
    "load_dataset",
    "load_images",
    "load_model",
    "read_human_ratings",
    "read_model_responses",
    "run_command",
    "settings",
    "synthesize_batch",
    "write_analysis",
]

if TYPE_CHECKING:
    from controversial.analysis.options import AnalysisOptions
    from controversial.analysis.pipeline import analyze_study
    from controversial.analysis.report import write_analysis
    from controversial.analysis.study import build_study
    from controversial.api import run_command, settings
    from controversial.data import load_dataset, load_images
    from controversial.records.responses import read_human_ratings, read_model_responses
    from controversial.synthesis.engine import synthesize_batch
    from controversial.synthesis.objectives import hard_score
    from controversial.zoo.bundled import load_model


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'controversial' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
