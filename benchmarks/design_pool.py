"""The candidate pool for ``benchmarks/design.py``: controversial stimuli of every MNIST model pair plus
natural test images, with every model's calibrated probabilities, cached as one ``.npz``.

Per unordered pair of the nine models, every cell a sweep synthesises is synthesised (``--seeds-per-cell``
seeds each, default one, batched): the 90 ordered class pairs (a, b), a != b, listed by offset b - a (mod 10) so
that the first 20 are the paper's balanced ones (every class twice per side: b = a+1 and a+5). ``--offsets 1 5 3``
gives the 30-cell pool of the benchmark runs before 2026-11-26, which capped any pair at 30 stimuli. With more
than one seed per cell the pool's ``seed`` column numbers them; the paper's kind of design (``benchmarks/design.py``
(a) and (b), ``design_study.py``'s balanced design) takes each cell's most controversial seed, as a sweep's export
does, and the optimal design may take any of them.
Synthesis runs the project's engine with the paper's settings except ``max_steps`` (default 300, a
CPU budget; on kde|abs 1,000 steps accept the same 25 of 90 cells: they converge first) and ``--stop-score``
(default 0.9 as in ``synthesize.py``: an image stops once its hard score reaches it; ``none`` is the paper's rule,
run until the pixels stop moving, with ``--max-steps 1000``). ``--init test_image`` starts the seeds a run adds
from random test images instead of noise, as ``synthesize.py init=test_image`` does; the pool's ``init`` column
says which start each candidate had.
Natural images: ``--natural-per-class`` random test images per class. Then all nine models rate
every image (``evaluate.py``'s code path).

From a real sweep (``--from-sweep multirun/exp1_mnist``, after ``synthesize.py -m experiment=exp1_mnist``): no
synthesis here; the pool is what ``design_study.py`` would offer from that sweep, every accepted cell's
``--seeds-per-cell`` most controversial seeds as the 8-bit PNGs people see, with the hard scores the sweep accepted
them by. The sweep's settings differ from this script's synthesis where it matters for the hard pairs: failed cells
are retried from new starts (``max_attempts``) and the KDE's pairs start from test images, so nearly every cell has
a stimulus (kde|abs 88 of 90, against 25 here from one noise start).

Ranked natural images (optional, ``--ranked-natural-threshold T``; the most controversial natural images
that ``rank_natural.py`` exports): all nine models rate the whole test set, and for every model pair
and ordered class pair the test image that ``rank_natural.py ... top_k=1`` would export for that cell
joins the pool as a candidate of that pair (source ``ranked_natural``, its cell's targets) when its hard
score reaches T (0.5 in docs/design_evidence.md: no test image reaches synthesis's 0.75 for any of kde's
pairs); an image that tops several cells of one pair joins once, for its best. The paper's and the
random design (``benchmarks/design.py``) do not draw on them. ``--from-pool`` keeps an earlier pool's
candidates verbatim and only adds these (no synthesis).

One-sided stimuli (optional, ``--one-sided kde:abs``; docs/design_evidence.md): per named model pair, both ways
round, images that one model reads as class i (each of the ten) and the other as no digit at all, which the
sigmoid readouts allow and the paper's stimuli (one class per model) never ask for. The engine maximises the
paper's objective with an eleventh "no digit" logit, minus the LogSumExp of the model's ten, that the blind model
must detect (so every one of its classes is low); the seeing model's eleventh logit is a constant -30, an inert
term. ``--one-sided-seeds`` starts per (direction, class) from noise, seeds 1000 up; ``--stop-score`` and
``--max-steps`` as for synthesis (with ``--from-sweep`` too, where they apply to these alone). They join the pool as
candidates of their pair (source ``one_sided``, the seen class as both targets for the class balance); the paper's
and the random design do not draw on them.

    python benchmarks/design_pool.py [--out outputs/design/pool.npz] [--max-steps 300] [--offsets 1 5 3 ...]
    python benchmarks/design_pool.py --from-pool outputs/design/pool.npz --ranked-natural-threshold 0.5 \
        --out outputs/design/pool_ranked.npz
    python benchmarks/design_pool.py --from-pool outputs/design/pool.npz --seeds-per-cell 3 \
        --out outputs/design/pool_seeds3.npz   # two more seeds of every cell, the first kept verbatim
    python benchmarks/design_pool.py --from-pool outputs/design/pool.npz --seeds-per-cell 2 --init test_image \
        --out outputs/design/pool_test_start.npz   # a second seed of every cell, started from a test image
    python benchmarks/design_pool.py --stop-score none --max-steps 1000 --threads 2 \
        --out outputs/design/pool_converged.npz   # the starts of pool.npz, synthesised by the paper's rule
    python benchmarks/design_pool.py --from-sweep multirun/exp1_mnist --threads 2 \
        --out outputs/design/pool_sweep.npz   # the accepted cells of Experiment 1's sweep
    python benchmarks/design_pool.py --from-pool outputs/design/pool_sweep.npz --one-sided kde:abs \
        --one-sided-seeds 10 --stop-score 0.995 --max-steps 1000 --out outputs/design/pool_sweep_one_sided.npz
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import torch
from pydantic import TypeAdapter, ValidationError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controversial.analysis.model_responses import probabilities as model_probabilities  # noqa: E402
from controversial.atomic import atomic_write  # noqa: E402
from controversial.data import load_uint8  # noqa: E402
from controversial.settings import Probability  # noqa: E402
from controversial.study.display import png_to_uint8  # noqa: E402
from controversial.study.selection import SweepStimulus, best_per_cell, collect_sweep  # noqa: E402
from controversial.synthesis.options import SynthesisOptions  # noqa: E402
from controversial.synthesis.engine import (  # noqa: E402
    BatchResult,
    noise_images,
    ordered_class_pairs,
    synthesize_batch,
)
from controversial.synthesis.natural import top_natural  # noqa: E402
from controversial.synthesis.runstate import SETTINGS_NAME  # noqa: E402
from controversial.zoo.bundled import load_model  # noqa: E402

MODELS = ("vgg", "vgg_neg", "capsnet", "pcn", "madry_linf", "madry_l2", "capsnet_recon", "kde", "abs")
OFFSETS = (1, 5, 3, 2, 4, 6, 7, 8, 9)  # b = a + offset (mod 10); the first two give the paper's balanced 20
_PROBABILITY = TypeAdapter(Probability)
SYNTHESIS_OPTIONS = ("max_steps", "offsets", "init", "stop_score")  # what --from-sweep takes from the sweep instead


def pair_cells(offsets: tuple[int, ...]) -> list[tuple[int, int]]:
    """Ten ordered class pairs per offset: each class is each side's target once per offset."""
    return [(a, (a + d) % 10) for d in offsets for a in range(10)]


