"""``python design_study.py sweep_dir=<sweep> name=<study> models=[...]``: an optimal (or next-batch) study bundle."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import Field, model_validator

from controversial.analysis.model_responses import probabilities as model_probabilities
from controversial.analysis.simulate import ParticipantNoise
from controversial.analysis.study import build_study
from controversial.atomic import atomic_write_text
from controversial.data import load_uint8
from controversial.datasets import DataOptions
from controversial.design.adaptive import Batch, Evidence, evidence, final_alpha
from controversial.design.candidates import Balanced, Candidates, balanced_design, build_candidates
from controversial.design.constraints import DesignConstraints, DesignError
from controversial.design.noise_fit import fit_noise, fit_shared_sd
from controversial.design.objectives import participants_plan, ratio_to_baseline, total_need
from controversial.design.optimiser import Design, design_weights, held_out_panel, select_design
from controversial.design.options import AdaptiveSettings, DesignBudget, DesignPlan, PreviousBatch
from controversial.design.separation import ReferencePanel, Separation
from controversial.errors import UserError
from controversial.options import Count
from controversial.records.responses import read_human_ratings, read_model_responses
from controversial.study.bundle import load_bundle
from controversial.study.export import (
    DEFAULT_WEB_SOURCE,
    BundleOptions,
    ExportOptions,
    check_web_texts,
    recorded_classes,
    write_selection,
)
from controversial.study.selection import SelectionError, SweepStimulus, collect_sweep
from controversial.tasks import Invocation
from controversial.tasks.export_study import bundle_provenance
from controversial.zoo.bundled import load_model

log = logging.getLogger(__name__)


class DesignStudySettings(BundleOptions):
    """design_study.py: the stimuli that best separate the models, within the paper's budget, as a bundle."""

    sweep_dir: str = Field(description="a synthesize run dir or sweep: its accepted cells are the candidates")
    models: list[str] = Field(min_length=2, description="the models to compare (trained names or .pt paths)")
    models_dir: str | None = Field(
        None, description="searched first; the repository's models/ and your models folder always"
    )
    budget: DesignBudget = Field(default_factory=DesignBudget)
    plan: DesignPlan = Field(default_factory=DesignPlan)
    adaptive: AdaptiveSettings = Field(default_factory=AdaptiveSettings)
    batch_size: Count = Field(256, description="images per forward pass when the models rate the candidates")
    progress: bool = Field(True, description="progress bar on a terminal, periodic lines in a log file")
    data: DataOptions = Field(default_factory=lambda: DataOptions(download=False))

    @model_validator(mode="after")
    def _truths(self) -> DesignStudySettings:
        names = [Path(m).stem for m in self.models]
        if len(set(names)) < len(names):
            raise UserError(f"models lists a model twice: {self.models}")
        unknown = [t for t in self.plan.truths if t not in names]
        if unknown:
            raise UserError(f"plan.truths: {', '.join(unknown)} not among models ({', '.join(names)})")
        looks = len(self.adaptive.previous)
        if self.adaptive.interim_alpha * max(looks, 1) >= self.plan.alpha:
            raise UserError(
                f"adaptive.interim_alpha={self.adaptive.interim_alpha:g} over {max(looks, 1)} interim look(s) leaves "
                f"nothing of plan.alpha={self.plan.alpha:g} for the final test: each look's alpha is spent out of it"
            )
        return self


def pair_report(
    separation: Separation, names: Sequence[str], n: int, alpha: float, power: float, n_comparisons: int
) -> list[dict]:
    """One row per (truth, rival): expected difference in mean r, z and power at n, participants needed."""
    z, predicted = separation.z(n), separation.power(n, alpha, n_comparisons)
    needed = separation.participants_needed(alpha, power, n_comparisons)
    rows = []
    for i, t in enumerate(separation.truths):
        for j, rival in enumerate(names):
            if j != t:
                rows.append(
                    {
                        "truth": names[t],
                        "rival": rival,
                        "expected_difference_r": float(separation.effect[i, j]),
                        "z": float(z[i, j]),
                        "power": float(predicted[i, j]),
                        "participants_needed": None if np.isinf(needed[i, j]) else int(needed[i, j]),
                    }
                )
    return rows


