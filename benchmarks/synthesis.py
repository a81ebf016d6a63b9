"""Synthesis speed, measured: batched engine vs one class pair at a time, and every model family.

Part 1 (``--pairs``): for each model pair, seconds for the full 90-cell matrix with the batched
engine (one attempt, no retries) next to the same settings run one cell at a time (the public
tutorial's way) on a stated subset of cells and scaled to 90 (by cell count, and by the steps the
90 cells took), and their ratio. Both variants are timed ``--repeats`` times after a short warm-up,
and the fastest run of each is reported.

Part 2 (``--families``): for each model, the full 90-cell matrix against a fixed partner, with the
share of time inside model forward/backward, and each model's own forward+backward cost per
synthesis step at batch 90 and batch 1 (which is what decides whether batching pays).

    python benchmarks/synthesis.py                                  # both parts (CONTROVERSIAL_DATA_ROOT for kde)
    python benchmarks/synthesis.py --families ''                    # part 1 only
    python benchmarks/synthesis.py --pairs '' --families vgg,abs    # part 2 for two models

Part 3 (``--kde``): the KDE's own forward+backward per synthesis step at batch 90 and batch 1, the
plain autograd sum over every training image (before, ``controversial/references/kde.py``) next to the
certified candidate sums (after, ``GaussianKDE``), on the same inputs in the same run: the KDE's
inputs recorded over ``--kde-steps`` steps of a synthesis against a partner, replayed through both
in turn. It also reports how many (image, class) pairs the first candidates could not certify
(summed again over more) and the largest relative difference between the two variants' log-likelihoods.

    python benchmarks/synthesis.py --pairs '' --families '' --kde kde:vgg,kde_cifar10:pcn_cifar10

Part 4 (``--precision``): for each pair, the same cells synthesized with the models' steps in float32
and under bfloat16 autocast (``SynthesisOptions.precision``; a family that declares
``bfloat16_synthesis = False`` stays float32 in both), and with ``--compile`` each again with every
model's network wrapped in ``torch.compile`` (compile time included: the first synthesis of the run
pays it). Variants are interleaved ``--repeats`` times; the table has the median time, and from the
last repeat the accepted cells and the median hard score (both from the float32 scores of the 8-bit
images, the acceptance rule) and the mean steps. "bf16" is the engine's (frozen weights cast to bfloat16 once per
batch), "bf16 autocast" the code before it (autocast casting every weight at every call). "of the per-step gain" is
the whole pair's bf16 speed-up over the speed-up of one step of both models at batch 90 (part 5, measured in the
same run on noise images; a family declared float32 counted as float32); the last column the share of the last
run's time spent with at most two cells still running (where bf16 gains least). Pairs with a model that declares
``synthesis_init: test_image`` (conf/model/) start from random test images (the data root:
``CONTROVERSIAL_DATA_ROOT``), others from noise. ``--cells`` takes every k-th of the 90 cells.

    python benchmarks/synthesis.py --pairs '' --families '' --kde '' --precision abs:vgg --cells 90
    python benchmarks/synthesis.py --pairs '' --families '' --kde '' --precision jem:wrn --cells 9 --max-steps 100

Part 5 (``--step-models``): each model's forward+backward to the input at batch 90 (a synthesis step on
noise images), float32 against bfloat16 autocast, interleaved: ms per step, and how far bf16 moves the
outcome (top class kept, input-gradient cosine, largest change of a calibrated probability), the
measurement behind a family's ``bfloat16_synthesis = False``. With ``--compile`` also wrapped in
``torch.compile(dynamic=True)`` (the live batch shrinks as cells finish): the first compiled call's
seconds (compilation) and the steady ms per step.

    python benchmarks/synthesis.py --pairs '' --families '' --kde '' --step-models vgg,abs,wrn,jem [--compile]

Part 6 (``--second-order``): a model that differentiates its own input gradients (JEM's refinement) with
autograd's second derivatives (plain) and with the second-order rewrite it loads with
(``controversial.zoo.inference``), float32 and bfloat16, at ``--batches``: CPU ms per synthesis step and whether
the two give bit-identical logits and gradients. Part 4 with ``--plain-autograd`` times whole pairs both ways.

    python benchmarks/synthesis.py --pairs '' --families '' --kde '' --second-order jem
    python benchmarks/synthesis.py --pairs '' --families '' --kde '' --precision jem:wrn --cells 30 --plain-autograd
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from unittest import mock

import torch
import yaml

from controversial.data import load_uint8  # noqa: E402
from controversial.datasets import dataset_info  # noqa: E402
from controversial.references.kde import full_sum_log_likelihoods  # noqa: E402
from controversial.synthesis import engine  # noqa: E402
from controversial.synthesis.engine import (  # noqa: E402
    BatchResult,
    noise_images,
    ordered_class_pairs,
    synthesize_batch,
)
from controversial.synthesis.options import SynthesisOptions  # noqa: E402
from controversial.synthesis.precision import (  # noqa: E402
    LowPrecisionWeights,
    bfloat16_models,
    bfloat16_native,
    low_precision_weights,
    model_logits,
)
from controversial.zoo.bundled import load_model  # noqa: E402
from controversial.zoo.inference import SecondOrderBatchNorm2d, SecondOrderConv2d, compile_networks  # noqa: E402
from controversial.zoo.readout import CalibratedModel  # noqa: E402

MNIST_MODELS = "vgg,vgg_neg,capsnet,pcn,madry_linf,madry_l2,capsnet_recon,kde,abs"


def run_cells(
    models: Sequence[CalibratedModel], cells: list[tuple[int, int]], settings: SynthesisOptions
) -> BatchResult:
    targets = torch.tensor(cells)
    initial = noise_images(cells, [0] * len(cells), dataset_info(models[0].dataset).image_shape)
    return synthesize_batch(models, targets, initial, settings)


def model_step_ms(model: CalibratedModel, batch: int, repeats: int = 10) -> float:
    """Milliseconds per forward + backward-to-the-input of one model, as in a synthesis step."""
    images = torch.rand(batch, *dataset_info(model.dataset).image_shape, generator=torch.Generator().manual_seed(0))
    images.requires_grad_(True)
    rows = torch.arange(batch)
    model.reset_state()
    model.set_active_rows(rows)
    model(images).sum().backward()  # first call: warm-up (and the cold start of stateful models)
    start = time.perf_counter()
    for _ in range(repeats):
        model.set_active_rows(rows)
        model(images).sum().backward()
    model.reset_state()
    return (time.perf_counter() - start) / repeats * 1000


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return (
            "| "
            + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
            + " |"
        )

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def warm_up(models: Sequence[CalibratedModel], settings: SynthesisOptions) -> None:
    """A few steps on two cells first, so one-time costs (oneDNN kernel selection, optimiser setup)
    are not charged to whichever variant runs first."""
    run_cells(models, ordered_class_pairs()[:2], settings.model_copy(update={"max_steps": 3}))


def compare_pairs(pairs: list[str], subset_size: int, repeats: int, settings: SynthesisOptions) -> str:
    cells = ordered_class_pairs()
    subset = cells[:: len(cells) // subset_size][:subset_size]
    print(
        f"\nbatched vs one class pair at a time; the latter timed on {len(subset)} cells, "
        f"scaled x{len(cells) / len(subset):.1f}; "
        f"each timed {repeats}x, the fastest kept",
        flush=True,
    )
    header = [
        "pair",
        "batched 90 cells (s)",
        "accepted",
        "model fwd/bwd share",
        "one at a time, 90 (s): by cells / by steps",
        "speed-up: by cells / by steps",
        "mean steps (all / subset)",
    ]
    rows = []
    for pair in pairs:
        name_a, name_b = pair.split(":")
        models = [load_model(name_a), load_model(name_b)]
        warm_up(models, settings)
        batched_runs, single_times = [], []
        for repeat in range(repeats):
            batched_runs.append(run_cells(models, cells, settings))
            single_seconds, subset_steps = 0.0, 0
            for cell in subset:
                single = run_cells(models, [cell], settings)
                single_seconds += single.total_seconds
                subset_steps += int(single.steps.sum())
            single_times.append(single_seconds)
            print(
                f"  {pair} repeat {repeat + 1}: batched {batched_runs[-1].total_seconds:.1f} s, "
                f"the subset one at a time {single_seconds:.1f} s",
                flush=True,
            )
        # Two ways to scale the subset to 90 cells: by cell count, and by optimisation steps (its time
        # per step times the steps the 90 cells took), which corrects for a subset easier or harder than the rest.
        batched = min(batched_runs, key=lambda run: run.total_seconds)  # every figure of the row from the fastest run
        best_batched, best_single = batched.total_seconds, min(single_times)
        by_cells = best_single * len(cells) / len(subset)
        by_steps = best_single / max(subset_steps, 1) * int(batched.steps.sum())
        rows.append(
            [
                f"{name_a}-{name_b}",
                f"{best_batched:.1f}",
                f"{int((batched.hard >= settings.threshold).sum())}/90",
                f"{100 * batched.model_seconds / batched.total_seconds:.0f}%",
                f"{by_cells:.1f} / {by_steps:.1f}",
                f"{by_cells / best_batched:.1f}x / {by_steps / best_batched:.1f}x",
                f"{batched.steps.float().mean():.0f} / {subset_steps / len(subset):.0f}",
            ]
        )
        print(table(header, rows[-1:]).splitlines()[-1], flush=True)
    return table(header, rows)


def time_families(names: list[str], partner: str, fallback_partner: str, settings: SynthesisOptions) -> str:
    print(
        f"\nevery model family: the full 90-cell matrix against {partner} ({fallback_partner} for {partner} itself)",
        flush=True,
    )
    header = [
        "model",
        "partner",
        "90 cells (s)",
        "accepted",
        "mean steps",
        "model fwd/bwd share",
        "model ms/step, batch 90",
        "batch 1",
        "ratio",
    ]
    rows = []
    partners = {partner: load_model(partner), fallback_partner: load_model(fallback_partner)}
    for name in names:
        model = load_model(name)
        other_name = fallback_partner if name == partner else partner
        warm_up([model, partners[other_name]], settings)
        result = run_cells([model, partners[other_name]], ordered_class_pairs(), settings)
        batch_ms, single_ms = model_step_ms(model, 90), model_step_ms(model, 1)
        rows.append(
            [
                name,
                other_name,
                f"{result.total_seconds:.1f}",
                f"{int((result.hard >= settings.threshold).sum())}/90",
                f"{result.steps.float().mean():.0f}",
                f"{100 * result.model_seconds / result.total_seconds:.0f}%",
                f"{batch_ms:.1f}",
                f"{single_ms:.2f}",
                f"{batch_ms / single_ms:.0f}x",
            ]
        )
        print(table(header, rows[-1:]).splitlines()[-1], flush=True)
    return table(header, rows)


def record_kde_inputs(kde: CalibratedModel, partner: CalibratedModel, n_cells: int, steps: int) -> list[torch.Tensor]:
    """The KDE's input at each of the first ``steps`` steps of a synthesis of the first ``n_cells`` cells."""
    recorded: list[torch.Tensor] = []
    hook = kde.net.register_forward_pre_hook(lambda module, args: recorded.append(args[0].detach().clone()))
    try:
        run_cells([partner, kde], ordered_class_pairs()[:n_cells], SynthesisOptions(max_steps=steps, stop_score=None))
    finally:
        hook.remove()
    return recorded[:-1]  # the last call scores the final 8-bit images