def ranked_natural(test_probabilities: np.ndarray, threshold: float) -> dict[str, np.ndarray]:
    """Per model pair, the test images ``rank_natural.py ... top_k=1`` exports for its 90 cells, those reaching
    ``threshold``, each image once (its best cell): pool columns ``test_index``, ``pairs``, ``classes``, ``hard``."""
    logits = torch.logit(torch.from_numpy(test_probabilities).double(), eps=1e-12)  # (M, N, K)
    cells = ordered_class_pairs(test_probabilities.shape[2])
    rows: list[tuple[int, tuple[int, int], tuple[int, int], float]] = []
    for i, j in combinations(range(len(MODELS)), 2):
        best: dict[int, tuple[float, tuple[int, int]]] = {}
        for pick in top_natural(logits[i], logits[j], cells, top_k=1, sharpness=1.0):
            if pick.hard >= threshold and pick.hard > best.get(pick.index, (-1.0, (0, 0)))[0]:
                best[pick.index] = (pick.hard, (pick.class_a, pick.class_b))
        rows += [(index, (i, j), cell, hard) for index, (hard, cell) in sorted(best.items())]
    return {
        "test_index": np.array([r[0] for r in rows], dtype=np.int64),
        "pairs": np.array([r[1] for r in rows], dtype=np.int64).reshape(-1, 2),
        "classes": np.array([r[2] for r in rows], dtype=np.int64).reshape(-1, 2),
        "hard": np.array([r[3] for r in rows], dtype=np.float64),
    }


