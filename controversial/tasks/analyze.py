"""``python analyze.py``: which model predicts people best, and is the difference real?

Reads human ratings and model responses (or, with no ``human_ratings``, generates a simulated study
and says so), runs correlations, noise ceilings, the participant x stimulus bootstrap, error
consistency, and writes ``report.md``, ``results.json`` and figures into the Hydra run dir.
"""

from __future__ import annotations

import glob
import logging
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from controversial.analysis.benchmark.options import BenchmarkOptions
from controversial.analysis.benchmark.report import console_table
from controversial.analysis.benchmark.scores import OVERALL, BenchmarkResults, run_benchmark
from controversial.analysis.error_consistency import decisions_from_trials
from controversial.analysis.instance_spread import instance_spread_markdown
from controversial.analysis.options import AnalysisOptions
from controversial.analysis.pipeline import analyze_choices, analyze_ratings_consistency, analyze_study
from controversial.analysis.reliability import reliability
from controversial.analysis.report import few_participants_note, fmt, write_analysis
from controversial.analysis.results import AnalysisResults, ConsistencyBlock, Inputs
from controversial.analysis.simulate import (
    ParticipantNoise,
    SimulatedStudyOptions,
    parse_mixture,
    simulate_models,
    simulate_participants,
    true_probabilities,
    write_study,
)
from controversial.analysis.study import Study, build_study
from controversial.atomic import atomic_write_text
from controversial.errors import UserError
from controversial.options import Fraction
from controversial.records.choices import read_trials
from controversial.records.csvfile import InputError
from controversial.records.responses import (
    ModelTable,
    merge_model_tables,
    read_human_ratings,
    read_model_responses,
    split_replications,
)
from controversial.records.study import read_attention, read_quality_flags
from controversial.study.quality import FLAGS
from controversial.tasks import Invocation

log = logging.getLogger(__name__)


class AnalyzeSettings(AnalysisOptions):
    """analyze.py: the inputs and exclusions; what is computed is :class:`AnalysisOptions`."""

    human_ratings: str | list[str] | None = Field(
        None,
        description="PNAS long-format ratings CSV, or a list (replications split by subject code and pooled); "
        "null: a SIMULATED study (or, with choices, error consistency only)",
    )
    model_responses: str | list[str] | dict[str, str | list[str]] | None = Field(
        None, description="PNAS model-format CSV, a list (merged), or a mapping replication -> file(s)"
    )
    choices: str | list[str] | None = Field(
        None,
        description="folder (one dataset), folder of dataset folders, or glob of "
        "model-vs-human trial CSVs for error consistency, or a list of these (joined by dataset name)",
    )
    choices_humans: str = Field("^subject", description="regex on `subj` marking the human decision makers")
    rating_scale: list[float] = Field(
        default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0], description="the rating levels, ascending, in [0, 1]"
    )
    exclude_repetitions: bool = Field(True, description="score first presentations only; false: repeats are errors")
    exclude_participants: list[str] = Field(default_factory=list, description="participant ids to drop")
    min_natural_accuracy: Fraction | None = Field(None, description="drop participants below this natural accuracy")
    attention_checks: str | None = Field(None, description="the study server's attention.csv")
    min_attention_passed: Fraction | None = Field(None, description="drop participants below this attention pass rate")
    quality_flags: str | None = Field(None, description="the study server's participants.csv (subject, ..., flags)")
    exclude_flags: list[str] = Field(
        default_factory=list, description="drop participants with any of these flags, e.g. [too_fast, straight_lining]"
    )
    figures: bool = Field(True, description="draw the figures")
    simulate: SimulatedStudyOptions = Field(
        default_factory=SimulatedStudyOptions, description="used only when human_ratings is null"
    )
    benchmark: BenchmarkOptions = Field(
        default_factory=BenchmarkOptions, description="the model-vs-human benchmark on choices"
    )

    @field_validator("choices_humans")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise UserError(f"not a regular expression: {error}") from None
        return value

    @field_validator("rating_scale")
    @classmethod
    def _scale(cls, value: list[float]) -> list[float]:
        if len(value) < 2 or sorted(set(value)) != list(value) or not 0 <= value[0] <= value[-1] <= 1:
            raise UserError("needs at least two distinct ascending levels in [0, 1], e.g. [0, 0.25, 0.5, 0.75, 1]")
        return value

    @field_validator("human_ratings", "model_responses")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, (list, dict)) and not value:
            raise UserError("an empty list or mapping; give at least one file (or null)")
        return value

    @model_validator(mode="after")
    def _inputs(self) -> AnalyzeSettings:
        if self.human_ratings is not None and self.model_responses is None:
            raise UserError("human_ratings is set but model_responses is not; pass model_responses=PATH")
        return self


