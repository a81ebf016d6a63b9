"""Train a timm ResNet-18 on the CIFAR-10 image folder, briefly, outside the controversial project.

This is the "model trained elsewhere" of docs/your_own_model.md: plain PyTorch and timm, no import of
the project. It saves a state dict and prints what ``import_model.py`` needs to know: the input size,
the normalisation it trained with, and its test accuracy (to compare with the accuracy after import).

    python docs/examples/train_timm_cifar10.py --data /path/to/cifar10 --epochs 3 --out resnet18_cifar10.pt

``--data`` holds ``train/<class>/*.jpg`` and ``test/<class>/*.jpg`` (the data root's ``cifar10/`` layout).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import timm
import torch
import torch.nn.functional as F
from PIL import Image

MEAN = (0.4914, 0.4822, 0.4465)  # CIFAR-10's channel means and standard deviations
STD = (0.2470, 0.2435, 0.2616)


def read_split(folder: Path) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Every image of a split as uint8 (N, 3, 32, 32), its labels, and the class names (sorted folders)."""
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    images, labels = [], []
    for label, name in enumerate(classes):
        for path in sorted((folder / name).iterdir()):
            images.append(np.asarray(Image.open(path).convert("RGB")))
            labels.append(label)
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous(), torch.tensor(labels), classes


def normalise(images: torch.Tensor) -> torch.Tensor:
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    return (images.float() / 255 - mean) / std


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random crops with 4-pixel padding and random left-right flips."""
    padded = F.pad(images, (4, 4, 4, 4), mode="reflect")
    dy, dx = torch.randint(0, 9, (2,), generator=generator).tolist()
    cropped = padded[:, :, dy : dy + 32, dx : dx + 32]
    flip = torch.rand(len(images), generator=generator) < 0.5
    return torch.where(flip.view(-1, 1, 1, 1), cropped.flip(-1), cropped)


@torch.no_grad()
def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    correct = sum(
        (model(normalise(images[i : i + 500])).argmax(1) == labels[i : i + 500]).sum().item()
        for i in range(0, len(images), 500)
    )
    return correct / len(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("resnet18_cifar10.pt"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    train_x, train_y, classes = read_split(args.data / "train")
    test_x, test_y, _ = read_split(args.data / "test")
    model = timm.create_model("resnet18", pretrained=False, num_classes=len(classes))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=5e-4)
    steps = args.epochs * (len(train_x) // args.batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=steps)
    start = time.time()
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=generator)
        for i in range(len(train_x) // args.batch_size):
            batch = order[i * args.batch_size : (i + 1) * args.batch_size]
            loss = F.cross_entropy(model(normalise(augment(train_x[batch], generator))), train_y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        print(f"epoch {epoch + 1}/{args.epochs}: loss {loss.item():.3f}, {time.time() - start:.0f} s", flush=True)
    torch.save(model.state_dict(), args.out)
    print(f"classes: {classes}")
    print(f"input_size=[3,32,32] mean={list(MEAN)} std={list(STD)}")
    print(f"test accuracy: {accuracy(model, test_x, test_y):.4f} ({len(test_y)} images); weights: {args.out}")


if __name__ == "__main__":
    main()