def previous_batch(
    entry: PreviousBatch, candidates: Candidates, probabilities: np.ndarray, categories: Sequence[str]
) -> Batch:
    """An earlier batch's first-presentation ratings, aligned to the candidate pool by image name."""
    bundle = load_bundle(entry.bundle)
    table = read_human_ratings(entry.responses)
    index = {name: n for n, name in enumerate(candidates.names)}
    rows = [r for r in table.rows if r.repetition == 0]
    missing = sorted({r.image for r in rows} - set(index))
    if missing:
        raise DesignError(
            f"{bundle.label}: image {missing[0]!r} is not among the candidates; rebuild the pool with "
            "the first batch's sweep_dir, sources, seed, natural_candidates_per_class and seeds_per_cell"
        )
    images = sorted({index[r.image] for r in rows})
    subjects = sorted({r.subject for r in rows})
    human = np.full((len(subjects), len(images), len(categories)), np.nan)
    column = {n: c for c, n in enumerate(images)}
    for r in rows:
        human[subjects.index(r.subject), column[index[r.image]], list(categories).index(r.category)] = r.rating
    if np.isnan(human).any():
        raise DesignError(
            f"{entry.responses}: participants rated different images or missed categories; export "
            "completed participants only"
        )
    return Batch(human, probabilities[:, images], [candidates.pool.conditions[n] for n in images])


def planning_noise(plan: DesignPlan, first_batch: bool = True) -> tuple[ParticipantNoise, float, str]:
    """The participant noise and shared deviation the design plans with, and where they came from (the settings, or
    a pilot fit). ``first_batch=False``: a later batch, whose noise the earlier batches give (the caller fits it)."""
    if plan.pilot_ratings is None or plan.pilot_model_responses is None:
        if plan.shared_sd == "fit" and first_batch:
            raise DesignError(
                "plan.shared_sd=fit needs ratings to fit it to: plan.pilot_ratings and plan.pilot_model_responses, "
                "or adaptive.previous batches; or give a number (0: none)"
            )
        shared = 0.0 if plan.shared_sd == "fit" else plan.shared_sd
        return ParticipantNoise(sd=plan.noise_sd, gain=plan.gain), shared, "plan.noise_sd and plan.gain (no pilot)"
    pilot = build_study(
        read_human_ratings(plan.pilot_ratings),
        read_model_responses(plan.pilot_model_responses),
        exclude_repetitions=True,
    )
    fit = fit_noise(pilot.human, pilot.model)
    try:
        shared = fit_shared_sd(pilot.human, pilot.model, fit) if plan.shared_sd == "fit" else plan.shared_sd
    except ValueError as reason:
        raise DesignError(f"plan.shared_sd=fit on {plan.pilot_ratings}: {reason}") from reason
    return (
        fit.noise(shared),
        shared,
        f"fitted to {len(pilot.participants)} pilot participants (reference {pilot.models[fit.reference]})",
    )