def simulate_inputs(cfg: AnalyzeSettings, out: Path) -> tuple[Path, Path, list[str]]:
    """Write a simulated study into ``out/simulated`` and describe it for the report."""
    sim = cfg.simulate
    models = simulate_models(
        int(sim.n_models), str(sim.dataset), int(sim.stimuli_per_pair), int(sim.natural_per_class), seed=int(cfg.seed)
    )
    weights = parse_mixture(str(sim.true_model))
    truth = true_probabilities(models, models.names, weights)
    noise = ParticipantNoise(sd=sim.noise_sd, gain=sim.gain)
    ratings = simulate_participants(
        truth, int(sim.n_participants), noise, tuple(cfg.rating_scale), seed=int(cfg.seed) + 1
    )
    human, model = write_study(out / "simulated", models, ratings, seed=int(cfg.seed))
    generating = " + ".join(f"{w:g} x {m}" for m, w in weights.items())
    note = (
        f"**SIMULATED STUDY (no human_ratings given): not human data.** {sim.n_participants} simulated participants x "
        f"{len(models.stimuli)} stimuli x {len(models.categories)} categories x {sim.n_models} simulated models; "
        f"ratings generated from {generating} with per-participant logit noise sd in {list(sim.noise_sd)} and gain in "
        f"{list(sim.gain)}, quantised to {list(cfg.rating_scale)}. The analysis should rank the generating model first."
    )
    return human, model, [note]


def _known_flags(flags: list[str]) -> tuple[str, ...]:
    """``exclude_flags`` checked against the study server's flag names."""
    unknown = [f for f in flags if f not in FLAGS]
    if unknown:
        raise UserError(f"exclude_flags: unknown flag(s) {', '.join(unknown)}; known: {', '.join(FLAGS)}")
    return tuple(flags)


def choice_datasets(spec: str | list[str]) -> dict[str, list[Path]]:
    """Trial files by dataset: a folder of CSVs is one dataset (named by the folder), a folder of such
    folders (the benchmark's ``raw-data/``) one dataset each, a glob is grouped by the files' folders; a list
    (the humans' raw-data and ``evaluate.py``'s decisions) joins the datasets of the same name."""
    if isinstance(spec, list):
        joined: dict[str, list[Path]] = {}
        for part in spec:
            for dataset, files in choice_datasets(str(part)).items():
                joined.setdefault(dataset, []).extend(files)
        return joined
    path = Path(spec)
    if path.is_dir():
        files = sorted(path.glob("*.csv")) or sorted(path.glob("*/*.csv"))
    else:
        files = sorted(Path(f) for f in glob.glob(str(path)) if f.endswith(".csv"))
    if not files:
        raise FileNotFoundError(
            f"choices={spec!r}: no CSV files found (a folder of trial CSVs, a folder of "
            "dataset folders, or a glob such as 'raw-data/*/*.csv')"
        )
    datasets: dict[str, list[Path]] = {}
    for file in files:
        datasets.setdefault(file.parent.name, []).append(file)
    return datasets


def _choices(spec: object) -> str | list[str]:
    """``choices``: a path, or a list of paths."""
    return [str(p) for p in spec] if isinstance(spec, list) else str(spec)


def analyze_choice_files(cfg: AnalyzeSettings) -> dict[str, ConsistencyBlock]:
    """Error consistency of every dataset of trial-level choices; the humans are the observers whose ``subj``
    matches ``choices_humans`` (the benchmark's rule: ``subject-``)."""
    out = {}
    for dataset, files in choice_datasets(_choices(cfg.choices)).items():
        data = decisions_from_trials(read_trials(files))
        humans = {n for n in data.names if re.search(cfg.choices_humans, n)}
        log.info(
            "choices %s: %d observers (%d human) x %d stimuli", dataset, len(data.names), len(humans), len(data.images)
        )
        out[dataset] = replace(analyze_choices(data, humans, cfg), files=[str(f) for f in files])
    return out