def replay_kde(kde: CalibratedModel, recorded: list[torch.Tensor]) -> tuple[float, float, float, float]:
    """ms per forward+backward-to-the-input before and after (alternating step by step), the share of
    (image, class) pairs summed again over more candidates, and the largest relative difference of the
    log-likelihoods."""
    net = kde.net
    variants = {"before": lambda x: full_sum_log_likelihoods(net, x), "after": net}
    seconds = dict.fromkeys(variants, 0.0)
    full_rows, candidate_sums = 0, net.candidate_sums

    def counting(x, squared, scores, slack, lo, k, with_means):  # rows the first candidates did not certify
        nonlocal full_rows
        full_rows += len(x) if k > net.n_candidates else 0
        return candidate_sums(x, squared, scores, slack, lo, k, with_means)

    net.candidate_sums = counting
    difference = 0.0
    try:
        for step, images in enumerate([recorded[0], *recorded]):  # the first step twice: a warm-up
            logits = {}
            for name, variant in variants.items():
                x = images.clone().requires_grad_(True)
                start = time.perf_counter()
                values = variant(x)
                values.sum().backward()
                if step > 0:
                    seconds[name] += time.perf_counter() - start
                logits[name] = values.detach().double()
            difference = max(difference, float(((logits["after"] - logits["before"]) / logits["before"]).abs().max()))
            if step == 0:
                full_rows = 0
    finally:
        del net.candidate_sums
    calls = len(recorded)
    pairs = 10 * sum(len(images) for images in recorded)
    return 1000 * seconds["before"] / calls, 1000 * seconds["after"] / calls, full_rows / pairs, difference