def run(cfg: DesignStudySettings, invocation: Invocation) -> Path:
    """Choose the set, write ``design.md``/``design.json`` into the run dir and the bundle under ``studies_dir``
    (returned). With ``adaptive.interim_alpha`` > 0, a later batch's interim look may stop the study instead: then
    no bundle is written and the report's path is returned."""
    out = invocation.out_dir
    web_source = Path(cfg.web_source) if cfg.web_source else DEFAULT_WEB_SOURCE
    check_web_texts(web_source, cfg.pilot)  # before any model runs
    stimuli = collect_sweep(cfg.sweep_dir)
    if not any(s.row.accepted for s in stimuli):
        raise SelectionError(f"no accepted stimuli under {cfg.sweep_dir}")
    classes = recorded_classes(cfg.sweep_dir, stimuli)
    dataset = classes.dataset
    images, labels = load_uint8(dataset, "test", cfg.data.root, cfg.data.download)
    test_set = (images.numpy(), labels.numpy())
    budget, plan = cfg.budget, cfg.plan
    candidates = build_candidates(
        stimuli,
        test_set,
        budget.natural_candidates_per_class,
        cfg.sources,
        cfg.seed,
        budget.seeds_per_cell,
        classes.class_names,
    )
    models = [load_model(ref, dataset, cfg.models_dir, cfg.data.root) for ref in cfg.models]
    names = [m.name for m in models]
    unknown = [t for t in plan.truths if t not in names]
    if unknown:
        raise DesignError(f"plan.truths: {', '.join(unknown)} not among the models' names ({', '.join(names)})")
    categories = models[0].class_names
    probabilities = model_probabilities(models, candidates.images, cfg.batch_size)
    log.info("pool: %d candidates, %d models evaluated", len(candidates.names), len(models))
    constraints = DesignConstraints.from_budget(budget)
    noise, shared_sd, noise_source = planning_noise(plan, first_batch=not cfg.adaptive.previous)
    truths = [names.index(t) for t in plan.truths] if plan.truths else None
    batch = 1 + len(cfg.adaptive.previous)
    interim = cfg.adaptive.interim_alpha
    alpha = final_alpha(plan.alpha, interim, batch - 1)  # the final test's, should the study end with this batch
    if cfg.adaptive.previous:
        batches = [previous_batch(e, candidates, probabilities, categories) for e in cfg.adaptive.previous]
        found = evidence(
            batches, names, cfg.adaptive.screen_alpha, cfg.adaptive.n_resamples, seed=cfg.seed, interim_alpha=interim
        )
        if found.confirmed is not None:
            return _stop(out, cfg, names, found, names[found.confirmed], sum(b.human.shape[0] for b in batches))
        try:
            noise, shared_sd = found.planned_noise(plan.shared_sd)
        except ValueError as reason:
            raise DesignError(f"plan.{reason}") from reason
        truths = list(found.candidates)
        noise_source = f"fitted to batches 1-{batch - 1} ({sum(b.human.shape[0] for b in batches)} participants)"
    pool = candidates.pool
    baseline = _balanced(stimuli, candidates, constraints, cfg.sources, plan.criterion)
    log.info(
        "reference panel: %d simulated participants for each of %d truths on the %d candidates",
        plan.n_panel,
        len(truths) if truths else len(names),
        len(pool.conditions),
    )
    panel = ReferencePanel(probabilities, pool.conditions, noise, plan.n_panel, truths, cfg.seed, shared_sd)
    n = plan.n_participants
    n_comparisons = (len(names) + 1) * len(names) // 2 if plan.correction == "holm-sidak" else 1
    planned: float | np.ndarray = n
    objective = None
    if plan.criterion in ("participants", "total") and baseline is not None:  # _balanced raised if there is none
        at_baseline = panel.separation(design_weights(baseline.chosen, len(pool.conditions)))
        planned = participants_plan(at_baseline, alpha, plan.power, n_comparisons, plan.fraction, n)
        if plan.criterion == "total":
            objective = total_need(at_baseline, planned, alpha, plan.power, n_comparisons, plan.cap_rule)
    design = select_design(
        pool,
        panel,
        constraints,
        planned,
        plan.temperature,
        max_exchanges=plan.max_exchanges,
        seed=cfg.seed,
        baseline=baseline.chosen if baseline is not None and plan.criterion == "relative" else None,
        objective=objective,
        progress=cfg.progress,
    )
    del panel  # its memory, before the second panel is drawn
    log.info("predicting the chosen and the balanced design on a second panel of other simulated participants")
    check = held_out_panel(probabilities, pool.conditions, noise, plan.n_panel, truths, cfg.seed, shared_sd)
    predicted = check.separation(design_weights(design.chosen, len(pool.conditions)))
    rows = pair_report(predicted, names, n, alpha, plan.power, n_comparisons)
    summary = {
        "batch": batch,
        "criterion": CRITERIA[plan.criterion],
        "cap_rule": plan.cap_rule if plan.criterion == "total" else None,
        "planned_participants": n,
        "planned_per_truth": (
            {names[t]: float(k) for t, k in zip(predicted.truths, np.ravel(planned))} if np.ndim(planned) else None
        ),
        "weakest_z": float(np.nanmin(predicted.z(n))),
        "weakest_z_on_the_selection_panel": float(np.nanmin(design.separation.z(n))),  # at n, as weakest_z
        "noise": {
            "sd": list(noise.sd),
            "gain": list(noise.gain),
            "shared_sd": shared_sd,
            "shared_sd_fitted": plan.shared_sd == "fit",
            "source": noise_source,
        },
        "candidate_truths": [names[t] for t in predicted.truths],
        "alpha": alpha,  # the final test's, should the study end with this batch
        "interim_alpha": interim,
        "power": plan.power,
        "correction": plan.correction,
        "participants_needed": _needed(rows),
        "balanced_design": None,
    }
    if baseline is not None:
        balanced = check.separation(design_weights(baseline.chosen, len(pool.conditions)))
        ratios = ratio_to_baseline(predicted, balanced, n)
        summary["balanced_design"] = {
            "per_pair": baseline.per_pair,
            "stimuli": len(baseline.chosen),
            "weakest_z": float(np.nanmin(balanced.z(n))),
            "participants_needed": _needed(pair_report(balanced, names, n, alpha, plan.power, n_comparisons)),
            "weakest_z_ratio_per_truth": {names[t]: float(q) for t, q in zip(predicted.truths, ratios)},
        }
    _write_report(out, summary, rows, design, candidates)
    chosen = [int(i) for i in design.chosen]
    n_con = len(candidates.controversial)
    settings = ExportOptions(
        **cfg.model_dump(include=set(BundleOptions.model_fields)),
        natural_per_class=budget.natural_per_class,
        n_repeats=budget.n_repeats,
        n_attention=budget.n_attention,
    )
    path = write_selection(
        cfg.sweep_dir,
        cfg.studies_dir,
        settings,
        dataset,
        [candidates.controversial[i] for i in chosen if i < n_con],
        [candidates.natural[i - n_con] for i in chosen if i >= n_con],
        test_set,
        web_source,
        np.random.default_rng(cfg.seed + batch),
        bundle_provenance(cfg, invocation, {"design": summary}),
        classes.class_names,
    )
    print(
        f"batch {batch}: {len(chosen)} stimuli, weakest pairwise z {summary['weakest_z']:.2f} at {n} participants; "
        f"participants needed {summary['participants_needed'] or 'more than any count (stimulus variance)'} "
        f"-> {path} (report: {out / 'design.md'})"
    )
    return path


