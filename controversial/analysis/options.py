"""The options of an analysis: what the pipeline computes and how its inference is resampled.

``AnalysisOptions`` is what :func:`controversial.analysis.pipeline.analyze_study` takes; ``analyze.py``'s
settings extend it with the inputs, so the command's values reach the library as they are.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controversial.analysis.correlation import MEASURES, Measure
from controversial.analysis.reliability import ReliabilityOptions
from controversial.options import Count, Options, Seed


class BootstrapOptions(Options):
    n_resamples: int = Field(100_000, ge=0, description="participant x stimulus resamples (0: no inference)")
    subset_resamples: int = Field(10_000, ge=0, description="for the natural-only and controversial-only subsets")
    other_subset_resamples: int = Field(
        1000, ge=0, description="for every targeted-pair and targeted-model subset (the CIs of fig_subsets' panels)"
    )
    chunk_size: Count = Field(
        10_000, description="resamples per matrix product (memory bound; results do not depend on it)"
    )
    include_copies: bool = Field(False, description="lower ceiling: a participant's own copies count as 'others'")
    threads: Count = Field(
        1,
        description="resample chunks evaluated at once, e.g. one per core when BLAS runs one thread "
        "(results do not depend on it; docs/benchmarks.md)",
    )
    ci_level: float = Field(0.95, gt=0, lt=1, description="confidence level of the percentile intervals")
    alpha: float = Field(0.05, gt=0, lt=1, description="family-wise level, Holm-Sidak over all pairs")


class ErrorConsistencyOptions(Options):
    enabled: bool = Field(True, description="compute error consistency (kappa) between participants and models")
    n_resamples: int = Field(1000, ge=0, description="trial bootstrap for per-pair kappa CIs (0: skip)")
    null_band_grid: int = Field(200, ge=2, description="accuracy grid per axis for the independent-observer band")
    null_band_repeats: Count = Field(5, description="repeats per grid point of the band")


class AnalysisOptions(Options):
    """Everything the pipeline computes for one study, beside its inputs."""

    seed: Seed = 0
    measures: list[Measure] = Field(
        default_factory=lambda: list(MEASURES), min_length=1, description="correlation measures"
    )
    tie_rule: Literal["random", "first", "abstain"] = Field("random", description="arg-max ties in ratings")
    c_exp_one: Literal["nan", "one"] = Field("nan", description='kappa when c_exp = 1: "nan" | "one"')
    bootstrap: BootstrapOptions = Field(default_factory=BootstrapOptions)
    error_consistency: ErrorConsistencyOptions = Field(default_factory=ErrorConsistencyOptions)
    reliability: ReliabilityOptions = Field(default_factory=ReliabilityOptions)

    @property
    def ec_resamples(self) -> int:
        """Trial-bootstrap resamples of the kappa CIs; 0 when error consistency is off."""
        return self.error_consistency.n_resamples if self.error_consistency.enabled else 0
