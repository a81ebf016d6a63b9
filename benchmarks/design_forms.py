"""Do more stimuli per study help? Participants spread over several forms (different stimuli per form) against one form.

The analysis's test resamples stimuli as well as participants, so a part of its variance comes from the stimuli
chosen. Where that part does not shrink with more participants (the population's shared deviation from the truth,
fixed per stimulus), giving different participants different stimuli spreads it: with G forms its share of the
variance falls about G-fold, while every participant still rates 820 stimuli. This measures whether that could carry
a design to half the paper's participants, for the paper's own selection rule: form 1 is the paper's design (the
benchmark's (a)), form g the same rule on the synthetic candidates forms 1..g-1 left (each form draws its 10 natural
images per class anew, so those may repeat across forms). Participants go round-robin over the
first min(G, n // 2) forms, so each form has the two its noise ceiling needs, and the forms are pooled as the
analysis pools batches (``pooled_bootstrap``: participants within forms, stimuli within (form, condition) strata).

It prints, per truth, (1) the power of the analysis's test (truth above every rival, Holm-Sidak over the 45
comparisons, alpha 0.05) at each count and number of forms, on the same simulated people (common random numbers),
and (2) how form 1's bootstrap variance of the truth-minus-runner-up difference splits into a part that shrinks as
1/n (participants and their own noise) and a fixed part (fitted from two counts): the fixed part is all that forms
can spread.

    python benchmarks/design_forms.py --truths kde,abs,madry_l2 --counts 8,12,20,30,40 --forms 1,2,4
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from design import ALPHA, Study, _population, load_pool, paper_design  # noqa: E402

from controversial.analysis.bootstrap import bootstrap, pooled_bootstrap  # noqa: E402
from controversial.analysis.simulate import ParticipantNoise  # noqa: E402
from controversial.study.selection import SelectionError  # noqa: E402


def paper_forms(pool, plain: np.ndarray, hard: np.ndarray, n_forms: int, rng: np.random.Generator) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """``n_forms`` designs by the paper's rule, each from the synthetic candidates the earlier ones left."""
    forms, left = [], plain.copy()
    for _ in range(n_forms):
        form = paper_design(pool, left, hard, "ilp", rng)
        forms.append(form)
        left[form] = False
    return forms