def time_kde_steps(pairs: list[str], steps: int) -> str:
    print(f"\nthe KDE's forward+backward per synthesis step, {steps} recorded steps replayed", flush=True)
    header = [
        "KDE",
        "partner",
        "batch",
        "before: full sum (ms/step)",
        "after: candidates (ms/step)",
        "speed-up",
        "pairs summed wider",
        "max rel. difference",
    ]
    rows = []
    for pair in pairs:
        name, partner_name = pair.split(":")
        kde, partner = load_model(name), load_model(partner_name)
        for batch in (90, 1):
            before, after, full_share, difference = replay_kde(kde, record_kde_inputs(kde, partner, batch, steps))
            rows.append(
                [
                    name,
                    partner_name,
                    str(batch),
                    f"{before:.1f}",
                    f"{after:.1f}",
                    f"{before / after:.1f}x",
                    f"{100 * full_share:.2f}%",
                    f"{difference:.1e}",
                ]
            )
            print(table(header, rows[-1:]).splitlines()[-1], flush=True)
    return table(header, rows)


def starts(models: Sequence[CalibratedModel], cells: list[tuple[int, int]]) -> torch.Tensor:
    """Noise, or random test images (one fixed pick per cell) when a model declares synthesis_init: test_image."""
    shape = dataset_info(models[0].dataset).image_shape
    declared = [yaml.safe_load(Path(f"conf/model/{m.name}.yaml").read_text()).get("synthesis_init") for m in models]
    if "test_image" not in declared:
        return noise_images(cells, [0] * len(cells), shape)
    images, _ = load_uint8(models[0].dataset, "test", os.environ.get("CONTROVERSIAL_DATA_ROOT", "data"), False)
    picks = torch.randint(len(images), (len(cells),), generator=torch.Generator().manual_seed(0))
    return images[picks].float() / 255


