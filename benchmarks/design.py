"""Participants needed to identify the true model, by design: the paper's, random, optimal, adaptive.

For each model of the pool in turn as the truth, a simulated population rates the stimuli. People
deviate from every model in a shared way, as the paper found (all models below the lower noise
ceiling): the population's percept is the truth's logit plus a deviation drawn once per (stimulus,
category) with sd ``--shared-sd`` (``simulate.shared_deviation``; each simulated study draws its own
population), and each participant adds their own gain and noise (``--noise-sd``;
``simulate.simulate_participants``). The run prints the population against the paper's finding (truth,
runner-up, lower noise ceiling). The design criterion's reference panel does not know the shared
deviation (no real planner can): it plans with the plain noise model.

A design succeeds in a simulated study when the analysis's test (participant x stimulus bootstrap,
stimuli stratified by condition, Holm-Sidak over all pairs of the models and the lower noise ceiling,
alpha 0.05) puts the truth significantly above every other model. "Participants needed" is the smallest
count on a grid with success rate (power) >= 0.8, found by a galloping search and bisection
(``--integer-counts``: then over the whole numbers between the grid's last short count and its first
passing one; common random numbers: simulation i uses the same simulated people for every design and
count). A truth that an optimal design needs more participants for than (a) is simulated again, under
both, with ``--recheck-sims`` studies per count (one grid step is often within the Monte-Carlo error of
20), and marked * in the table.

Designs, each with the paper's budget (20 stimuli per model pair and 10 natural images per class):
(a) paper: per model pair the 20 most controversial cells with every class twice per side (the paper's
    integer programme, ``selection.balanced_cells``), + 10 random natural images per class;
(b) random: random synthetic controversial stimuli and random natural images, as many as (a);
(c) optimal: ``controversial.design.optimiser.select_design``, one column per ``--criterion`` (the
    ``plan.criterion`` of ``design_study.py``; participants, the default, plans each truth at ``--fraction`` of
    the participants the paper's design needs for it);
(d) adaptive, two batches: half the participants on the first (c); then noise refit and evidence screen on
    their ratings and a new design for the rest (``controversial.design.adaptive``); pooled test; at least 4
    participants, since each batch needs 2 for its noise ceiling. With ``--interim-alpha a`` an interim look
    after batch 1 stops the study when the test at alpha a puts one model above every other (a success only
    if it is the truth), and the final test runs at 0.05 - a; the cell then also gives the participants such
    studies take on average (E) and the fewest within which a share ``--power`` of them had identified the truth;
(e) with ``--dedicated``: for each truth, a design chosen by the same planner to separate that truth alone,
    what no design for all the truths can be expected to beat.

The candidate pool (``controversial.design.pool``): every cell of every pair of the bundled MNIST models
synthesised once from noise, plus 50 test images per class, each rated by every model. Built once when
``--pool`` does not exist (about 14 minutes on a CPU core for the nine models; ``--models``, ``--offsets`` and
``--max-steps`` make a small one). The optimal designs are kept in ``--cache-dir`` (keyed by the pool file
and every setting the choice depends on), so a rerun with more simulated studies or another population does
not choose them again; ``--jobs N`` simulates N (truth, design) cells of the table at once.

    python benchmarks/design.py --shared-sd 6 --noise-sd 12 16 --criterion participants total maximin \
        --dedicated --adaptive-sims 10 --adaptive-shared-sd fit --interim-alpha 0.01
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from controversial.analysis.bootstrap import bootstrap, pooled_bootstrap  # noqa: E402
from controversial.analysis.ceilings import noise_ceiling  # noqa: E402
from controversial.analysis.correlation import participant_model_correlations  # noqa: E402
from controversial.analysis.simulate import ParticipantNoise, shared_deviation, simulate_participants  # noqa: E402
from controversial.analysis.study import NATURAL  # noqa: E402
from controversial.atomic import atomic_write  # noqa: E402
from controversial.data import load_uint8  # noqa: E402
from controversial.design.adaptive import Batch, confirmed_best, evidence, final_alpha, next_batch  # noqa: E402
from controversial.design.constraints import DesignConstraints, Pool, check_design  # noqa: E402
from controversial.design.objectives import CAP_RULES, participants_plan, total_need  # noqa: E402
from controversial.design.optimiser import design_weights, held_out_panel, select_design  # noqa: E402
from controversial.design.pool import OFFSETS, CandidatePool, synthesize_pool  # noqa: E402
from controversial.design.separation import ReferencePanel, Separation  # noqa: E402
from controversial.study.selection import balanced_cells  # noqa: E402
from controversial.zoo.bundled import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("vgg", "vgg_neg", "capsnet", "pcn", "madry_linf", "madry_l2", "capsnet_recon", "kde", "abs")
GRID = (2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80)
BEYOND_GRID = 2 * max(GRID)  # what a cell needing more than the grid's largest count counts as in means and comparisons
ALPHA = 0.05  # the study's family-wise level
PER_PAIR, NATURAL_PER_CLASS = 20, 10  # the paper's budget


class Cell(NamedTuple):
    """One cell of the table: the participants needed (None: more than the grid), how it prints, and for an
    adaptive study with an interim look the participants its simulated studies took on average at that count and the
    fewest within which a share --power of them had identified the truth."""

    count: int | None
    label: str
    expected: float | None = None
    budget: int | None = None


def _count(cell: Cell) -> int:
    """The participants a cell needs, a cell beyond the grid counted as ``BEYOND_GRID``."""
    return BEYOND_GRID if cell.count is None else cell.count


def paper_constraints(n_models: int) -> DesignConstraints:
    """The paper's budget for ``n_models`` models: 20 stimuli per model pair and 10 natural images per class
    (820 rated stimuli for nine models), every pair at least twice, classes within +-10 %."""
    pairs = n_models * (n_models - 1) // 2
    return DesignConstraints(PER_PAIR * pairs + 10 * NATURAL_PER_CLASS, NATURAL_PER_CLASS, 2, 0.1)


def paper_design(pool: Pool, plain: np.ndarray, hard: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The paper's design from the ``plain`` candidates (each cell's best seed, random natural images): per model
    pair the 20 stimuli with the largest summed hard score such that every class is each model's target twice (the
    paper's selection, METHODS.md section 2; ``selection.balanced_cells``); then 10 random natural images per
    class."""
    controversial = []
    for condition in sorted({c for c in pool.conditions if c != NATURAL}):
        members = np.flatnonzero(plain & np.array([c == condition for c in pool.conditions]))
        cells = [(int(a), int(b)) for a, b in pool.targets[members]]
        per_class = PER_PAIR // pool.n_classes
        controversial += members[balanced_cells(cells, hard[members], per_class, pool.n_classes)].tolist()
    natural = [
        rng.choice(np.flatnonzero(pool.natural & (pool.true_class == c)), NATURAL_PER_CLASS, replace=False)
        for c in range(pool.n_classes)
    ]
    return np.sort(np.concatenate([np.array(controversial, dtype=np.int64), *natural]))


