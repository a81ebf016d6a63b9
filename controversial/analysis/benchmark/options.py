"""The option group of the model-vs-human benchmark (``analyze.py benchmark.*``), apart from the code in
``benchmark.py`` so that reading settings stays light (no scipy), as the study server's start-up needs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controversial.options import Options

# Conditions the benchmark leaves out of its metrics: not OOD, or mean human accuracy below 0.2.
BENCHMARK_EXCLUDED: dict[str, list[str]] = {
    "colour": ["cr"],
    "contrast": ["c100", "c03", "c01"],
    "high-pass": ["inf", "0.55", "0.45", "0.4"],
    "low-pass": ["0", "15", "40"],
    "phase-scrambling": ["0", "150", "180"],
    "power-equalisation": ["0"],
    "false-colour": ["True"],
    "rotation": ["0"],
    "eidolonI": ["1-10-10", "64-10-10", "128-10-10"],
    "eidolonII": ["1-3-10", "32-3-10", "64-3-10", "128-3-10"],
    "eidolonIII": ["1-0-10", "16-0-10", "32-0-10", "64-0-10", "128-0-10"],
    "uniform-noise": ["0.0", "0.6", "0.9"],
}


class BenchmarkOptions(Options):
    """The model-vs-human benchmark on trial-level choices (``analyze.py choices=...``)."""

    enabled: bool = Field(True, description="compute the five metrics, shape bias and the kappa tests")
    exclude_conditions: dict[str, list[str]] = Field(
        default_factory=lambda: {k: list(v) for k, v in BENCHMARK_EXCLUDED.items()},
        description="dataset -> conditions left out of the metrics (default: the benchmark's own list)",
    )
    cue_conflict: list[str] = Field(
        default_factory=lambda: ["cue-conflict"], description="datasets whose shape bias is computed"
    )
    kappa_resamples: int = Field(1000, ge=0, description="bootstrap resamples for the kappa CIs and tests (0: skip)")
    observers: Literal["fixed", "random"] = Field(
        "fixed", description="fixed: inference about these humans; random: humans as a sample of people"
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="level of the paired kappa tests")
    overall_resamples: int = Field(
        1000, ge=0, description="bootstrap of each dataset's humans for the overall table's CIs (0: none)"
    )