def plain_autograd(model: CalibratedModel) -> CalibratedModel:
    """A copy of ``model`` with autograd's own second derivatives (the code before the second-order rewrite of
    ``controversial.zoo.inference``): its second-order layers turned back into plain ones."""
    plain = copy.deepcopy(model)
    for module in plain.modules():
        if isinstance(module, SecondOrderConv2d):
            module.__class__ = torch.nn.Conv2d
        elif isinstance(module, SecondOrderBatchNorm2d):
            module.__class__ = torch.nn.BatchNorm2d
    return plain


@contextlib.contextmanager
def weights_cast(every_call: bool) -> Iterator[None]:
    """``every_call``: the code before ``precision.low_precision_weights``, autocast casting every frozen weight at
    every call (the engine's copies disabled); else the engine as it is, weights cast once per batch."""
    if not every_call:
        yield
        return
    with mock.patch.object(engine, "low_precision_weights", lambda model: None):
        yield


class TailClock:
    """Seconds of a synthesis spent while at most ``TAIL`` cells were still running (``on_step`` of
    ``synthesize_batch``): where bf16 gains least, so what bounds a whole pair's gain."""

    TAIL = 2

    def __init__(self, cells: int) -> None:
        self.live, self.last = cells, time.perf_counter()
        self.tail = self.total = 0.0

    def on_step(self, step: int, live_after: int) -> None:
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        self.total += seconds
        if self.live <= self.TAIL:  # the step just timed ran with the cells live before it
            self.tail += seconds
        self.live = live_after

    def tail_share(self) -> float:
        return self.tail / self.total if self.total else 0.0