def random_design(pool: Pool, plain: np.ndarray, n_controversial: int, rng: np.random.Generator) -> np.ndarray:
    """``n_controversial`` random synthetic stimuli and 10 random natural images per class (``plain`` candidates)."""
    controversial = rng.choice(np.flatnonzero(~pool.natural & plain), n_controversial, replace=False)
    natural = rng.choice(np.flatnonzero(pool.natural), NATURAL_PER_CLASS * pool.n_classes, replace=False)
    return np.sort(np.concatenate([controversial, natural]))


class Study:
    """Simulated people (common random numbers) and the analysis's test for one truth."""

    def __init__(self, probabilities: np.ndarray, names: tuple[str, ...], pool: Pool, truth: int, args) -> None:
        self.P, self.names, self.pool, self.truth, self.args = probabilities, names, pool, truth, args
        self.cache: dict = {}
        self.percepts: dict[int, np.ndarray] = {}
        self.screens: dict[tuple[int, int], tuple[tuple[int, ...], float]] = {}  # (n, sim) -> batch 1's screen
        self.stops: dict[tuple[int, int], int | None] = {}  # (n, sim) -> the model the interim look stopped on

    def percept(self, sim: int) -> np.ndarray:
        """The population's shared percept in simulation ``sim``: the truth plus one deviation per (stimulus,
        category). Each simulated study draws its own population, so a design's luck with one draw averages out
        over the studies."""
        if sim not in self.percepts:
            seed = np.random.SeedSequence([self.args.seed, self.truth, sim + 1])
            self.percepts[sim] = shared_deviation(self.P[self.truth], self.args.shared_sd, seed)
        return self.percepts[sim]

    def people(self, sim: int, n: int) -> np.ndarray:
        """The first n simulated participants of simulation ``sim`` on the whole pool."""
        seed = np.random.SeedSequence([self.args.seed, self.truth, sim])
        return simulate_participants(self.percept(sim), max(GRID), self.args.noise, seed=seed)[:n]

    def wins(self, dist, alpha: float = ALPHA) -> bool:  # type: ignore[no-untyped-def]
        return confirmed_best(dist, self.names, alpha) == self.truth

    def success(self, design: np.ndarray, n: int, sim: int) -> bool:
        ratings = self.people(sim, n)[:, design]
        conditions = [self.pool.conditions[i] for i in design]
        dist = bootstrap(ratings, self.P[:, design], self.names, conditions, self.args.resamples, seed=sim)
        return self.wins(dist)

    def success_adaptive(self, first: np.ndarray, n: int, sim: int) -> bool:
        if n < 4:  # each batch needs two participants for its noise ceiling
            return False
        people = self.people(sim, n)
        n1 = (n + 1) // 2
        batch1 = Batch(people[:n1][:, first], self.P[:, first], [self.pool.conditions[i] for i in first])
        interim = self.args.interim_alpha
        if interim:  # the interim look: batch 1 alone, the final test's resamples, at the interim alpha
            dist = bootstrap(batch1.human, batch1.model, self.names, batch1.conditions, self.args.resamples, seed=sim)
            self.stops[n, sim] = confirmed_best(dist, self.names, interim)
            if self.stops[n, sim] is not None:
                return self.stops[n, sim] == self.truth
        second = self.second_design(batch1, n - n1, sim)
        batch2 = Batch(people[n1:][:, second], self.P[:, second], [self.pool.conditions[i] for i in second])
        parts = [(b.human, b.model, b.conditions) for b in (batch1, batch2)]
        dist = pooled_bootstrap(parts, self.names, self.args.resamples, seed=sim)
        return self.wins(dist, final_alpha(ALPHA, interim, 1))

    def adaptive_trial(self, first: np.ndarray, n: int, sim: int) -> tuple[bool, tuple | None, int | None]:
        """``success_adaptive`` with what it recorded, for a run in another process (``adaptive_power``)."""
        success = self.success_adaptive(first, n, sim)
        return success, self.screens.get((n, sim)), self.stops.get((n, sim))

    def expected_participants(self, n: int, sims: int) -> float:
        """Participants the first ``sims`` simulated adaptive studies of ``n`` took on average: batch 1's where the
        interim look stopped them."""
        stopped = sum(self.stops.get((n, sim)) is not None for sim in range(sims))
        return n - (n - (n + 1) // 2) * stopped / sims

    def budget(self, n: int, sims: int, target: float) -> int:
        """The fewest participants within which a share ``target`` of the first ``sims`` simulated adaptive studies
        of ``n`` had identified the truth: batch 1's when its interim look stopped that many on the truth, else
        ``n``. (a)-(c)'s counts read the same way: the participants recruited, and the power they give."""
        on_truth = sum(self.stops.get((n, sim)) == self.truth for sim in range(sims))
        return (n + 1) // 2 if on_truth / sims >= target else n

    def second_design(self, batch1: Batch, n2: int, sim: int) -> np.ndarray:
        """Batch 2's design; cached on (candidate truths, planned noise ranges and shared sd rounded to 0.1) to save
        time."""
        found = evidence([batch1], self.names, n_resamples=500, fit_stimuli=100, seed=sim)
        self.screens[len(batch1.human) + n2, sim] = (found.candidates, found.shared_sd)
        planned = self.args.adaptive_shared_sd
        if planned == "fit" and np.isnan(found.shared_sd):  # batch 1 gave none (the log says why): plan for none,
            planned = 0.0  # what planned_noise's error tells an experimenter to do
        noise, shared = found.planned_noise(planned)
        key = (found.candidates, tuple(np.round([*noise.sd, *noise.gain, shared], 1)), n2)
        if key not in self.cache:
            self.cache[key] = next_batch(
                self.pool,
                self.P,
                found,
                self.args.constraints,
                max(n2, 2),
                n_panel=self.args.adaptive_panel,
                shared_sd=self.args.adaptive_shared_sd,
                temperature=self.args.temperature,
                baseline=self.args.baseline,
                step_fraction=0.05,
                max_exchanges=20,
            ).chosen
        return self.cache[key]


def power(trial, sims: int, n: int) -> float:  # type: ignore[no-untyped-def]
    """The share of ``sims`` simulated studies of ``n`` participants in which ``trial(n, sim)`` succeeds."""
    return float(np.mean([trial(n, s) for s in range(sims)]))


def adaptive_power(study: Study, first: np.ndarray, sims: int, workers: ProcessPoolExecutor, n: int) -> float:
    """``power`` of the adaptive study with its simulated studies in ``workers`` processes; what each recorded
    (batch 1's screen, the interim look's stop) is copied back into ``study``."""
    outcomes = list(workers.map(partial(study.adaptive_trial, first, n), range(sims)))
    for sim, (_, screen, stop) in enumerate(outcomes):
        if screen is not None:
            study.screens[n, sim] = screen
        study.stops[n, sim] = stop
    return float(np.mean([success for success, _, _ in outcomes]))


def needed(power_at: Callable[[int], float], target: float, lo: int = 0, integer: bool = False) -> Cell:
    """Smallest count in GRID[lo:] with ``power_at(count)`` >= target, and how to print it ("> x" when even the
    largest falls short, "<= x" when GRID[lo] > 2 already suffices). Galloping search: GRID[lo], then steps of
    1, 2, 4, ... grid points up to the first success, then bisection below it (power grows with count). With
    ``integer``, bisection goes on over the whole numbers between the last grid count that fell short and the first
    that passed: the grid's steps (15, 20, 25, ...) round a need up by as much as a third."""
    passed, failed, step, at = None, lo - 1, 1, lo
    while at < len(GRID):
        if power_at(GRID[at]) >= target:
            passed = at
            break
        failed, at, step = at, at + step, 2 * step
    if passed is None:
        if failed < len(GRID) - 1 and power_at(GRID[-1]) >= target:
            passed = len(GRID) - 1
        else:
            return Cell(None, f"> {GRID[-1]}")
    passed = _first_passing(failed, passed, lambda at: power_at(GRID[at]) >= target)
    if passed == lo and GRID[lo] > GRID[0]:
        return Cell(GRID[passed], f"<= {GRID[passed]}")
    count = GRID[passed]
    if integer and passed > 0:  # the bisection leaves GRID[passed - 1] short
        count = _first_passing(GRID[passed - 1], count, lambda n: power_at(n) >= target)
    return Cell(count, str(count))


def _first_passing(short: int, passing: int, passes: Callable[[int], bool]) -> int:
    """Bisection: the smallest k in (short, passing] with ``passes(k)``, given that ``short`` fails, ``passing``
    passes and passing grows with k."""
    while passing - short > 1:
        mid = (passing + short) // 2
        if passes(mid):
            passing = mid
        else:
            short = mid
    return passing


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pool",
        default=str(ROOT / "outputs" / "design" / "pool.npz"),
        help="the candidate pool; built (and kept here) when the file does not exist",
    )
    parser.add_argument("--sims", type=int, default=20, help="simulated studies per count")
    parser.add_argument(
        "--recheck-sims",
        type=int,
        default=100,
        help="simulated studies per count for the cells of a truth that some design needs more participants for "
        "than the paper's, and the paper's own cell of that truth (marked *; 0: no recheck)",
    )
    parser.add_argument("--adaptive-sims", type=int, default=10, help="simulated adaptive studies per count (0: skip)")
    parser.add_argument(
        "--adaptive-panel",
        type=int,
        default=64,
        help="reference participants per candidate truth for the adaptive study's second batch, chosen anew in "
        "every simulated study (fewer than --panel, for time)",
    )
    parser.add_argument(
        "--adaptive-shared-sd",
        default="0",
        help="shared deviation sd the second batch plans with: a number, or fit (plan.shared_sd=fit: fitted to "
        "batch 1's ratings; 0 where they give no fit)",
    )
    parser.add_argument(
        "--interim-alpha",
        type=float,
        default=0.0,
        help="the adaptive study's interim look after batch 1 (adaptive.interim_alpha): stop when one model is above "
        "every other at this alpha; the final test gets 0.05 minus it; 0: no interim look",
    )
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of each simulated test")
    parser.add_argument("--plan", type=int, default=20, help="participants the optimal design is planned for")
    parser.add_argument("--temperature", type=float, default=0.5, help="smooth minimum over pairs (plan.temperature)")
    parser.add_argument("--panel", type=int, default=256, help="reference participants per truth (plan.n_panel)")
    parser.add_argument("--power", type=float, default=0.8)
    parser.add_argument("--truths", default="all", help="comma-separated model names, or all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise-sd", type=float, nargs=2, default=(6.0, 10.0), help="participant logit noise range")
    parser.add_argument(
        "--shared-sd",
        type=float,
        default=4.0,
        help="sd of the population's shared deviation from the truth (logit units; the planner does not know it)",
    )
    parser.add_argument(
        "--criterion",
        nargs="+",
        choices=("maximin", "relative", "participants", "total"),
        default=["participants"],
        help="plan.criterion, one column (c) each; the first is also the adaptive study's batch 1",
    )
    parser.add_argument("--fraction", type=float, default=0.5, help="plan.fraction, for --criterion participants")
    parser.add_argument("--cap-rule", choices=CAP_RULES, default="ratio", help="plan.cap_rule, for --criterion total")
    parser.add_argument("--jobs", type=int, default=1, help="(truth, design) cells simulated in parallel processes")
    parser.add_argument("--sim-jobs", type=int, default=1, help="processes per adaptive cell, each some of its studies")
    parser.add_argument(
        "--cache-dir",
        default=str(ROOT / "outputs" / "design" / "cache"),
        help="where chosen optimal designs are kept and found again (keyed by the pool and the choice's settings)",
    )
    parser.add_argument("--no-cache", action="store_true", help="always choose the optimal design anew; keep none")
    parser.add_argument(
        "--integer-counts",
        action="store_true",
        help="refine each cell's count to the whole number between the grid's last short count and its first passing "
        "one (bisection, more simulated studies): the grid rounds a need up by as much as a third",
    )
    parser.add_argument("--predicted-only", action="store_true", help="only the criterion's predictions, no simulation")
    parser.add_argument(
        "--dedicated",
        action="store_true",
        help="add column (e): for each truth, a design chosen to separate that truth alone from its rivals",
    )
    building = parser.add_argument_group("building the pool (only when --pool does not exist)")
    building.add_argument("--models", default=",".join(MODELS), help="comma-separated bundled MNIST models")
    building.add_argument("--offsets", type=int, nargs="+", default=OFFSETS, help="class offsets b - a; start with 1 5")
    building.add_argument("--max-steps", type=int, default=300, help="synthesis steps per image at most")
    building.add_argument("--threads", type=int, default=1, help="torch threads for synthesis and rating")
    building.add_argument("--data-root", default=None, help="where MNIST is (default: $CONTROVERSIAL_DATA_ROOT)")
    args = parser.parse_args()
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1] (plan.fraction), got {args.fraction}")
    if args.panel < 2 or args.adaptive_panel < 2:
        parser.error(f"--panel and --adaptive-panel must be >= 2, got {args.panel} and {args.adaptive_panel}")
    if args.adaptive_shared_sd != "fit":
        try:
            number = float(args.adaptive_shared_sd)
        except ValueError:
            number = -1.0
        if not number >= 0:  # also NaN
            parser.error(f"--adaptive-shared-sd must be a number >= 0 or fit, got {args.adaptive_shared_sd!r}")
        args.adaptive_shared_sd = number
    if not 0 <= args.interim_alpha < ALPHA:
        parser.error(f"--interim-alpha must be in [0, {ALPHA}): it is spent out of the study's alpha")
    if min(args.sims, args.resamples, args.jobs, args.sim_jobs, args.threads) < 1 or args.adaptive_sims < 0:
        parser.error("--sims, --resamples, --jobs, --sim-jobs and --threads must be >= 1, --adaptive-sims >= 0")
    return args