def synthesize_seeds(
    models: dict,
    args: argparse.Namespace,
    cells: list[tuple[int, int]],
    seed_indices: range,
    test_images: torch.Tensor,
) -> dict[str, np.ndarray]:
    """Every cell of every pair synthesised once per seed index, each rated by every model: the pool's columns
    (source ``synthetic``). Seed index 0 of pair i starts from seed ``--seed`` + i, as pools before the ``seed``
    column did; index k > 0 from ``--seed`` + 100 k + i, so no two (pair, seed index) share a start. ``--init``
    says what the start is: uniform noise (the paper's) or, as ``synthesize.py init=test_image`` starts, a random
    test image of any class per cell, drawn from that seed."""
    settings = SynthesisOptions(max_steps=args.max_steps, stop_score=args.stop_score)
    batches = _Batches("synthetic", args.init)
    for k in seed_indices:
        for i, (a, b) in enumerate(combinations(MODELS, 2)):
            seed = args.seed + 100 * k + i
            initial = _starts(cells, seed, args.init, test_images)
            result = synthesize_batch([models[a], models[b]], torch.tensor(cells), initial, settings, seed=seed)
            batches.add(result, (MODELS.index(a), MODELS.index(b)), cells, k, f"seed {k} ({args.init}), {a} vs {b}")
    return batches.columns(models)


class _Batches:
    """Synthesised batches as they come (each reported as it ends), and the pool's columns they make."""

    def __init__(self, source: str, init: str) -> None:
        self.source, self.init, self.start = source, init, time.perf_counter()
        self.images: list[torch.Tensor] = []
        self.hard: list[torch.Tensor] = []
        self.pairs: list[tuple[int, int]] = []
        self.classes: list[tuple[int, int]] = []
        self.seeds: list[int] = []

    def add(
        self, result: BatchResult, pair: tuple[int, int], classes: list[tuple[int, int]], seed_index: int, label: str
    ) -> None:
        """One batch: its images were synthesised for model ``pair`` with these ``classes`` as targets."""
        self.images.append(result.images)
        self.hard.append(result.hard)
        self.pairs += [pair] * len(classes)
        self.classes += classes
        self.seeds += [seed_index] * len(classes)
        print(
            f"{label}: {int((result.hard >= 0.75).sum())}/{len(classes)} at >= 0.75, {result.total_seconds:.0f} s "
            f"(total {time.perf_counter() - self.start:.0f} s)",
            flush=True,
        )

    def columns(self, models: dict) -> dict[str, np.ndarray]:
        """The pool's columns of every batch added, each image rated by every model."""
        images = torch.cat(self.images)
        n = len(self.pairs)
        return {
            "probabilities": _rate(models, images).astype(np.float32),
            "pairs": np.array(self.pairs, dtype=np.int64),
            "classes": np.array(self.classes, dtype=np.int64),
            "hard": torch.cat(self.hard).numpy().astype(np.float64),
            "true_class": np.full(n, -1),
            "test_index": np.full(n, -1),
            "source": np.array([self.source] * n),
            "seed": np.array(self.seeds, dtype=np.int64),
            "init": np.array([self.init] * n),
            "images": (images * 255).round().to(torch.uint8).numpy(),
        }


class _WithNoDigit:
    """A model with an eleventh calibrated logit: "no digit" (minus the LogSumExp of its ten, high only when every
    class is low) for the blind model of a one-sided stimulus, a constant -30 (an inert term) for the seeing one."""

    def __init__(self, model, blind: bool) -> None:  # type: ignore[no-untyped-def]
        self.model, self.blind, self.name = model, blind, model.name

    def reset_state(self) -> None:
        self.model.reset_state()

    def set_active_rows(self, rows: torch.Tensor) -> None:
        self.model.set_active_rows(rows)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        logits = self.model(images)
        extra = -torch.logsumexp(logits, 1, keepdim=True) if self.blind else torch.full_like(logits[:, :1], -30.0)
        return torch.cat([logits, extra], 1)