def compare_precision(
    pairs: list[str], n_cells: int, repeats: int, compile_too: bool, plain_too: bool, settings: SynthesisOptions
) -> str:
    cells = ordered_class_pairs()[:: max(1, 90 // n_cells)][:n_cells]
    print(
        f"\nfloat32 vs bfloat16 autocast{' and eager vs torch.compile' if compile_too else ''}"
        f"{' and plain autograd vs the second-order rewrite' if plain_too else ''}: {len(cells)} cells, "
        f"at most {settings.max_steps} steps; variants interleaved {repeats}x, median time; bf16 native on this "
        f"CPU: {bfloat16_native(torch.device('cpu'))}",
        flush=True,
    )
    header = ["pair", "variant", "time (s)", "runs (s)", "accepted", "median hard score", "mean steps", "speed-up"]
    header += ["of the per-step gain", "images as the first variant's", f"time at <= {TailClock.TAIL} live cells"]
    rows = []
    for pair in pairs:
        names = pair.split(":")
        eager = [load_model(name) for name in names]
        per_step = [step_variants(model, compile_too=False) for model in eager]  # part 5, batch 90, this run
        allowed = bfloat16_models(eager, "bf16", torch.device("cpu"))  # a family declared fp32 stays fp32
        step_gain = sum(r["fp32"] for r in per_step) / sum(
            r["bf16"] if low else r["fp32"] for r, low in zip(per_step, allowed)
        )
        print(f"  {pair}: one step of both models at batch 90, bf16 over fp32: {step_gain:.2f}x", flush=True)
        variants: list[tuple[str, list[CalibratedModel], str]] = []
        if plain_too:
            plain = [plain_autograd(model) for model in eager]
            variants += [("fp32 plain autograd", plain, "fp32"), ("bf16 plain autograd", plain, "bf16")]
        variants += [("fp32", eager, "fp32"), ("bf16 autocast", eager, "bf16"), ("bf16", eager, "bf16")]
        if compile_too:
            compiled = [load_model(name) for name in names]
            compile_networks(compiled)
            variants += [("fp32 compiled", compiled, "fp32"), ("bf16 compiled", compiled, "bf16")]
        initial = starts(eager, cells)
        targets = torch.tensor(cells)
        warm_up(eager, settings)
        results: dict[str, list[BatchResult]] = {}
        tail_share: dict[str, float] = {}  # of each variant's last run, as the columns beside it
        for _ in range(repeats):
            for label, models, precision in variants:
                run_settings = settings.model_copy(update={"precision": precision})
                try:
                    clock = TailClock(len(cells))
                    with weights_cast(every_call="autocast" in label):
                        result = synthesize_batch(models, targets, initial, run_settings, on_step=clock.on_step)
                except Exception as error:  # noqa: BLE001  (torch.compile refuses some models: report, go on)
                    print(f"  {pair} {label}: failed: {type(error).__name__}: {str(error).splitlines()[0]}")
                    continue
                results.setdefault(label, []).append(result)
                tail_share[label] = clock.tail_share()
                print(f"  {pair} {label}: {result.total_seconds:.1f} s", flush=True)
        first = next(iter(results.values()))
        base = statistics.median(r.total_seconds for r in first)
        for label, runs in results.items():
            last, seconds = runs[-1], statistics.median(r.total_seconds for r in runs)
            same = (last.images == first[-1].images).flatten(1).all(1)  # both the 8-bit images
            rows.append(
                [
                    pair.replace(":", "-"),
                    label,
                    f"{seconds:.1f}",
                    ", ".join(f"{r.total_seconds:.1f}" for r in runs),
                    f"{int((last.hard >= settings.threshold).sum())}/{len(cells)}",
                    f"{last.hard.median():.3f}",
                    f"{last.steps.float().mean():.0f}",
                    f"{base / seconds:.2f}x",
                    f"{base / seconds / step_gain:.2f} of {step_gain:.2f}x" if "bf16" in label else "",
                    f"{int(same.sum())}/{len(cells)}",
                    f"{100 * tail_share[label]:.0f}%",
                ]
            )
            print(table(header, rows[-1:]).splitlines()[-1], flush=True)
    return table(header, rows)


def synthesis_step(
    model: CalibratedModel, images: torch.Tensor, bfloat16: bool, weights: LowPrecisionWeights | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One synthesis step's model work on fixed images: forward (under bf16 autocast or not; with ``weights``, the
    bf16 weights cast once) and backward to the input; the logits and the input gradient."""
    x = images.clone().requires_grad_(True)
    model.reset_state()
    model.set_active_rows(torch.arange(len(images)))
    (out,) = model_logits([model], x, [bfloat16], [weights])
    out.sum().backward()
    assert x.grad is not None
    return out.detach(), x.grad


def step_variants(model: CalibratedModel, compile_too: bool, repeats: int = 5) -> dict[str, float]:
    """One model's forward+backward to the input at batch 90 (a synthesis step): ms per step eager in fp32 and
    under bf16 autocast (and compiled, with the first compiled call's seconds), interleaved; and how far bf16
    moves the outcome on these noise images: the share whose top class stays, the mean cosine of the input
    gradients, the largest change of a calibrated probability."""
    images = torch.rand(90, *dataset_info(model.dataset).image_shape, generator=torch.Generator().manual_seed(0))
    eager_net = model.net
    compiled_net = torch.compile(model.net, dynamic=True) if compile_too else None

    once = low_precision_weights(model)

    def step(net: torch.nn.Module, bfloat16: bool, cast_once: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        model.net = net
        return synthesis_step(model, images, bfloat16, once if cast_once else None)

    variants: dict[str, tuple] = {"fp32": (eager_net, False), "bf16": (eager_net, True)}
    variants["bf16 cast once"] = (eager_net, True, True)
    if compiled_net is not None:
        variants |= {"fp32 compiled": (compiled_net, False), "bf16 compiled": (compiled_net, True)}
    out: dict[str, float] = {}
    try:
        outputs = {}
        for label, variant in variants.items():  # first calls: warm-up, and compilation
            start = time.perf_counter()
            outputs[label] = step(*variant)
            out[f"{label} first"] = time.perf_counter() - start
        times: dict[str, list[float]] = {}
        for _ in range(repeats):
            for label, variant in variants.items():
                start = time.perf_counter()
                step(*variant)
                times.setdefault(label, []).append(time.perf_counter() - start)
    finally:
        model.net = eager_net
        model.reset_state()
    out |= {label: 1000 * statistics.median(t) for label, t in times.items()}
    (full, grad_full), (low, grad_low) = outputs["fp32"], outputs["bf16"]
    out["top class kept"] = float((full.argmax(1) == low.argmax(1)).float().mean())
    out["gradient cosine"] = float(
        torch.nn.functional.cosine_similarity(grad_full.flatten(1), grad_low.flatten(1)).mean()
    )
    out["max probability change"] = float((torch.sigmoid(full) - torch.sigmoid(low)).abs().max())
    return out


def compare_steps(names: list[str], compile_too: bool) -> str:
    print(
        "\none model's forward+backward to the input at batch 90: fp32 vs bf16 autocast, eager vs compiled", flush=True
    )
    header = ["model", "fp32 ms/step", "bf16 ms/step", "bf16 gain", "bf16 cast once ms", "cast once gain"]
    header += ["top class kept", "gradient cosine", "max dp"]
    if compile_too:
        header += ["compile s (fp32/bf16)", "compiled ms (fp32/bf16)", "compile gain (fp32/bf16)"]
    rows = []
    for name in names:
        r = step_variants(load_model(name), compile_too)
        row = [
            name,
            f"{r['fp32']:.1f}",
            f"{r['bf16']:.1f}",
            f"{r['fp32'] / r['bf16']:.2f}x",
            f"{r['bf16 cast once']:.1f}",
            f"{r['fp32'] / r['bf16 cast once']:.2f}x",
            f"{r['top class kept']:.2f}",
            f"{r['gradient cosine']:.3f}",
            f"{r['max probability change']:.3f}",
        ]
        if compile_too:
            row += [
                f"{r['fp32 compiled first']:.0f} / {r['bf16 compiled first']:.0f}",
                f"{r['fp32 compiled']:.1f} / {r['bf16 compiled']:.1f}",
                f"{r['fp32'] / r['fp32 compiled']:.2f}x / {r['bf16'] / r['bf16 compiled']:.2f}x",
            ]
        rows.append(row)
        print(table(header, rows[-1:]).splitlines()[-1], flush=True)
    return table(header, rows)


def compare_second_order(names: list[str], batches: list[int], repeats: int = 9) -> str:
    """Part 6: one model's synthesis step (forward + backward to the input) with autograd's own second
    derivatives (plain) and with the second-order rewrite, float32 and bfloat16 autocast, at several batch sizes:
    median CPU seconds of the process (``time.process_time``, steadier than wall time on a shared machine),
    the variants interleaved; and whether the rewrite gives bit-identical logits and input gradients."""
    print(f"\nplain autograd vs the second-order rewrite, one synthesis step, CPU ms (median of {repeats})", flush=True)
    header = ["model", "batch", "fp32 plain", "fp32 rewrite", "gain", "bf16 plain", "bf16 rewrite", "gain"]
    header += ["bf16 rewrite vs fp32 plain", "bit-identical"]
    rows = []
    for name in names:
        rewritten = load_model(name)
        plain = plain_autograd(rewritten)
        for batch in batches:
            images = torch.rand(
                batch, *dataset_info(rewritten.dataset).image_shape, generator=torch.Generator().manual_seed(0)
            )

            variants = {
                (kind, low): model
                for kind, model in (("plain", plain), ("rewrite", rewritten))
                for low in (False, True)
            }
            identical = all(
                all(
                    torch.equal(a, b)
                    for a, b in zip(synthesis_step(plain, images, low), synthesis_step(rewritten, images, low))
                )
                for low in (False, True)
            )
            times: dict[tuple[str, bool], list[float]] = {key: [] for key in variants}
            for _ in range(repeats):
                for (kind, low), model in variants.items():
                    start = time.process_time()
                    synthesis_step(model, images, low)
                    times[kind, low].append(time.process_time() - start)
            ms = {key: 1000 * statistics.median(t) for key, t in times.items()}
            rows.append(
                [
                    name,
                    str(batch),
                    f"{ms['plain', False]:.1f}",
                    f"{ms['rewrite', False]:.1f}",
                    f"{ms['plain', False] / ms['rewrite', False]:.2f}x",
                    f"{ms['plain', True]:.1f}",
                    f"{ms['rewrite', True]:.1f}",
                    f"{ms['plain', True] / ms['rewrite', True]:.2f}x",
                    f"{ms['plain', False] / ms['rewrite', True]:.2f}x",
                    "yes" if identical else "no",
                ]
            )
            print(table(header, rows[-1:]).splitlines()[-1], flush=True)
    return table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--pairs", default="abs:vgg,vgg:kde", help="comma-separated model_a:model_b pairs for part 1 ('' to skip)"
    )
    parser.add_argument("--subset", type=int, default=9, help="cells timed one at a time in part 1 (scaled to 90)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="part 1 times both variants this many times and keeps the fastest "
        "(timing noise on a shared machine only ever adds time)",
    )
    parser.add_argument("--families", default=MNIST_MODELS, help="comma-separated models for part 2 ('' to skip)")
    parser.add_argument("--partner", default="vgg", help="the fixed partner of part 2")
    parser.add_argument("--fallback-partner", default="vgg_neg", help="the partner of --partner itself in part 2")
    parser.add_argument("--kde", default="kde:vgg", help="comma-separated kde:partner pairs for part 3 ('' to skip)")
    parser.add_argument("--kde-steps", type=int, default=30, help="synthesis steps recorded and replayed in part 3")
    parser.add_argument("--precision", default="", help="comma-separated model_a:model_b pairs for part 4")
    parser.add_argument("--cells", type=int, default=90, help="part 4: this many of the 90 cells (every k-th)")
    parser.add_argument("--compile", action="store_true", help="parts 4 and 5: also each precision compiled")
    parser.add_argument(
        "--plain-autograd",
        action="store_true",
        help="part 4: also each precision with autograd's own second derivatives (before the second-order rewrite)",
    )
    parser.add_argument("--step-models", default="", help="comma-separated models for part 5")
    parser.add_argument("--second-order", default="", help="comma-separated models for part 6 (e.g. jem)")
    parser.add_argument("--batches", default="1,8,32,90", help="part 6: the batch sizes")
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument(
        "--stall-steps",
        type=int,
        default=None,
        help="synthesis.stall_steps (default: none, the engine's default; conf/experiment/exp2_cifar10.yaml uses 50)",
    )
    args = parser.parse_args()
    settings = SynthesisOptions(max_steps=args.max_steps, stall_steps=args.stall_steps)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; settings: {settings.max_steps} steps max, "
        f"stop_score {settings.stop_score}, stall_steps {settings.stall_steps}, threshold {settings.threshold}; "
        "one attempt, no retries"
    )
    tables = []
    if args.pairs:
        tables.append(compare_pairs(args.pairs.split(","), args.subset, args.repeats, settings))
    if args.families:
        tables.append(time_families(args.families.split(","), args.partner, args.fallback_partner, settings))
    if args.kde:
        tables.append(time_kde_steps(args.kde.split(","), args.kde_steps))
    if args.precision:
        tables.append(
            compare_precision(
                args.precision.split(","), args.cells, args.repeats, args.compile, args.plain_autograd, settings
            )
        )
    if args.step_models:
        tables.append(compare_steps(args.step_models.split(","), args.compile))
    if args.second_order:
        tables.append(compare_second_order(args.second_order.split(","), [int(b) for b in args.batches.split(",")]))
    print("\n" + "\n\n".join(tables))


if __name__ == "__main__":
    main()