def build_pool(args: argparse.Namespace) -> None:
    """The candidate pool, synthesised and rated once, written to ``--pool``."""
    names = args.models.split(",")
    print(f"building the candidate pool {args.pool} from {', '.join(names)} (minutes)", flush=True)
    torch.set_num_threads(args.threads)
    models = [load_model(name, "mnist", None, args.data_root) for name in names]
    for model in models:
        model.eval()
    test_images, test_labels = load_uint8("mnist", "test", args.data_root, False)
    images = test_images.reshape(len(test_images), 1, 28, 28).numpy()
    pool = synthesize_pool(models, images, test_labels.numpy(), args.offsets, max_steps=args.max_steps, seed=args.seed)
    pool.save(Path(args.pool))


def main() -> None:
    args = parse_args()
    if not Path(args.pool).is_file():
        build_pool(args)
    logging.basicConfig(format="  %(message)s")
    logging.getLogger("controversial.design.optimiser").setLevel(logging.INFO)  # each start's local optimum
    start = time.perf_counter()
    candidates = CandidatePool.load(Path(args.pool))
    names, P = candidates.models, candidates.probabilities.astype(np.float64)
    pool, plain = candidates.design_pool(), candidates.plain()
    args.constraints = paper_constraints(len(names))
    args.n_comparisons = (len(names) + 1) * len(names) // 2  # every pair of the models and the lower noise ceiling
    rng = np.random.default_rng(args.seed)
    args.noise = ParticipantNoise(sd=tuple(args.noise_sd))
    paper = paper_design(pool, plain, candidates.hard, rng)
    random = random_design(pool, plain, len(paper) - NATURAL_PER_CLASS * pool.n_classes, rng)
    args.baseline = paper if args.criterion[0] == "relative" else None  # the adaptive study's second batch
    panel = ReferencePanel(P, pool.conditions, args.noise, args.panel, seed=args.seed)
    at_paper = panel.separation(design_weights(paper, len(pool.conditions)))
    plan = participants_plan(at_paper, ALPHA, args.power, args.n_comparisons, args.fraction, max(GRID))
    print("planned participants per truth: " + ", ".join(f"{n} {v:.2f}" for n, v in zip(names, plan[:, 0])))
    designs = {"paper": paper, "random": random}
    for criterion in args.criterion:
        designs[f"optimal, {criterion}"] = _optimal(pool, panel, paper, at_paper, plan, criterion, args)
    optimal = {label: d for label, d in designs.items() if label.startswith("optimal")}
    print(
        f"pool: {len(pool.conditions)} candidates ({int(pool.natural.sum())} natural); optimal designs in "
        f"{time.perf_counter() - start:.0f} s"
    )
    # Every design is scored on a second panel: the optimal one was chosen to fit the first, noise included.
    del panel
    check = held_out_panel(P, pool.conditions, args.noise, args.panel, seed=args.seed)
    for label, design in designs.items():
        z = check.separation(design_weights(design, len(pool.conditions))).z(args.plan)
        print(
            f"  {label}: weakest expected z at {args.plan} participants {np.nanmin(z):.2f} on a fresh panel; "
            f"mean over truths of the truth's weakest z {np.nanmean(np.nanmin(z, axis=1)):.2f}"
        )
    _predicted(check, designs, names, len(pool.conditions), args)
    for label, design in optimal.items():
        per_pair = {c: sum(pool.conditions[i] == c for i in design) for c in sorted(set(pool.conditions))}
        print(
            f"  {label}: stimuli per condition "
            + ", ".join(f"{c} {k}" for c, k in sorted(per_pair.items(), key=lambda x: -x[1]))
        )
    planned = _planned(args.criterion[0], plan, args)
    truths = range(len(names)) if args.truths == "all" else [names.index(t) for t in args.truths.split(",")]
    runner_up = _population(P, names, pool, truths, designs["paper"], args)
    if args.predicted_only:
        return
    columns = [*designs, "adaptive"] + (["dedicated"] if args.dedicated else [])
    cells: dict[tuple[int, str], Cell] = {}
    if args.adaptive_sims == 0:
        cells.update({(t, "adaptive"): Cell(None, "not run") for t in truths})
    # one job per (truth, column); the truths planned for the most participants take longest: start them first
    jobs = {
        (t, c): partial(simulate_cell, P, names, pool, designs, args, t, c, float(planned[t, 0]))
        for t in sorted(truths, key=lambda t: -plan[t, 0])
        for c in columns
        if (t, c) not in cells
    }

    def finished(key: tuple[int, str], value: Cell) -> None:
        cells[key] = value
        t = key[0]
        if all((t, c) in cells for c in columns):
            _print_row([names[t], runner_up[t], *(cells[t, c] for c in columns)], start)

    _run(jobs, finished, args.jobs)
    recheck = {
        (t, c): partial(simulate_cell, P, names, pool, designs, args, t, c, float(planned[t, 0]), args.recheck_sims)
        for t, c in _worse_than_paper(cells, truths, [label for label in designs if label.startswith("optimal")])
    }
    if recheck and args.recheck_sims > args.sims:  # the table marks what changed by it with *
        print(
            f"\nRechecked at {args.recheck_sims} simulated studies per count (worse than (a) at {args.sims}, "
            f"{args.adaptive_sims} adaptive):"
        )

        def rechecked(key: tuple[int, str], value: Cell) -> None:
            print(f"  truth {names[key[0]]}, {key[1]}: {cells[key].label} -> {value.label}", flush=True)
            cells[key] = value._replace(label=f"{value.label}*")

        _run(recheck, rechecked, args.jobs)
    rows = [[names[t], runner_up[t], *(cells[t, c] for c in columns)] for t in truths]
    _table(rows, list(designs), args, time.perf_counter() - start)