def one_sided_stimuli(models: dict, pairs: list[tuple[str, str]], args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Per model pair, both ways round, ``--one-sided-seeds`` images per class that the seeing model reads as that
    class and the blind model as no digit, each rated by every model: the pool's columns (source ``one_sided``)."""
    settings = SynthesisOptions(max_steps=args.max_steps, stop_score=args.stop_score)
    cells = [(c, 10) for c in range(10)]  # the seeing model's class, the blind model's "no digit"
    seen = [(c, c) for c, _ in cells]  # the pool's targets: the seen class on both sides, for the class balance
    batches = _Batches("one_sided", "noise")
    for first, second in pairs:
        for seeing, blind in ((first, second), (second, first)):
            duo = [_WithNoDigit(models[seeing], False), _WithNoDigit(models[blind], True)]
            for k in range(args.one_sided_seeds):
                seed = 1000 + k
                initial = noise_images(cells, [seed] * len(cells), (1, 28, 28))
                result = synthesize_batch(duo, torch.tensor(cells), initial, settings, seed=seed)
                label = f"one-sided seed {k}, {seeing} sees a digit, {blind} none"
                batches.add(result, (MODELS.index(seeing), MODELS.index(blind)), seen, k, label)
    return batches.columns(models)


def _starts(cells: list[tuple[int, int]], seed: int, init: str, test_images: torch.Tensor) -> torch.Tensor:
    """(len(cells), 1, 28, 28) starting images in [0, 1]: noise per (cell, seed), or random test images."""
    if init == "noise":
        return noise_images(cells, [seed] * len(cells), (1, 28, 28))
    picks = torch.randint(len(test_images), (len(cells),), generator=torch.Generator().manual_seed(seed))
    return test_images[picks].float() / 255.0


def synthesize_pool(
    models: dict, args: argparse.Namespace, test_images: torch.Tensor, test_labels: torch.Tensor
) -> dict[str, np.ndarray]:
    """Every cell of every pair, synthesised ``--seeds-per-cell`` times, plus ``--natural-per-class`` random test
    images per class, each rated by every model: the pool's columns (source ``synthetic`` and ``natural``)."""
    pool = synthesize_seeds(models, args, pair_cells(tuple(args.offsets)), range(args.seeds_per_cell), test_images)
    _append(pool, natural_candidates(models, args, test_images, test_labels))
    return {"models": np.array(MODELS), **pool, "max_steps": args.max_steps, "stop_score": _stored(args.stop_score)}


def natural_candidates(
    models: dict, args: argparse.Namespace, test_images: torch.Tensor, test_labels: torch.Tensor
) -> dict[str, np.ndarray]:
    """``--natural-per-class`` random test images per class (drawn from ``--seed``), each rated by every model: the
    pool's columns (source ``natural``)."""
    rng = np.random.default_rng(args.seed)
    natural = np.sort(
        np.concatenate(
            [
                rng.choice(np.flatnonzero(test_labels.numpy() == c), args.natural_per_class, replace=False)
                for c in range(10)
            ]
        )
    )
    return {
        "probabilities": _rate(models, test_images[natural].float() / 255.0).astype(np.float32),
        "pairs": np.full((len(natural), 2), -1, dtype=np.int64),
        "classes": np.full((len(natural), 2), -1, dtype=np.int64),
        "hard": np.full(len(natural), np.nan),
        "true_class": test_labels.numpy()[natural],
        "test_index": natural,
        "source": np.array(["natural"] * len(natural)),
        "seed": np.full(len(natural), -1),
        "init": np.array([""] * len(natural)),
        "images": test_images[natural].numpy(),
    }


def read_sweep(sweep_dir: Path, seeds_per_cell: int) -> tuple[list[SweepStimulus], dict]:
    """A sweep's candidates for the pool (every accepted cell's ``seeds_per_cell`` most controversial seeds) and the
    synthesis settings its pairs ran with; a sweep the benchmark cannot use is a ``ValueError`` saying why."""
    stimuli = best_per_cell(collect_sweep(sweep_dir), ("synthetic",), seeds_per_cell)
    datasets = sorted({s.row.dataset for s in stimuli})
    if datasets != ["mnist"]:
        raise ValueError(f"{sweep_dir} holds datasets {datasets}; the benchmark needs MNIST only")
    others = sorted({m for s in stimuli for m in s.pair} - set(MODELS))
    if others:
        raise ValueError(f"{sweep_dir} has models {others} beyond the benchmark's {list(MODELS)}")
    present = {s.pair for s in stimuli}
    missing = [f"{a} vs {b}" for a, b in combinations(MODELS, 2) if tuple(sorted((a, b))) not in present]
    if missing:
        raise ValueError(f"{sweep_dir} has no accepted stimuli of {', '.join(missing)}")
    return stimuli, _sweep_settings(sweep_dir)


def sweep_pool(
    sweep_dir: Path,
    stimuli: list[SweepStimulus],
    settings: dict,
    models: dict,
    args: argparse.Namespace,
    test_images: torch.Tensor,
    test_labels: torch.Tensor,
) -> dict[str, np.ndarray]:
    """The pool ``design_study.py`` would offer from a real sweep (``synthesize.py -m experiment=exp1_mnist``,
    ``read_sweep``): the accepted stimuli as the 8-bit PNGs people would see, with the hard scores the sweep accepted
    them by, plus the random natural images; each rated by every model. Unlike the benchmark's own synthesis, the
    sweep retries failed cells (``max_attempts``) and starts the KDE's pairs from test images, so its pool is what a
    user's study draws on."""
    pairs, classes, pixels = [], [], []
    for stim in stimuli:
        (i, j), (a, b) = [MODELS.index(m) for m in stim.pair], stim.oriented_classes
        pairs.append((i, j) if i < j else (j, i))
        classes.append((a, b) if i < j else (b, a))
        pixels.append(png_to_uint8(stim.image_path.read_bytes())[None])
    images = torch.from_numpy(np.stack(pixels))
    counts = {pair: pairs.count(pair) for pair in sorted(set(pairs))}
    print(
        f"{sweep_dir}: {len(stimuli)} accepted stimuli, per pair {min(counts.values())}-{max(counts.values())} "
        f"(max_steps {settings['max_steps']}, stop_score {settings['stop_score']})",
        flush=True,
    )
    pool = {
        "probabilities": _rate(models, images.float() / 255.0).astype(np.float32),
        "pairs": np.array(pairs, dtype=np.int64),
        "classes": np.array(classes, dtype=np.int64),
        "hard": np.array([s.row.hard_score for s in stimuli], dtype=np.float64),
        "true_class": np.full(len(stimuli), -1),
        "test_index": np.full(len(stimuli), -1),
        "source": np.array(["synthetic"] * len(stimuli)),
        "seed": np.array([s.row.seed for s in stimuli], dtype=np.int64),
        "init": np.array([s.row.init.split(":")[0] for s in stimuli]),  # the manifest's "test_image:<index>"
        "images": images.numpy(),
    }
    _append(pool, natural_candidates(models, args, test_images, test_labels))
    return {
        "models": np.array(MODELS),
        **pool,
        "max_steps": settings["max_steps"],
        "stop_score": _stored(settings["stop_score"]),
        "sweep": np.array(str(sweep_dir)),
    }


def _sweep_settings(sweep_dir: Path) -> dict:
    """The synthesis settings every pair of the sweep ran with (``runstate.SETTINGS_NAME``); pairs that differ are a
    ``ValueError`` naming them, since the pool records one setting."""
    seen: dict[tuple, list[str]] = {}
    for path in sorted(sweep_dir.rglob(SETTINGS_NAME)):
        try:
            synthesis = json.loads(path.read_text())["synthesis"]
            key = (synthesis["max_steps"], synthesis["stop_score"])
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error})") from None
        except (KeyError, TypeError):
            raise ValueError(f"{path} records no synthesis.max_steps and synthesis.stop_score") from None
        seen.setdefault(key, []).append(path.parent.name)
    if not seen:
        raise ValueError(f"{sweep_dir} has no {SETTINGS_NAME}: point it at a synthesize.py sweep")
    if len(seen) > 1:
        raise ValueError(
            f"{sweep_dir}: pairs ran with different (max_steps, stop_score): "
            + "; ".join(f"{key}: {', '.join(runs)}" for key, runs in seen.items())
        )
    ((max_steps, stop_score),) = seen
    return {"max_steps": max_steps, "stop_score": stop_score}