def benchmark_choice_files(cfg: AnalyzeSettings) -> BenchmarkResults | None:
    """The model-vs-human benchmark on ``choices`` (five numbers, shape bias, kappa tests); None when disabled."""
    if not cfg.benchmark.enabled:
        return None
    datasets = {name: read_trials(files) for name, files in choice_datasets(_choices(cfg.choices)).items()}
    return run_benchmark(
        datasets, cfg.choices_humans, cfg.benchmark, cfg.c_exp_one, int(cfg.seed), float(cfg.bootstrap.ci_level)
    )


def _model_table(spec: str | list) -> ModelTable:
    paths = [spec] if isinstance(spec, str) else list(spec)
    return merge_model_tables([read_model_responses(str(p)) for p in paths])


def build_studies(
    cfg: AnalyzeSettings, human_spec: str | list | dict, model_spec: str | list | dict
) -> dict[str, Study]:
    """One aligned study per replication of the human ratings (the release's ``Exp2a``/``Exp2b``).

    ``human_ratings``: a file or a list of files. ``model_responses``: a file or a list (merged, e.g. the
    release's models next to ours), or a mapping replication -> file(s) when replications reuse image names.
    """
    if isinstance(human_spec, dict):
        raise UserError("human_ratings is a file or a list of files; replications are read from the subject codes")
    paths = [human_spec] if isinstance(human_spec, str) else list(human_spec)
    tables = split_replications([read_human_ratings(str(p), tuple(cfg.rating_scale)) for p in paths])
    if isinstance(model_spec, dict):
        missing = sorted(set(tables) - set(model_spec))
        if missing:
            raise UserError(
                f"model_responses has no entry for replication(s) {', '.join(missing)}; given: {', '.join(model_spec)}"
            )
        models = {name: _model_table(model_spec[name]) for name in tables}
    else:
        shared = _model_table(model_spec)
        models = {name: shared for name in tables}
    listed = list(cfg.exclude_participants)
    known = {r.subject for t in tables.values() for r in t.rows}
    unknown = sorted(set(listed) - known)
    if unknown:
        raise InputError(
            f"exclude_participants: unknown participant(s) {', '.join(unknown)} in {', '.join(map(str, paths))}"
        )
    attention = None if cfg.attention_checks is None else read_attention(cfg.attention_checks)
    quality_flags = None if cfg.quality_flags is None else read_quality_flags(cfg.quality_flags)
    exclude_flags = _known_flags(list(cfg.exclude_flags))
    return {
        name: build_study(
            table,
            models[name],
            exclude_repetitions=bool(cfg.exclude_repetitions),
            exclude_participants=[p for p in listed if p in {r.subject for r in table.rows}],
            min_natural_accuracy=None if cfg.min_natural_accuracy is None else float(cfg.min_natural_accuracy),
            tie_rule=cfg.tie_rule,
            seed=int(cfg.seed),
            attention=attention,
            min_attention_passed=None if cfg.min_attention_passed is None else float(cfg.min_attention_passed),
            quality_flags=quality_flags,
            exclude_flags=exclude_flags,
        )
        for name, table in tables.items()
    }


def run(cfg: AnalyzeSettings, invocation: Invocation) -> AnalysisResults:
    """The analysis into ``invocation.out_dir``: report.md, results.json and figures."""
    out = invocation.out_dir
    start = time.perf_counter()
    header: list[str] = []
    command = invocation.command
    if cfg.human_ratings is None and cfg.choices is not None:
        return _run_choices_only(cfg, out, start, command)
    human_spec: str | list | dict
    model_spec: str | list | dict
    if cfg.human_ratings is None:
        human_path, model_path, header = simulate_inputs(cfg, out)
        log.warning("no human_ratings given: analysing a SIMULATED study written to %s", human_path.parent)
        human_spec, model_spec = str(human_path), str(model_path)
    else:
        assert cfg.model_responses is not None  # required with human_ratings by AnalyzeSettings
        human_spec, model_spec = cfg.human_ratings, cfg.model_responses
    header += [f"- human ratings: `{human_spec}`", f"- model responses: `{model_spec}`", f"- command: `{command}`"]
    studies = build_studies(cfg, human_spec, model_spec)
    for name, study in studies.items():
        log.info(
            "study%s: %d participants x %d stimuli x %d categories, %d models",
            f" {name}" if name else "",
            len(study.participants),
            len(study.stimuli),
            len(study.categories),
            len(study.models),
        )
    prediction = analyze_study(list(studies.values()), cfg)
    if len(studies) > 1:
        header.append(
            f"- replications pooled: {', '.join(name or 'unprefixed codes' for name in studies)} (each "
            "participant scored on their own replication's stimuli; bootstrap within replication, stimuli "
            "stratified by condition)"
        )
    ratings_consistency = None
    if cfg.error_consistency.enabled and len(studies) == 1:
        ratings_consistency = analyze_ratings_consistency(next(iter(studies.values())), cfg)
    elif cfg.error_consistency.enabled:
        log.warning("error consistency from ratings is computed for one replication at a time; run each on its own")
    choices = analyze_choice_files(cfg) if cfg.choices is not None else None
    benchmark = benchmark_choice_files(cfg) if cfg.choices is not None else None
    results = AnalysisResults(
        study=prediction.study,
        ranking=prediction.ranking,
        prediction=prediction.prediction,
        inputs=Inputs(
            human_ratings=human_spec,
            model_responses=model_spec,
            replications=list(studies),
            simulated=cfg.human_ratings is None,
            config=cfg.model_dump(),
        ),
        error_consistency=ratings_consistency,
        choices=choices,
        benchmark=benchmark,
        reliability={name or "study": reliability(s, cfg) for name, s in studies.items()},
    )
    results = write_analysis(results, out, figures=cfg.figures, header=header)
    if _instance_spread(results):  # evaluate.py instances=true: models scored as several seeds (docs/models.md)
        atomic_write_text(out / "instances.md", _instance_spread(results))
    _print_summary(results, out, time.perf_counter() - start)
    return results