def _worse_than_paper(cells: dict[tuple[int, str], Cell], truths: Iterable[int], labels: list[str]) -> list:
    """The (truth, design) cells to simulate again with more studies, where some optimal design (``labels``) needs
    more participants than the paper's: one grid step is often within the Monte-Carlo error of 20 studies per count
    (a power of 0.8 carries an SE of 0.09), and "no truth worse" is a claim about each truth. The paper's cell of
    such a truth is simulated again too, so that both sides of the comparison carry the same error. The adaptive
    study with an interim look counts as worse where its studies took more than the paper's count on average or
    within the power's share of them (its planned count is at least 4 by construction, whatever the simulation)."""
    keys = []
    for t in truths:
        paper = cells[t, "paper"].count
        worse = [c for c in labels if paper is not None and _count(cells[t, c]) > paper]
        adaptive = cells.get((t, "adaptive"))
        if paper is not None and adaptive is not None and adaptive.expected is not None:
            worse += ["adaptive"] if max(adaptive.expected, adaptive.budget or 0) > paper else []
        keys += [(t, "paper"), *((t, c) for c in worse)] if worse else []
    return keys


def _run(jobs: dict, finished: Callable[[tuple[int, str], Cell], None], n_jobs: int) -> None:
    """Run each job, in ``n_jobs`` processes when more than one, and hand each result to ``finished`` as it comes."""
    if n_jobs > 1:
        with ProcessPoolExecutor(n_jobs, mp_context=multiprocessing.get_context("fork")) as workers:
            futures = {workers.submit(job): key for key, job in jobs.items()}
            for future in as_completed(futures):
                finished(futures[future], future.result())
    else:
        for key, job in jobs.items():
            finished(key, job())