def _append(pool: dict[str, np.ndarray], added: dict[str, np.ndarray]) -> None:
    """Append candidates (the same per-candidate columns) to the pool's columns, in place."""
    for key, column in added.items():
        pool[key] = np.concatenate([pool[key], column], axis=1 if key == "probabilities" else 0)


def _rate(models: dict, images: torch.Tensor) -> np.ndarray:
    """(M, N, K) every model's calibrated probabilities of (N, 1, 28, 28) images in [0, 1]."""
    probabilities = []
    for name, model in models.items():
        t0 = time.perf_counter()
        probabilities.append(model_probabilities([model], images.numpy(), 256)[0])
        print(f"evaluated {name} on {len(images)} images ({time.perf_counter() - t0:.0f} s)", flush=True)
    return np.stack(probabilities)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "outputs" / "design" / "pool.npz"))
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument(
        "--offsets", type=int, nargs="+", default=OFFSETS, help="class offsets b - a to synthesise; must start with 1 5"
    )
    parser.add_argument("--natural-per-class", type=int, default=50)
    parser.add_argument(
        "--ranked-natural-threshold",
        type=float,
        default=None,
        help="add each cell's most controversial test image when its hard score reaches this (default: none)",
    )
    parser.add_argument(
        "--seeds-per-cell",
        type=int,
        default=1,
        help="synthesis seeds per cell (with --from-pool: the earlier pool's are kept and the rest added)",
    )
    parser.add_argument(
        "--from-pool",
        help="keep this earlier pool's candidates verbatim and only add seeds (--seeds-per-cell) or the ranked "
        "natural ones",
    )
    parser.add_argument(
        "--from-sweep",
        help="build the pool from a real sweep's accepted cells (synthesize.py -m experiment=exp1_mnist) instead of "
        "synthesising: its --seeds-per-cell most controversial accepted seeds per cell, plus the natural images",
    )
    parser.add_argument(
        "--init",
        choices=("noise", "test_image"),
        default="noise",
        help="the starts of the seeds this run synthesises: uniform noise (the paper's) or random test images "
        "(synthesize.py init=test_image); the pool's init column records each candidate's",
    )
    parser.add_argument(
        "--stop-score",
        type=_stop_score,
        default=0.9,
        help="stop an image once its hard score reaches this (synthesize.py's synthesis.stop_score); none: the "
        "paper's rule, until the pixels stop moving or --max-steps",
    )
    parser.add_argument(
        "--one-sided",
        type=_model_pair,
        nargs="+",
        default=[],
        metavar="A:B",
        help="add one-sided stimuli of these model pairs: one model sees a digit, the other none (default: none)",
    )
    parser.add_argument("--one-sided-seeds", type=int, default=10, help="one-sided starts per (direction, class)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for synthesis and rating")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if list(args.offsets[:2]) != [1, 5] or not set(args.offsets) <= set(range(1, 10)):
        parser.error(f"--offsets must start with 1 5 (the paper's balanced cells) and lie in 1..9, got {args.offsets}")
    if args.seeds_per_cell < 1:
        parser.error(f"--seeds-per-cell must be >= 1, got {args.seeds_per_cell}")
    if args.one_sided_seeds < 1:
        parser.error(f"--one-sided-seeds must be >= 1, got {args.one_sided_seeds}")
    if len({frozenset(pair) for pair in args.one_sided}) < len(args.one_sided):
        parser.error(f"--one-sided names a pair twice (each is synthesised both ways round): {args.one_sided}")
    if args.from_sweep:
        if args.from_pool:
            parser.error("give --from-sweep or --from-pool, not both")
        if not Path(args.from_sweep).is_dir():
            parser.error(f"--from-sweep {args.from_sweep} is not a directory")
        used = ("max_steps", "stop_score") if args.one_sided else ()  # the one-sided stimuli are synthesised here
        ignored = [
            name for name in SYNTHESIS_OPTIONS if name not in used and getattr(args, name) != parser.get_default(name)
        ]
        if ignored:
            given = ", ".join(f"--{name.replace('_', '-')}" for name in ignored)
            parser.error(f"{given}: not used with --from-sweep, which takes the stimuli as the sweep synthesised them")
        try:
            swept = read_sweep(Path(args.from_sweep), args.seeds_per_cell)
        except ValueError as error:  # SelectionError (no manifest) included
            parser.error(f"--from-sweep {error}")
    start = time.perf_counter()
    out = Path(args.out)
    pool, have = None, 0
    if args.from_pool:  # checked before any model loads
        pool = _earlier_pool(Path(args.from_pool), parser, redo_ranked=args.ranked_natural_threshold is not None)
        have = _seeds_per_cell(pool)
        if args.seeds_per_cell <= have and args.ranked_natural_threshold is None and not args.one_sided:
            parser.error(
                f"--from-pool {args.from_pool} already has {have} seeds per cell: nothing to add (give a larger "
                "--seeds-per-cell, --ranked-natural-threshold or --one-sided)"
            )
        if args.one_sided and (pool["source"] == "one_sided").any():
            parser.error(f"--from-pool {args.from_pool} already has one-sided stimuli: start from a pool without")
        if args.seeds_per_cell <= have and args.init != "noise":
            parser.error(f"--init {args.init} starts the seeds this run adds, and it adds none: give --seeds-per-cell")
        if args.seeds_per_cell > have:  # the seeds added must be synthesised as the pool's were
            if "sweep" in pool:
                parser.error(
                    f"--from-pool {args.from_pool} was built from the sweep {pool['sweep']}: add seeds by running the "
                    "sweep with seeds_per_cell and building the pool from it again (--from-sweep)"
                )
            if pool["max_steps"] != args.max_steps:
                parser.error(
                    f"--from-pool {args.from_pool} was synthesised with --max-steps {pool['max_steps']}: give it"
                )
            if not np.array_equal(pool["stop_score"], _stored(args.stop_score), equal_nan=True):
                parser.error(
                    f"--from-pool {args.from_pool} was synthesised with --stop-score {_shown(pool['stop_score'])}: "
                    "give it"
                )
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    models = {name: load_model(name, "mnist", None, args.data_root) for name in MODELS}
    for model in models.values():
        model.eval()
    test_images, test_labels = load_uint8("mnist", "test", args.data_root, False)
    test_images = test_images.reshape(len(test_images), 1, 28, 28)
    if args.from_sweep:
        pool = sweep_pool(Path(args.from_sweep), *swept, models, args, test_images, test_labels)
    elif pool is None:
        pool = synthesize_pool(models, args, test_images, test_labels)
    elif args.seeds_per_cell > have:
        first = (pool["seed"] == 0) & (pool["pairs"] == [0, 1]).all(axis=1)
        cells = [(int(a), int(b)) for a, b in pool["classes"][first]]
        _append(pool, synthesize_seeds(models, args, cells, range(have, args.seeds_per_cell), test_images))
    if args.ranked_natural_threshold is not None:
        _add_ranked_natural(pool, models, test_images, args.ranked_natural_threshold)
    if args.one_sided:
        _append(pool, one_sided_stimuli(models, args.one_sided, args))
    with atomic_write(out, "wb") as handle:
        np.savez_compressed(handle, **pool)
    counts = {s: int((pool["source"] == s).sum()) for s in ("synthetic", "natural", "ranked_natural", "one_sided")}
    print(
        f"wrote {out}: {counts['synthetic']} synthetic + {counts['natural']} natural + {counts['ranked_natural']} "
        f"ranked natural + {counts['one_sided']} one-sided ({time.perf_counter() - start:.0f} s)"
    )


