"""Do controversial stimuli tell apart models, or checkpoints? Transfer to a held-out trained instance.

For each model pair, stimuli are synthesized three times: against instance 0 of each model (a single checkpoint,
the paper's procedure), against the ensemble of instances 0 and 1 (``model_a.instances=[0,1]``: every instance
must see its target), run jointly (every instance at every step) or in turn (``synthesis.ensemble=round_robin``:
one instance per model per step, a single checkpoint's cost per step). Each set is then scored under instance
2, trained from another seed and used by none: the transfer rate is the share of accepted stimuli that instance 2
also accepts (the hard-score rule over the held-out instances of both models, each held to its own model's side).
A model with fewer than three trained instances is used as its one checkpoint in every condition, and only its
partner is held out (the table says which). ``--conditions ... all_round_robin`` adds an ensemble of every
trained instance but the held-out one, in turn (for models with four or more). Also: what the main job's
stimuli keep on held-out instances (``--main-run``).

    python benchmarks/transfer.py [--pairs madry_l2:vgg pcn:vgg] [--classes 0 1 2 3 4] [--main-run DIR]

Synthesis settings are the main job's (threshold 0.75, up to 5 attempts); ``--classes`` picks the cells (all
ordered pairs among them), ``--max-attempts`` and ``--max-steps`` shorten the runs, ``--set`` passes more
``synthesize.py`` overrides (``--set synthesis.stop_score=null``: the paper's run to convergence);
``--ensemble-set`` adds overrides to the ensemble conditions only (``synthesis.jitter=1``: transformation
robustness), compared with the plain single checkpoint; given more than once, each ensemble condition runs once per
setting, all against the same single checkpoint in one run (a setting may pick a model's instances itself,
``model_a.instances=[0,1,3]``, instead of the condition's). Times are the synthesis wall time recorded in the manifests
(model loading excluded), per accepted stimulus.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HELD_OUT = 2  # the instance neither condition is synthesized against
CONDITIONS = {
    "single": ([0], "joint"),
    "ensemble": ([0, 1], "joint"),
    "round_robin": ([0, 1], "round_robin"),
    "all_round_robin": (None, "round_robin"),
}
"""condition: (the instances synthesized against, None: every trained one but the held-out; synthesis.ensemble).
``all_round_robin`` is not run by default: it differs from ``round_robin`` only for a model with four or more
trained instances."""
DEFAULT_CONDITIONS = ["single", "ensemble", "round_robin"]


@dataclass(frozen=True)
class Cell:
    pair: str
    condition: str
    setting: str  # the ensemble's own overrides (--ensemble-set), "" for none
    synthesized_on: str
    held_out: str
    accepted: int  # stimuli (a retry batch may accept a cell twice: see retry_lookahead) ...
    accepted_cells: int  # ... and the cells they cover
    attempted_cells: int
    transferred: int
    median_heldout: float
    sides_kept: str  # per held-out instance, how many accepted stimuli keep its model's side: which side fails
    seconds_per_accepted: float


def bundled_instances(name: str) -> dict[int, Path]:
    """The trained instances of a bundled model, by seed (``zoo/instances.py``)."""
    from controversial.config import load_model_config
    from controversial.zoo.instances import find_instances

    return find_instances(load_model_config(ROOT / "conf" / "model" / f"{name}.yaml").checkpoint)


def heldout_models(names: tuple[str, str]) -> tuple[list, list[int], list[str]]:
    """Instance ``HELD_OUT`` of each model that has one, with its side (0: model A, 1: model B) and label."""
    from controversial.zoo.checkpoints import load_checkpoint

    models, groups, labels = [], [], []
    for group, name in enumerate(names):
        found = bundled_instances(name)
        if HELD_OUT in found and len(found) > HELD_OUT:
            models.append(load_checkpoint(found[HELD_OUT], os.environ.get("CONTROVERSIAL_DATA_ROOT")))
            groups.append(group)
            labels.append(f"{name}@{HELD_OUT}")
    return models, groups, labels


def heldout_hard(run_dir: Path, rows: list, models: list, groups: list[int]) -> tuple[list[float], list[list[float]]]:
    """The hard score of each row's 8-bit image under all the held-out instances together, and under each alone
    (its model's side only: which side fails), from one pass of every instance over the images."""
    import torch

    from controversial.synthesis.objectives import hard_score
    from controversial.synthesis.stimuli import load_png
    from controversial.zoo.protocol import scoring

    images = torch.stack([torch.from_numpy(load_png(run_dir / r.image_file)) for r in rows])
    targets = torch.tensor([[r.class_a, r.class_b] for r in rows])
    with scoring():
        logits = [m(images) for m in models]
    each = [hard_score([l], targets, [g]).tolist() for l, g in zip(logits, groups)]
    return hard_score(logits, targets, groups).tolist(), each


def run_cell(a: str, b: str, condition: str, setting: list[str], args: argparse.Namespace, out: Path) -> Cell:
    """Synthesize one pair under one condition (``setting``: overrides for this ensemble only) and score the
    accepted stimuli under the held-out instances."""
    from controversial.api import run_command

    used = []
    run_dir = out / f"{a}_vs_{b}_{condition}" / "_".join(o.replace("/", "-") for o in setting)
    chosen, ensemble = CONDITIONS[condition]
    overrides = [f"model_a={a}", f"model_b={b}", "progress=false", "wandb.mode=disabled", "heldout=false"]
    overrides.append(f"synthesis.ensemble={ensemble}")
    for role, name in (("model_a", a), ("model_b", b)):
        trained = bundled_instances(name)
        seeds = chosen if chosen is not None else [s for s in sorted(trained) if s != HELD_OUT]
        given = [o.split("=", 1)[1].strip("[]") for o in setting if o.startswith(f"{role}.instances=")]
        if given:  # the setting picks this model's instances itself (e.g. model_a.instances=[0,1,3])
            seeds = [int(s) for s in given[-1].split(",")]
            setting = [o for o in setting if not o.startswith(f"{role}.instances=")]
            if HELD_OUT in seeds:
                raise SystemExit(f"--ensemble-set {role}.instances must leave out the held-out instance {HELD_OUT}")
        if len(trained) > HELD_OUT:
            overrides.append(f"{role}.instances=[{','.join(map(str, seeds))}]")
            used.append(f"{name}@{'+'.join(map(str, seeds))}" + (" in turn" if ensemble == "round_robin" else ""))
        else:
            used.append(f"{name}@0")
    overrides += [f"synthesis.classes=[{','.join(map(str, args.classes))}]", f"max_attempts={args.max_attempts}"]
    if args.max_steps is not None:
        overrides.append(f"synthesis.max_steps={args.max_steps}")
    overrides += args.set + setting
    label = " ".join(o.split(".", 1)[-1] for o in setting)
    if label:
        used[-1] += f" ({label})"
    rows = run_command("synthesize", overrides, run_dir)
    accepted = [r for r in rows if r.accepted]
    models, groups, labels = heldout_models((a, b))
    scores, each = heldout_hard(run_dir, accepted, models, groups) if accepted and models else ([], [])
    sides = [f"{label} {sum(s >= 0.75 for s in side)}" for label, side in zip(labels, each)] if len(each) > 1 else []
    seconds = sum(r.wall_time_s for r in rows)
    return Cell(
        f"{a} vs {b}",
        condition,
        label,
        ", ".join(used),
        ", ".join(labels) or "none",
        len(accepted),
        len({r.cell for r in accepted}),
        len({r.cell for r in rows}),
        sum(s >= 0.75 for s in scores),
        statistics.median(scores) if scores else float("nan"),
        ", ".join(sides) or "-",
        seconds / len(accepted) if accepted else float("nan"),
    )


def table(cells: list[Cell]) -> str:
    lines = [
        "| pair | synthesized on | held out | cells accepted | transfer to held-out | median held-out hard "
        "| each side kept | s per accepted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        rate = f"{c.transferred}/{c.accepted} ({100 * c.transferred / c.accepted:.0f}%)" if c.accepted else "-"
        median = f"{c.median_heldout:.2f}" if c.accepted else "-"
        seconds = f"{c.seconds_per_accepted:.2f}" if c.accepted else "none accepted"
        lines.append(
            f"| {c.pair} | {c.synthesized_on} | {c.held_out} | {c.accepted_cells}/{c.attempted_cells} | {rate} "
            f"| {median} | {c.sides_kept} | {seconds} |"
        )
    ratios = ["", "| pair | ensemble | transfer / single's | time per accepted / single's |", "|---|---|---|---|"]
    by_pair: dict[str, list[Cell]] = {}
    for c in cells:
        by_pair.setdefault(c.pair, []).append(c)
    for pair, found in by_pair.items():  # ratios only where both conditions accepted something
        single = next((c for c in found if c.condition == "single"), None)
        if single is None or not single.accepted:
            continue
        for ensemble in [c for c in found if c.condition != "single" and c.accepted]:
            rates = [c.transferred / c.accepted for c in (single, ensemble)]
            ratio = f"{rates[1] / rates[0]:.2f}x" if rates[0] > 0 else f"{100 * rates[0]:.0f}% -> {100 * rates[1]:.0f}%"
            time_ratio = ensemble.seconds_per_accepted / single.seconds_per_accepted
            name = f"{ensemble.condition} ({ensemble.setting})" if ensemble.setting else ensemble.condition
            ratios.append(f"| {pair} | {name} | {ratio} | {time_ratio:.2f}x |")
    return "\n".join(lines + ratios)


def main_run_report(run_dir: Path) -> str:
    """What the accepted stimuli of a single-checkpoint run keep under each other trained instance of its models."""
    from controversial.records.manifest import read_manifest
    from controversial.zoo.checkpoints import load_checkpoint

    rows = [r for r in read_manifest(run_dir / "manifest.csv") if r.accepted]
    names = (rows[0].model_a, rows[0].model_b)
    lines = [
        f"main job {names[0]} vs {names[1]} ({len(rows)} accepted stimuli), each model's side of the hard score "
        "under its other instances:",
        "| instance | side kept (>= 0.75) | median side score |",
        "|---|---|---|",
    ]
    for group, name in enumerate(names):
        for seed, path in bundled_instances(name).items():
            if seed == 0:
                continue
            model = load_checkpoint(path, os.environ.get("CONTROVERSIAL_DATA_ROOT"))
            scores, _ = heldout_hard(run_dir, rows, [model], [group])
            kept = sum(s >= 0.75 for s in scores)
            lines.append(
                f"| {name}@{seed} | {kept}/{len(scores)} ({100 * kept / len(scores):.0f}%) "
                f"| {statistics.median(scores):.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="*", default=["madry_l2:vgg", "pcn:vgg", "vgg_neg:vgg", "wrn:jem"])
    parser.add_argument("--conditions", nargs="*", default=DEFAULT_CONDITIONS, choices=list(CONDITIONS))
    parser.add_argument("--classes", nargs="*", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--max-attempts", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument(
        "--set", nargs="*", default=[], help="more synthesize.py overrides, e.g. synthesis.stop_score=null"
    )
    parser.add_argument(
        "--ensemble-set",
        nargs="*",
        action="append",
        default=None,
        help="overrides for the ensemble conditions only, compared in one run with the plain single checkpoint, "
        "e.g. synthesis.jitter=1 (transformation robustness); repeat it for several settings of the ensembles",
    )
    parser.add_argument("--main-run", type=Path, default=None, help="a run dir of the main job to re-score")
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    args = parser.parse_args()
    os.environ.setdefault("CONTROVERSIAL_DATA_ROOT", str(ROOT.parent / "shared" / "data"))
    out = args.out or Path(tempfile.mkdtemp(prefix="transfer_"))
    settings: list[list[str]] = args.ensemble_set or [[]]
    start = time.perf_counter()
    cells = []
    for pair in args.pairs:
        a, b = pair.split(":")
        if max(len(bundled_instances(a)), len(bundled_instances(b))) <= HELD_OUT:
            print(f"{a} vs {b}: skipped, neither model has a trained instance {HELD_OUT} to hold out")
            continue
        for condition in args.conditions:
            for setting in [[]] if condition == "single" else settings:
                cells.append(run_cell(a, b, condition, setting, args, out))
                print(table(cells[-1:]).splitlines()[2], flush=True)
    if cells:
        print(
            f"\ncells among classes {args.classes}, max_attempts {args.max_attempts}, "
            f"overrides {args.set or 'none'}, ensembles also {args.ensemble_set or 'none'}, runs in {out}\n"
        )
        print(table(cells))
    if args.main_run is not None:
        print("\n" + main_run_report(args.main_run))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