def _planned(criterion: str, plan: np.ndarray, args: argparse.Namespace) -> np.ndarray:
    """(T, 1) the participants ``criterion`` plans each truth at: the participants plan (``participants_plan``) for the
    participants and total criteria, ``--plan`` for every truth otherwise."""
    return plan if criterion in ("participants", "total") else np.full_like(plan, args.plan)


def _optimal(
    pool: Pool,
    panel: ReferencePanel,
    paper: np.ndarray,
    at_paper: Separation,
    plan: np.ndarray,
    criterion: str,
    args: argparse.Namespace,
) -> np.ndarray:
    """The optimal design under ``criterion``, from the cache when it was chosen before with the same settings."""
    cache = _cache_path(args, criterion)
    if cache is not None and cache.exists():
        with np.load(cache) as cached:
            chosen = cached["chosen"]
        print(f"optimal design ({criterion}) from the cache {cache} (--no-cache to choose it again)")
    else:
        planned = _planned(criterion, plan, args)
        objective = (
            total_need(at_paper, plan, ALPHA, args.power, args.n_comparisons, args.cap_rule)
            if criterion == "total"
            else None
        )
        design = select_design(
            pool,
            panel,
            args.constraints,
            planned,
            args.temperature,
            seed=args.seed,
            baseline=paper if criterion == "relative" else None,
            objective=objective,
        )
        chosen = design.chosen
        print(f"  optimal ({criterion}): weakest expected z {design.weakest:.2f} on the panel it was chosen on")
        if cache is not None:
            with atomic_write(cache, "wb") as handle:
                np.savez(handle, chosen=chosen)
    assert not check_design(pool, args.constraints, chosen.tolist())
    return chosen