def _add_ranked_natural(pool: dict[str, np.ndarray], models: dict, test_images: torch.Tensor, threshold: float) -> None:
    """Append the ranked natural candidates (``ranked_natural``) to the pool's columns, in place."""
    test_ratings = _rate(models, test_images.float() / 255.0)
    ranked = ranked_natural(test_ratings, threshold)
    index = ranked["test_index"]
    added = {
        "probabilities": test_ratings[:, index].astype(np.float32),
        "pairs": ranked["pairs"],
        "classes": ranked["classes"],
        "hard": ranked["hard"],
        "true_class": np.full(len(index), -1),
        "test_index": index,
        "source": np.array(["ranked_natural"] * len(index)),
        "seed": np.full(len(index), -1),
        "init": np.array([""] * len(index)),
        "images": test_images[index].numpy(),
    }
    _append(pool, added)


def _seeds_per_cell(pool: dict[str, np.ndarray]) -> int:
    """The most synthetic candidates any cell (model pair, ordered class pair) of the pool has: its seeds per cell
    (the pool's own seed indices 0..K-1, or a sweep's seed numbers, whatever they are)."""
    synthetic = pool["source"] == "synthetic"
    cells = np.concatenate([pool["pairs"][synthetic], pool["classes"][synthetic]], axis=1)
    return int(np.unique(cells, axis=0, return_counts=True)[1].max())


