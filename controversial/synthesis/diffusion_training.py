"""Train the bundled image prior of ``synthesis.method=diffusion``: a small diffusers ``UNet2DModel`` (DDPM).

Run as ``python -m controversial.synthesis.diffusion_training --dataset mnist --out models/diffusion/mnist/ddpm``.
The folder it writes is a diffusers pipeline layout (``unet/`` in float16 safetensors, ``scheduler/``) plus
``card.json`` (the command, training time, parameters), which ``diffusion_model.load_prior`` reads back.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from controversial.atomic import atomic_write_text
from controversial.zoo.model_card import write_model_card

log = logging.getLogger(__name__)
CARD_NAME = "card.json"


def build_unet(sample_size: int, channels: int, widths: tuple[int, ...]) -> Any:
    """A small convolutional UNet without attention (attention at 28x28 costs more CPU than it gives here)."""
    from diffusers import UNet2DModel

    return UNet2DModel(
        sample_size=sample_size,
        in_channels=channels,
        out_channels=channels,
        block_out_channels=widths,
        layers_per_block=1,
        down_block_types=("DownBlock2D",) * len(widths),
        up_block_types=("UpBlock2D",) * len(widths),
        norm_num_groups=8,
    )


def train(
    dataset: str, out: Path, steps: int, batch_size: int, lr: float, widths: tuple[int, ...], seed: int
) -> dict[str, Any]:
    """Epsilon-prediction DDPM training (cosine noise schedule, 1000 steps) with an EMA of the weights."""
    from diffusers import DDPMScheduler

    from controversial.data import load_uint8

    torch.manual_seed(seed)
    images, _ = load_uint8(dataset, "train")
    data = images.float().div(127.5).sub(1.0)  # the DDPM convention: pixels in [-1, 1]
    unet = build_unet(data.shape[-1], data.shape[1], widths)
    ema = torch.optim.swa_utils.AveragedModel(unet, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.995))
    scheduler: Any = DDPMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2")
    optimizer = torch.optim.AdamW(unet.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, min(200, steps // 10))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    generator = torch.Generator().manual_seed(seed)
    started, running = time.perf_counter(), 0.0
    for step in range(steps):
        batch = data[torch.randint(len(data), (batch_size,), generator=generator)]
        noise = torch.randn(batch.shape, generator=generator)
        t = torch.randint(0, scheduler.config.num_train_timesteps, (batch_size,), generator=generator)
        loss = torch.nn.functional.mse_loss(unet(scheduler.add_noise(batch, noise, t), t).sample, noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        ema.update_parameters(unet)
        running = 0.98 * running + 0.02 * loss.item() if step else loss.item()
        if step % 100 == 0 or step == steps - 1:
            log.info("step %d/%d loss %.4f (%.0f s)", step, steps, running, time.perf_counter() - started)
    train_time = time.perf_counter() - started
    final: Any = ema.module.half()
    final.save_pretrained(out / "unet", safe_serialization=True)
    scheduler.save_pretrained(out / "scheduler")
    card = {
        "dataset": dataset,
        "description": f"DDPM prior for {dataset}: UNet2DModel {list(widths)}, no attention, EMA 0.995 of the weights. "
        f"Scaled down for a CPU: {steps} steps of batch {batch_size} ({steps * batch_size / len(data):.2f} epochs; "
        "DDPMs on MNIST usually train for tens of epochs); how close its samples come to real images is the KID "
        "below.",
        "command": "python -m controversial.synthesis.diffusion_training " + shlex.join(sys.argv[1:]),
        "train_time_s": round(train_time, 1),
        "steps": steps,
        "batch_size": batch_size,
        "final_loss": round(running, 5),
        "parameters": sum(p.numel() for p in final.parameters()),
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    atomic_write_text(out / CARD_NAME, json.dumps(card, indent=2) + "\n")
    return card


def evaluate(dataset: str, out: Path, n_samples: int, sampling_steps: int, seed: int) -> dict[str, Any]:
    """Unguided DDIM samples of the saved prior and their KID x 10^3 against the test images, added to its card
    (with the figure ``samples.png`` of the first 64)."""
    from diffusers import DDIMPipeline, DDIMScheduler

    from controversial.synthesis.diffusion_model import load_prior
    from controversial.synthesis.naturalness import naturalness

    prior = load_prior(str(out), dataset)
    pipeline: Any = DDIMPipeline(unet=prior.unet, scheduler=DDIMScheduler.from_config(prior.scheduler_config))
    pipeline.set_progress_bar_config(disable=True)
    generator = torch.Generator().manual_seed(seed)
    batches = [
        pipeline(
            batch_size=min(100, n_samples - done),
            generator=generator,
            num_inference_steps=sampling_steps,
            output_type="pt",
        ).images
        for done in range(0, n_samples, 100)
    ]
    images = torch.cat([b if b.shape[1] <= 4 else b.permute(0, 3, 1, 2) for b in batches])
    measured = naturalness(images, dataset)
    _save_samples(images[:64], out / "samples.png")
    card = json.loads((out / CARD_NAME).read_text(encoding="utf-8"))
    card.update(
        kid_x1000=round(measured.kid, 1),
        kid_std_x1000=round(measured.kid_std, 1),
        kid_real_test_images=round(measured.floor, 1),
        kid_uniform_noise=round(measured.ceiling, 1),
        kid_samples=f"{n_samples} unguided DDIM samples, {sampling_steps} steps, seed {seed}",
        evaluate_command="python -m controversial.synthesis.diffusion_training " + shlex.join(sys.argv[1:]),
    )
    atomic_write_text(out / CARD_NAME, json.dumps(card, indent=2) + "\n")
    if out.resolve().parent.parent.name == "diffusion":  # models/diffusion/<dataset>/<name>: into the model card
        write_model_card(out.resolve().parents[2])
    return card


def _save_samples(images: torch.Tensor, path: Path) -> None:
    """An 8x8 mosaic of samples, 8-bit grey or RGB, for the docs and a look by eye."""
    from PIL import Image

    n, channels, height, width = images.shape
    side = int(n**0.5)
    grid = images[: side * side].reshape(side, side, channels, height, width).permute(0, 3, 1, 4, 2)
    pixels = (grid.reshape(side * height, side * width, channels) * 255).round().byte().numpy()
    Image.fromarray(pixels[..., 0] if channels == 1 else pixels).save(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--widths", default="32,64,64", help="channels per UNet level, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--evaluate", type=int, default=0, help="only sample this many images and add their KID")
    parser.add_argument("--sampling-steps", type=int, default=50, help="DDIM steps of --evaluate's samples")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    if args.evaluate:
        log.info(
            "evaluated %s: %s",
            args.out,
            evaluate(args.dataset, args.out, args.evaluate, args.sampling_steps, args.seed),
        )
        return
    widths = tuple(int(w) for w in args.widths.split(","))
    card = train(args.dataset, args.out, args.steps, args.batch_size, args.lr, widths, args.seed)
    log.info("wrote %s: %s", args.out, card)


if __name__ == "__main__":
    main()