def simulate_cell(
    P: np.ndarray,
    names: tuple[str, ...],
    pool: Pool,
    designs: dict[str, np.ndarray],
    args: argparse.Namespace,
    t: int,
    column: str,
    planned: float,
    sims: int | None = None,
) -> Cell:
    """One cell of the table: the participants truth ``t`` needs under the design ``column`` (a label of
    ``designs``, "adaptive", or "dedicated": a design chosen for ``t`` alone at its ``planned`` count), from ``sims``
    simulated studies per count (default ``--sims``; the first ``--sims`` of them are the table's own)."""
    study = Study(P, names, pool, t, args)
    if column == "adaptive":  # from 4 participants up (each batch needs two for its noise ceiling)
        first, lo, n_sims = designs[f"optimal, {args.criterion[0]}"], GRID.index(4), sims or args.adaptive_sims
        if args.sim_jobs > 1:
            with ProcessPoolExecutor(args.sim_jobs, mp_context=multiprocessing.get_context("fork")) as workers:
                result = needed(
                    partial(adaptive_power, study, first, n_sims, workers),
                    args.power,
                    lo,
                    args.integer_counts,
                )
        else:
            trial = partial(study.success_adaptive, first)
            result = needed(partial(power, trial, n_sims), args.power, lo, args.integer_counts)
        print(_screen_summary(study, result.count or max(GRID), n_sims), flush=True)
        if not args.interim_alpha or result.count is None:
            return result
        expected = study.expected_participants(result.count, n_sims)
        budget = study.budget(result.count, n_sims, args.power)
        label = f"{result.label} (E {expected:.1f}; {100 * args.power:.0f} % by {budget})"
        return result._replace(label=label, expected=expected, budget=budget)
    design = dedicated_design(P, pool, t, planned, args) if column == "dedicated" else designs[column]
    return needed(partial(power, partial(study.success, design), sims or args.sims), args.power, 0, args.integer_counts)