def _model_pair(text: str) -> tuple[str, str]:
    """``--one-sided``'s A:B: two different models of the pool."""
    names = tuple(text.split(":"))
    if len(names) != 2 or names[0] == names[1] or not set(names) <= set(MODELS):
        raise argparse.ArgumentTypeError(f"must be two different models of {', '.join(MODELS)} as A:B, got {text}")
    return names  # type: ignore[return-value]


def _stop_score(text: str) -> float | None:
    """``--stop-score``: a hard score in (0, 1] (``synthesis.stop_score``'s bound), or none."""
    if text.lower() == "none":
        return None
    try:
        return _PROBABILITY.validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] or none, got {text}") from None


def _stored(stop_score: float | None) -> np.ndarray:
    """The pool's ``stop_score`` entry: NaN for none (the paper's rule)."""
    return np.array(np.nan if stop_score is None else stop_score)


def _shown(stored: np.ndarray) -> str:
    return "none" if np.isnan(stored) else f"{float(stored):g}"


def _earlier_pool(path: Path, parser: argparse.ArgumentParser, redo_ranked: bool) -> dict[str, np.ndarray]:
    """An earlier pool's candidates, verbatim; with ``redo_ranked`` without its ranked natural ones (redone)."""
    with np.load(path) as earlier:
        pool = {key: earlier[key] for key in earlier.files}
    if list(pool["models"]) != list(MODELS):
        parser.error(f"--from-pool {path} rates models {list(pool['models'])}, not {list(MODELS)}")
    if "source" not in pool:  # pools written before 2026-11-26: synthetic and random natural only
        pool["source"] = np.where(pool["pairs"][:, 0] < 0, "natural", "synthetic")
    if "seed" not in pool:  # pools written before 2026-11-27: one seed per cell
        pool["seed"] = np.where(pool["source"] == "synthetic", 0, -1)
    if "init" not in pool:  # pools written before the init column: every synthetic start was noise
        pool["init"] = np.where(pool["source"] == "synthetic", "noise", "")
    if "stop_score" not in pool:  # pools written before --stop-score: synthesize.py's 0.9
        pool["stop_score"] = _stored(0.9)
    keep = (pool["source"] != "ranked_natural") | (not redo_ranked)
    n = len(keep)
    for key, value in pool.items():
        if key == "probabilities":
            pool[key] = value[:, keep]
        elif value.ndim and len(value) == n:
            pool[key] = value[keep]
    return pool


if __name__ == "__main__":
    main()