def forms_success(study: Study, forms: list[np.ndarray], n: int, sim: int) -> bool:
    """Simulated study ``sim`` of n participants, round-robin over the first min(G, n // 2) forms, pooled."""
    people = study.people(sim, n)
    used = min(len(forms), n // 2)
    parts = []
    for g, form in enumerate(forms[:used]):
        who = np.arange(g, n, used)
        parts.append((people[who][:, form], study.P[:, form], conditions(study, form)))
    return study.wins(pooled_bootstrap(parts, study.names, study.args.resamples, seed=sim))


def conditions(study: Study, design: np.ndarray) -> list[str]:
    """The bootstrap strata of ``design``'s stimuli."""
    return [study.pool.conditions[i] for i in design]


def variance_split(study: Study, form: np.ndarray, rival: int, counts: tuple[int, int], sims: int) -> tuple[float, ...]:
    """Form 1's bootstrap variance of (truth - rival) at two counts, split as c / n + fixed: (effect, c, fixed)."""
    effects, variances, strata = [], [], conditions(study, form)
    for n in counts:
        for sim in range(sims):
            ratings = study.people(sim, n)[:, form]
            dist = bootstrap(ratings, study.P[:, form], study.names, strata, study.args.resamples, seed=sim)
            difference = dist.samples[:, study.truth] - dist.samples[:, rival]
            effects.append(difference.mean())
            variances.append(difference.var())
    small, large = np.mean(variances[:sims]), np.mean(variances[sims:])
    shrinking = (small - large) / (1 / counts[0] - 1 / counts[1])
    return float(np.mean(effects)), float(shrinking), float(large - shrinking / counts[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default=str(ROOT.parent / "outputs" / "design" / "pool.npz"))
    parser.add_argument("--truths", default="kde,abs,madry_l2", help="comma-separated model names")
    parser.add_argument("--counts", default="8,12,20,30,40", help="participant counts, comma-separated")
    parser.add_argument("--forms", default="1,2,4", help="numbers of forms, comma-separated")
    parser.add_argument("--sims", type=int, default=20, help="simulated studies per count")
    parser.add_argument("--shared-sd", type=float, default=6.0)
    parser.add_argument("--noise-sd", type=float, nargs=2, default=(24.0, 32.0))
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not Path(args.pool).is_file():
        parser.error(f"--pool {args.pool}: no such file; build it once with python benchmarks/design_pool.py")
    try:
        counts = [int(c) for c in args.counts.split(",")]
        n_forms = [int(g) for g in args.forms.split(",")]
    except ValueError:
        parser.error(f"--counts and --forms take comma-separated whole numbers, got {args.counts!r}, {args.forms!r}")
    if min(counts) < 2 or min(n_forms) < 1 or args.sims < 1 or args.resamples < 1:
        parser.error("--counts must be >= 2 (the noise ceiling), --forms, --sims and --resamples >= 1")
    names, P, pool, plain, hard = load_pool(Path(args.pool))
    unknown = [t for t in args.truths.split(",") if t not in names]
    if unknown:
        parser.error(f"--truths: {', '.join(unknown)} not in the pool's models {', '.join(names)}")
    try:
        forms = paper_forms(pool, plain, hard, max(n_forms), np.random.default_rng(args.seed))
    except SelectionError as error:
        parser.error(f"--forms {max(n_forms)}: the pool cannot give that many forms by the paper's rule ({error})")
    for g, form in enumerate(forms, 1):
        synthetic = form[~pool.natural[form]]
        print(f"form {g}: {len(form)} stimuli, mean hard score of the synthetic ones {hard[synthetic].mean():.3f}")
    study_args = SimpleNamespace(
        seed=args.seed,
        shared_sd=args.shared_sd,
        noise=ParticipantNoise(sd=tuple(args.noise_sd)),
        fixed_population=False,
        resamples=args.resamples,
        interim_alpha=0.0,
    )
    truths = [names.index(t) for t in args.truths.split(",")]
    runner_up = _population(P, names, pool, truths, forms[0], study_args)
    print(f"power at alpha {ALPHA} (Holm-Sidak, 45 comparisons), {args.sims} simulated studies per count")
    print("| truth | forms | " + " | ".join(f"n={n}" for n in counts) + " |")
    print("|---|---|" + "---|" * len(counts))
    splits = []
    for t in truths:
        study = Study(P, names, pool, t, study_args)
        for G in n_forms:
            row = [np.mean([forms_success(study, forms[:G], n, s) for s in range(args.sims)]) for n in counts]
            print(f"| {names[t]} | {G} | " + " | ".join(f"{p:.2f}" for p in row) + " |", flush=True)
        rival = names.index(runner_up[t])
        split = variance_split(study, forms[0], rival, (min(counts), max(counts)), args.sims)
        splits.append((names[t], runner_up[t], split))
    print(
        f"\nform 1's bootstrap variance of truth - runner-up, split as c/n + fixed (fitted at n={min(counts)} and "
        f"{max(counts)}):"
    )
    print("| truth | runner-up | effect | c (x1e-4) | fixed (x1e-6) | fixed share at n=" + f"{max(counts)} |")
    print("|---|---|---|---|---|---|")
    for truth, rival, (effect, shrinking, fixed) in splits:
        share = fixed / (fixed + shrinking / max(counts))
        print(f"| {truth} | {rival} | {effect:.4f} | {shrinking * 1e4:.2f} | {fixed * 1e6:.2f} | {share:.2f} |")


if __name__ == "__main__":
    main()