def _screen_summary(study: Study, n: int, n_sims: int) -> str:
    """What batch 1's screen left for batch 2 in the ``n_sims`` simulated studies of ``n`` participants: what drives
    (d)."""
    sims = range(n_sims)
    stops = [study.stops[n, sim] for sim in sims if study.stops.get((n, sim)) is not None]
    stopped = (
        f"the interim look stopped {len(stops)} of {len(sims)} studies after batch 1 ({stops.count(study.truth)} on "
        f"the truth); "
        if study.args.interim_alpha
        else ""
    )
    screens = [study.screens[n, sim] for sim in sims if (n, sim) in study.screens]
    if not screens:
        return f"  (d) truth {study.names[study.truth]}, {n} participants: {stopped}no study reached batch 2"
    kept = [c for c, _ in screens]
    times_kept = {m: sum(m in c for c in kept) for m in range(len(study.names))}
    by_count = sorted(times_kept.items(), key=lambda x: -x[1])
    others = [f"{study.names[m]} {k}" for m, k in by_count if k and m != study.truth]
    size = np.mean([len(c) for c in kept])
    shared = np.mean([sd for _, sd in screens])
    return (
        f"  (d) truth {study.names[study.truth]}, {n} participants: {stopped}batch 1 ({(n + 1) // 2}) kept the truth a "
        f"candidate in {times_kept[study.truth]} of {len(kept)} studies, {size:.1f} candidates on average (others: "
        f"{', '.join(others) or 'none'}); fitted shared sd {shared:.1f}"
    )


def _print_row(row: list, start: float) -> None:
    cells = ", ".join(_cell(c) for c in row[2:])
    print(f"  truth {row[0]}: {cells} ({time.perf_counter() - start:.0f} s)", flush=True)


def _cache_path(args: argparse.Namespace, criterion: str) -> Path | None:
    """Where the optimal design of these settings is kept (``--cache-dir``), so that a rerun with other simulation
    settings (``--sims``, ``--jobs``, the population) does not choose it again: keyed by the pool file's bytes and
    every setting the choice depends on."""
    if args.no_cache:
        return None
    digest = hashlib.sha256(Path(args.pool).read_bytes())
    choice = [args.seed, criterion, args.plan, args.temperature, args.panel, args.power, list(args.noise_sd)]
    # the planner's shared sd (0), the plan's floor (2 participants) and the paper's selection rule keep their places
    # in the key, and the cap rule joins it only when it is not participants, so that designs cached before are found
    choice += [0.0, args.fraction, 2.0, "ilp"]
    if criterion == "total" and args.cap_rule != "participants":
        choice.append(args.cap_rule)
    digest.update(json.dumps(choice).encode())
    return Path(args.cache_dir) / f"optimal-{digest.hexdigest()[:16]}.npz"


def dedicated_design(P: np.ndarray, pool: Pool, truth: int, n_participants: float, args) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The design that separates ``truth`` alone from its rivals best: the optimal design's planner and constraints
    with a reference panel of that truth only. What a design for every truth could at best reach for this one, and
    what an adaptive study that had identified the truth would aim at."""
    panel = ReferencePanel(P, pool.conditions, args.noise, args.panel, truths=[truth], seed=args.seed)
    design = select_design(pool, panel, args.constraints, n_participants, args.temperature, seed=args.seed)
    assert not check_design(pool, args.constraints, design.chosen.tolist())
    return design.chosen


def _population(
    P: np.ndarray, names: tuple[str, ...], pool: Pool, truths, design: np.ndarray, args: argparse.Namespace
) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """The simulated population against the paper's finding: 30 participants on the paper's design, the
    truth's and the runner-up's mean r and the lower noise ceiling. Returns each truth's runner-up."""
    print(f"Simulated population (shared sd {args.shared_sd:g}, own noise sd {list(args.noise.sd)}): 30 participants")
    print("| truth | r(truth) | runner-up | r(runner-up) | lower noise ceiling | upper |")
    print("|---|---|---|---|---|---|")
    runner_up = {}
    for t in truths:
        ratings = Study(P, names, pool, t, args).people(0, 30)[:, design]
        r = participant_model_correlations(ratings, P[:, design]).mean(axis=0)
        ceiling = noise_ceiling(ratings)
        j = max((m for m in range(len(names)) if m != t), key=lambda m: r[m])
        runner_up[t] = names[j]
        print(f"| {names[t]} | {r[t]:.3f} | {names[j]} | {r[j]:.3f} | {ceiling.lower:.3f} | {ceiling.upper:.3f} |")
    print()
    return runner_up


def _predicted(panel: ReferencePanel, designs: dict, names: tuple[str, ...], n: int, args: argparse.Namespace) -> None:
    """The criterion's own prediction: participants needed for the truth to beat every rival (Sidak over all pairs)."""
    print()
    print(
        "Predicted by the criterion on a fresh panel (no simulation): "
        "participants needed for the truth to beat every rival"
    )
    print("| truth | " + " | ".join(designs) + " |")
    print("|---|" + "---|" * len(designs))
    needed = {
        label: panel.separation(design_weights(d, n)).participants_needed_per_truth(
            ALPHA, args.power, args.n_comparisons
        )
        for label, d in designs.items()
    }
    for t, name in enumerate(names):
        print(
            f"| {name} | "
            + " | ".join("unreachable" if np.isinf(needed[k][t]) else f"{needed[k][t]:.0f}" for k in designs)
            + " |"
        )
    print("| **mean** | " + " | ".join(f"{np.mean(np.minimum(v, 1000)):.1f}" for v in needed.values()) + " |")
    print()