def _stop(
    out: Path, cfg: DesignStudySettings, names: Sequence[str], found: Evidence, winner: str, participants: int
) -> Path:
    """The interim look found a winner (``found.confirmed``, named ``winner``): report it and how to analyse the
    study, write no bundle."""
    batches = len(cfg.adaptive.previous)
    interim = cfg.adaptive.interim_alpha
    mean_r = {m: float(r) for m, r in zip(names, found.estimates)}
    responses = ",".join(b.responses for b in cfg.adaptive.previous)
    summary = {
        "batch": batches + 1,
        "stopped": True,
        "confirmed": winner,
        "interim_alpha": interim,
        "participants": participants,
        "mean_r": mean_r,
        "analyze": f"python analyze.py 'human_ratings=[{responses}]' model_responses=<models.csv> "
        f"bootstrap.alpha={interim:g}",
    }
    lines = [
        f"# Study design: stop before batch {batches + 1}",
        "",
        f"- interim look after batch{'es 1-' if batches > 1 else ' '}{batches} ({participants} participants): "
        f"{winner} is above every other model at alpha {interim:g} (Holm-Sidak over all pairs of the models and the "
        f"lower noise ceiling, {cfg.adaptive.n_resamples} resamples); the study stops here, no batch "
        f"{batches + 1} is written",
        "- pooled mean r so far: " + ", ".join(f"{m} {r:.3f}" for m, r in mean_r.items()),
        f"- report it with the test it stopped on: `{summary['analyze']}`",
    ]
    _write_reports(out, summary, lines)
    print(
        f"stop: after {participants} participants {winner} is above every other model at the interim alpha "
        f"{interim:g}; no batch {batches + 1} written (report: {out / 'design.md'})"
    )
    return out / "design.md"


CRITERIA = {
    "maximin": "maximin expected bootstrap z over (truth, rival) pairs",
    "relative": "maximin over truths of the truth's weakest expected z as a fraction of the balanced design's",
    "participants": "maximin expected bootstrap z, each truth's at a fraction of the participants the balanced "
    "design needs for it",
    "total": "fewest predicted participants averaged over truths, none more than the balanced design needs",
}


def _needed(rows: list[dict]) -> int | None:
    """Participants for every (truth, rival) row to reach the power; None if some row cannot."""
    needed = [r["participants_needed"] for r in rows]
    return None if None in needed else max(needed)