def _run_choices_only(cfg: AnalyzeSettings, out: Path, start: float, command: str) -> AnalysisResults:
    """Error consistency alone, from trial-level choices: no ratings, no simulated study."""
    results = AnalysisResults(
        inputs=Inputs(choices=_choices(cfg.choices), simulated=False, config=cfg.model_dump()),
        choices=analyze_choice_files(cfg),
        benchmark=benchmark_choice_files(cfg),
    )
    header = [f"- trial-level choices: `{cfg.choices}`", f"- command: `{command}`"]
    results = write_analysis(results, out, figures=cfg.figures, header=header)
    elapsed = time.perf_counter() - start
    print(f"{'dataset':<14} {'observers':>9} {'trials':>6}  {'human-human kappa (whole)':>26}  {'(per condition)':>15}")
    nan = float("nan")
    for dataset, block in (results.choices or {}).items():
        whole = block.whole.group_means.get("human-human")
        per = block.per_condition.group_means.get("human-human")
        print(
            f"{dataset:<14} {len(block.names):>9} {block.n_trials:>6}  {whole.mean if whole else nan:>26.3f}  "
            f"{per.mean if per else nan:>15.3f}"
        )
    if results.benchmark and OVERALL in results.benchmark.tables:
        print("\n".join(console_table(results.benchmark.tables[OVERALL])))
    print(f"report: {out / 'report.md'}  results: {out / 'results.json'}  ({elapsed:.1f} s)")
    return results


def _instance_spread(results: AnalysisResults) -> str:
    """The spread between each model's trained instances beside the noise ceiling; empty without instances."""
    assert results.prediction is not None
    ceiling = results.prediction["all"].noise_ceiling["pearson"]
    mean = results.prediction["all"].measures["pearson"].mean
    return instance_spread_markdown(mean, (ceiling.lower, ceiling.upper))


def _print_summary(results: AnalysisResults, out: Path, elapsed: float) -> None:
    assert results.prediction is not None and results.ranking is not None
    all_ = results.prediction["all"]
    mean = all_.measures["pearson"].mean
    ci = all_.bootstrap.ci if all_.bootstrap else {}
    if results.inputs.simulated:
        print("SIMULATED STUDY (no human_ratings given) -- not human data")
    if all_.bootstrap and (note := few_participants_note(all_.n_participants)):
        print(note.replace("**", ""))
    print(f"{'rank':>4}  {'model':<28} {'mean r':>7}  CI")
    for i, m in enumerate(results.ranking, start=1):
        interval = "[{}, {}]".format(*map(fmt, ci[m])) if m in ci else ""
        print(f"{i:>4}  {m:<28} {fmt(mean[m]):>7}  {interval}")
    ceiling = all_.noise_ceiling["pearson"]
    print(f"      {'noise ceiling (lower, upper)':<28} {fmt(ceiling.lower)}, {fmt(ceiling.upper)}")
    print(_instance_spread(results), end="")
    print(f"report: {out / 'report.md'}  results: {out / 'results.json'}  ({elapsed:.1f} s)")