def _cell(cell: Cell) -> str:
    return cell.label


def _table(rows: list, labels: list[str], args, elapsed: float) -> None:  # type: ignore[no-untyped-def]
    """The table of participants needed, its mean row, and per optimal design the change against the paper's
    design and the truths it leaves worse off."""
    print()
    columns = [f"({'a' if k == 0 else 'b' if k == 1 else 'c'}) {label}" for k, label in enumerate(labels)]
    columns += ["(d) adaptive, 2 batches"] + (["(e) dedicated to the truth"] if args.dedicated else [])
    print("| truth | runner-up (population) | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for row in rows:
        print(f"| {row[0]} | {row[1]} | " + " | ".join(_cell(c) for c in row[2:]) + " |")
    means, counts = [], []
    expected: list[float] | None = None  # (d)'s average participants, when every truth's studies could stop early
    budget: list[int] | None = None  # (d)'s participants within which --power of its studies identified the truth
    for k in range(2, 2 + len(columns)):
        cells: list[Cell] = [r[k] for r in rows]
        if all(c.label == "not run" for c in cells):
            means.append("not run")
            counts.append(None)
            continue
        counts.append([_count(c) for c in cells])
        capped = any(c.count is None for c in cells)
        means.append(f"{np.mean(counts[-1]):.1f}" + (f" (> x counted as {BEYOND_GRID})" if capped else ""))
        if all(c.expected is not None for c in cells):
            expected = [float(c.expected) for c in cells]  # type: ignore[arg-type]
            budget = [int(c.budget) for c in cells]  # type: ignore[arg-type]
            means[-1] += f" (E {np.mean(expected):.1f}; {100 * args.power:.0f} % by {np.mean(budget):.1f})"
    print("| **mean** | | " + " | ".join(means) + " |")
    if any(c.label.endswith("*") for r in rows for c in r[2:]):
        print(f"*: {args.recheck_sims} simulated studies per count (--recheck-sims), the first {args.sims} as before")
    print()
    paper = np.array(counts[0], dtype=float)
    for column, values in zip(columns[1:], counts[1:]):
        if values is None:
            continue
        worse = [f"{r[0]} {v} against {int(p)}" for r, v, p in zip(rows, values, paper) if v > p]
        print(
            f"{column}: {100 * (np.mean(values) / paper.mean() - 1):+.0f} % participants against (a); "
            f"worse than (a): {', '.join(worse) or 'none'}"
        )
    if expected is not None:
        worse = [f"{r[0]} {e:.1f} against {int(p)}" for r, e, p in zip(rows, expected, paper) if e > p]
        change = 100 * (np.mean(expected) / paper.mean() - 1)
        print(
            f"(d) adaptive, participants the studies took on average (E): {change:+.0f} % against (a); more than (a): "
            f"{', '.join(worse) or 'none'}"
        )
    if budget is not None:
        worse = [f"{r[0]} {b} against {int(p)}" for r, b, p in zip(rows, budget, paper) if b > p]
        print(
            f"(d) adaptive, participants within which {100 * args.power:.0f} % of the studies had identified the truth "
            f"(read as (a)'s count is): {100 * (np.mean(budget) / paper.mean() - 1):+.0f} % against (a); more than "
            f"(a): {', '.join(worse) or 'none'}"
        )
    print()
    print(
        f"Population: shared deviation sd {args.shared_sd:g}, own noise sd {list(args.noise.sd)} (logit units), "
        f"a draw per simulated study; the optimal designs planned for {args.plan} participants with plain noise, "
        f"criteria {', '.join(args.criterion)}"
        + (f" (cap rule {args.cap_rule})" if "total" in args.criterion else "")
        + f"; {args.constraints.n_stimuli} rated stimuli per design. "
        + (
            f"(d): batch 1 on the {args.criterion[0]} design, batch 2 chosen with {args.adaptive_panel} reference "
            f"participants per candidate truth and shared deviation sd {args.adaptive_shared_sd}"
            + (
                f"; an interim look after batch 1 at alpha {args.interim_alpha:g}, the final test at "
                f"{final_alpha(ALPHA, args.interim_alpha, 1):g}. "
                if args.interim_alpha
                else ". "
            )
            if args.adaptive_sims
            else ""
        )
        + f"Power >= {args.power} with {args.sims} simulated studies per count ({args.adaptive_sims} adaptive), "
        f"{args.resamples} bootstrap resamples each; grid {list(GRID)}"
        + (", refined to whole numbers" if args.integer_counts else "")
        + ". Monte-Carlo SE of a power of 0.8: "
        f"{np.sqrt(0.16 / args.sims):.3f}"
        + (f" ({np.sqrt(0.16 / args.adaptive_sims):.3f} adaptive). " if args.adaptive_sims else ". ")
        + f"Wall time {elapsed / 60:.1f} min."
    )


if __name__ == "__main__":
    main()