def _balanced(
    stimuli: Sequence[SweepStimulus],
    candidates: Candidates,
    constraints: DesignConstraints,
    sources: Sequence[str],
    criterion: str,
) -> Balanced | None:
    """The balanced design to compare with (and, for every criterion but maximin, to measure against)."""
    try:
        return balanced_design(stimuli, candidates, constraints.n_stimuli, constraints.natural_per_class, sources)
    except SelectionError as error:
        if criterion != "maximin":
            raise DesignError(f"plan.criterion={criterion} measures against the balanced design: {error}") from error
        log.info("no balanced design to compare with: %s", error)
        return None


def _balanced_lines(balanced: dict | None) -> list[str]:
    if balanced is None:
        return ["- balanced design: none fits this budget (no comparison)"]
    ratios = balanced["weakest_z_ratio_per_truth"]
    worst = min(ratios, key=ratios.get)
    return [
        f"- balanced design ({balanced['per_pair']} per model pair, {balanced['stimuli']} stimuli, what "
        f"export_study.py would choose): weakest z {balanced['weakest_z']:.2f}, participants needed "
        f"{balanced['participants_needed'] or 'not reachable'}",
        f"- each truth's weakest z as a fraction of the balanced design's: lowest {ratios[worst]:.2f} ({worst}), "
        + ", ".join(f"{t} {q:.2f}" for t, q in ratios.items()),
    ]


def _interim_lines(summary: dict) -> list[str]:
    """How the study's alpha is split between interim looks and the final test (adaptive.interim_alpha)."""
    if not summary["interim_alpha"]:
        return []
    looks = summary["batch"] - 1
    return [
        f"- interim looks at alpha {summary['interim_alpha']:g} each, before every later batch ({looks} so far); "
        f"should the study end with this batch, its final analysis runs at `bootstrap.alpha={summary['alpha']:g}`, "
        "what the looks left of plan.alpha"
    ]


def _write_report(out: Path, summary: dict, rows: list[dict], design: Design, candidates: Candidates) -> None:
    conditions: dict[str, int] = {}
    for i in design.chosen:
        conditions[candidates.pool.conditions[i]] = conditions.get(candidates.pool.conditions[i], 0) + 1
    payload = {
        **summary,
        "pairs": rows,
        "stimuli_per_condition": conditions,
        "chosen": [candidates.names[i] for i in design.chosen],
    }
    lines = [
        f"# Study design, batch {summary['batch']}",
        "",
        f"- criterion: {summary['criterion']}"
        + (f" (cap rule: {summary['cap_rule']})" if summary["cap_rule"] else "")
        + f"; planned participants {summary['planned_participants']}; "
        f"weakest z {summary['weakest_z']:.2f} (predicted on a second reference panel; "
        f"{summary['weakest_z_on_the_selection_panel']:.2f} on the panel the set was chosen on)",
        *([f"- planned per truth: {summary['planned_per_truth']}"] if summary["planned_per_truth"] is not None else []),
        f"- noise model: own sd {summary['noise']['sd']}, gain {summary['noise']['gain']}, shared deviation sd "
        f"{summary['noise']['shared_sd']:.2f}{' (fitted)' if summary['noise']['shared_sd_fitted'] else ''} "
        f"({summary['noise']['source']})",
        f"- candidate truths: {', '.join(summary['candidate_truths'])}",
        f"- participants needed for power {summary['power']} at alpha {summary['alpha']:g} ({summary['correction']}): "
        f"{summary['participants_needed'] or 'not reachable with these stimuli'}",
        *_interim_lines(summary),
        *_balanced_lines(summary["balanced_design"]),
        "",
        "| truth | rival | expected difference in mean r | z | power | participants needed |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['truth']} | {r['rival']} | {r['expected_difference_r']:.4f} | {r['z']:.2f} | {r['power']:.2f} | "
        f"{r['participants_needed'] if r['participants_needed'] is not None else 'unreachable'} |"
        for r in rows
    ]
    lines += ["", "| condition | stimuli |", "|---|---|"]
    lines += [f"| {c} | {k} |" for c, k in sorted(conditions.items(), key=lambda x: -x[1])]
    _write_reports(out, payload, lines)


def _write_reports(out: Path, payload: dict, lines: list[str]) -> None:
    """design.json and design.md in the run dir, each written whole or not at all."""
    atomic_write_text(out / "design.json", json.dumps(payload, indent=2) + "\n")
    atomic_write_text(out / "design.md", "\n".join(lines) + "\n")
