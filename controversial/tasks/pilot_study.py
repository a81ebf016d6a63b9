"""``python pilot_study.py study_dir=studies/<name>/v<k> rater=vgg``: a scripted pilot of a study bundle.

Evaluates the models on the bundle's stimuli, serves the study on loopback with its own database, lets
``participants`` simulated people (the ``rater`` model's probabilities plus per-participant noise) take it over
HTTP, exports the CSV files as ``serve_study.py mode=export`` does, and analyses them as ``analyze.py`` does:
the rater should come out first, and every file a real study produces is there to check.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from controversial.analysis.model_responses import stimuli_from_folder, write_responses
from controversial.analysis.options import BootstrapOptions, ErrorConsistencyOptions
from controversial.analysis.results import AnalysisResults
from controversial.analysis.simulate import ParticipantNoise
from controversial.datasets import ModelDataOptions
from controversial.errors import UserError
from controversial.options import Count, Options, Seed, ordered_range
from controversial.study.bundle import STIMULI_DIR, load_bundle, recorded_inversion
from controversial.study.pilot import database_file, model_raters, run_pilot
from controversial.synthesis.stimuli import Inversion
from controversial.tasks import Invocation, analyze
from controversial.tasks.serve_study import export_csvs
from controversial.zoo.bundled import load_model


class PilotStudySettings(Options):
    study_dir: str = Field(description="a bundle written by export_study.py or design_study.py")
    rater: str = Field(description="the model whose probabilities (plus noise) the scripted participants rate by")
    participants: Count = Field(10, description="scripted participants (at least 2: the noise ceiling needs two)")
    models: list[str] | None = Field(
        None, description="models to evaluate and compare; null: the models the bundle's stimuli target"
    )
    dataset: str | None = Field(None, description="null: the bundle's dataset")
    models_dir: str | None = Field(
        None, description="searched first; the repository's models/ and your models folder always"
    )
    data: ModelDataOptions = Field(default_factory=ModelDataOptions)
    noise_sd: tuple[float, float] = Field((0.8, 1.6), description="per-participant logit noise, drawn from this range")
    gain: tuple[float, float] = Field((0.7, 1.3), description="per-participant gain, drawn from this range")
    seed: Seed = 0
    resamples: int = Field(2000, ge=0, description="bootstrap resamples of the analysis (0: point estimates)")
    batch_size: Count = Field(256, description="images per forward pass when evaluating the models")

    _range = field_validator("noise_sd", "gain")(lambda bounds: ordered_range(bounds))

    @field_validator("participants")
    @classmethod
    def _two(cls, value: int) -> int:
        if value < 2:
            raise UserError("a pilot needs at least 2 participants (the noise ceiling needs two)")
        return value


def run(cfg: PilotStudySettings, invocation: Invocation) -> AnalysisResults:
    """The pilot into ``invocation.out_dir``: model_responses.csv, pilot.db, the exported CSVs, analysis/."""
    out = invocation.out_dir
    bundle = load_bundle(cfg.study_dir)
    targeted = sorted({m for e in bundle.key.values() if e.kind == "controversial" for m in (e.model_a, e.model_b)})
    names = list(cfg.models or targeted)
    if cfg.rater not in names:
        raise UserError(f"rater={cfg.rater}: not among the models evaluated ({', '.join(names)}); pick one of them")
    # the models first: a checkpoint of an imported model registers its dataset, whose class names the
    # stimuli's file names hold
    models = [load_model(m, cfg.dataset or bundle.spec.dataset, cfg.models_dir, cfg.data.root) for m in names]
    stimuli = stimuli_from_folder(bundle.root / STIMULI_DIR)
    recorded = recorded_inversion(bundle.root / STIMULI_DIR)
    invert: Inversion = "auto" if recorded is None else ("true" if recorded else "false")
    probabilities, _ = write_responses(out / "model_responses.csv", models, stimuli, cfg.batch_size, invert)
    print(f"{len(models)} models x {len(stimuli)} images -> {out / 'model_responses.csv'}")

    noise = ParticipantNoise(sd=cfg.noise_sd, gain=cfg.gain)
    images = [s.image for s in stimuli]
    raters = model_raters(bundle, images, probabilities[names.index(cfg.rater)], cfg.participants, noise, cfg.seed)
    database = database_file(out)
    pilot = run_pilot(bundle, database, raters, cfg.seed)
    print(
        f"pilot: {pilot.participants} scripted participants (ratings: {cfg.rater} + noise) took {bundle.label} over "
        f"{pilot.url}, {pilot.answers} answers in {pilot.seconds:.0f} s -> {database.removeprefix('sqlite:///')}"
    )
    export_csvs(bundle.root, database, out, command=invocation.command)
    analysis = analyze.AnalyzeSettings(
        human_ratings=str(out / "responses.csv"),
        model_responses=str(out / "model_responses.csv"),
        rating_scale=[v / 100 for v in bundle.spec.rating_levels],
        bootstrap=BootstrapOptions(
            n_resamples=cfg.resamples,
            subset_resamples=min(cfg.resamples, 10_000),
            other_subset_resamples=min(cfg.resamples, 1000),
        ),
        error_consistency=ErrorConsistencyOptions(n_resamples=min(cfg.resamples, 1000)),
        seed=cfg.seed,
    )
    return analyze.run(analysis, Invocation(out / "analysis", invocation.command))
