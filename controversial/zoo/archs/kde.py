"""Class-conditional Gaussian kernel density estimator in pixel space.

``log p(x|y) = logsumexp_i(-||x - x_i||^2 / (2 sigma^2)) - log N_y - D/2 log(2 pi sigma^2)`` over
the training images of class y. The logits are these log-likelihoods. The training images are not
stored in the checkpoint (that would be 47 MB for MNIST): they are read from the data root.

Exact evaluation from a few neighbours. At the bandwidths in use (MNIST sigma 0.15: 2 sigma^2 =
0.045, while the nearest and the 17th-nearest training image typically differ by about 11 in squared
distance) each class's kernel sum is decided by a handful of training images. So, per class, one
float32 product without autograd ranks the training images and bounds the squared distance of all
but the ``n_candidates`` nearest from below (with a rigorous allowance for float32 rounding); the
candidates' kernels are summed in float64 from their exact distances. Where the omitted images'
kernel mass, at most ``(N_y - K) exp(-bound / 2 sigma^2)``, is certified to be at most
``tail_tolerance`` (epsilon, 1e-12) times the candidates', the candidate sum is the result: the
log-likelihood within epsilon (absolute) of the full sum, and its input gradient within
``2 epsilon max_i ||x - x_i|| / sigma^2``. An (image, class) the candidates cannot certify is
summed again, in float64, over every training image ranked within the certifying margin of its
nearest (a whole class in the worst case). The input gradient of class y's log-likelihood is
``(m_y - x) / sigma^2`` with ``m_y`` the kernel-weighted mean of the summed training images; the
forward computes ``m_y`` from the same few images, so the backward needs neither a second product
over the training set nor any (N, N_train) tensor. Second derivatives are refused.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from controversial.errors import UserError
from controversial.zoo.registry import register_arch

FLOAT32_UNIT_ROUNDOFF = 2.0**-24


class GaussianKDE(nn.Module):
    # Synthesis stays float32 (controversial.synthesis.engine): the candidate certificate bounds the rounding
    # error of the float32 ranking product, which bfloat16 autocast would round to 8 bits, so a certified sum
    # could miss an image that matters. (On 90 noise images bf16 changed nothing visible; docs/benchmarks.md.)
    bfloat16_synthesis = False
    points: torch.Tensor
    squared_norms: torch.Tensor
    squared_norms32: torch.Tensor
    log_counts: torch.Tensor

    def __init__(
        self,
        train_images: torch.Tensor,
        train_labels: torch.Tensor,
        sigma: float,
        chunk_size: int = 8192,
        n_candidates: int = 16,
        tail_tolerance: float = 1e-12,
    ) -> None:
        super().__init__()
        if sigma <= 0:
            raise UserError(f"KDE bandwidth sigma must be positive, got {sigma}")
        self.sigma = float(sigma)
        self.chunk_size = chunk_size
        self.n_candidates = n_candidates
        self.tail_tolerance = tail_tolerance
        order = torch.argsort(train_labels, stable=True)
        # One sorted copy of the training set (CIFAR-10: 50,000 x 3,072 float32 = 614 MB) and its
        # norms, computed a chunk at a time so that no second full-size temporary is made.
        points = train_images.reshape(len(train_images), -1)[order].float().contiguous()
        self.register_buffer("points", points, persistent=False)
        norms = torch.cat([(c.double() ** 2).sum(1) for c in points.split(chunk_size)])
        self.register_buffer("squared_norms", norms, persistent=False)  # float64: exact distances
        self.register_buffer("squared_norms32", norms.float(), persistent=False)  # for the ranking product
        counts = torch.bincount(train_labels, minlength=10)
        if (counts == 0).any():
            missing = ", ".join(str(int(k)) for k in torch.nonzero(counts == 0).flatten())
            raise UserError(f"the KDE needs training images of every class; none of class {missing}")
        self.class_slices = [(int(s), int(s + c)) for s, c in zip(torch.cumsum(counts, 0) - counts, counts)]
        self.register_buffer("log_counts", counts.double().log(), persistent=False)
        self.max_norms = [float(norms[lo:hi].max().sqrt()) for lo, hi in self.class_slices]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        flat = images.flatten(1)
        if torch.is_grad_enabled() and flat.requires_grad:
            return _LogLikelihoods.apply(flat, self)
        with torch.no_grad():
            return self.log_likelihoods(flat, with_means=False)[0].to(flat.dtype)

    def log_likelihoods(self, flat: torch.Tensor, with_means: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(N, 10) float64 log-likelihoods and, if asked, the (N, 10, D) float64 kernel-weighted means."""
        x = flat.detach().double()
        x32, squared = x.float(), (x * x).sum(1)
        sums, means = [], []
        for c in range(len(self.class_slices)):
            log_sums, class_means = self.class_log_sums(x, x32, squared, c, with_means)
            sums.append(log_sums)
            if class_means is not None:
                means.append(class_means)
        const = 0.5 * x.shape[1] * math.log(2 * math.pi * self.sigma**2)
        log_likelihoods = torch.stack(sums, 1) - self.log_counts - const
        return log_likelihoods, torch.stack(means, 1) if with_means else None

    def class_log_sums(
        self, x: torch.Tensor, x32: torch.Tensor, squared: torch.Tensor, c: int, with_means: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log sum_i exp(-||x - x_i||^2 / 2 sigma^2) over class c (N,), and the weighted means (N, D).

        ``x`` is float64, ``x32`` its float32 copy and ``squared`` its squared norms. Rows that
        ``n_candidates`` cannot certify are summed again over every image within the certifying
        margin of their nearest (by the float32 ranking), which certifies them by construction.
        """
        lo, hi = self.class_slices[c]
        chunks = [
            torch.addmm(self.squared_norms32[start:stop], x32, self.points[start:stop].T, alpha=-2)
            for start, stop in ((s, min(s + self.chunk_size, hi)) for s in range(lo, hi, self.chunk_size))
        ]
        scores = chunks[0] if len(chunks) == 1 else torch.cat(chunks, 1)  # (N, N_c) ||x_i||^2 - 2 <x, x_i>
        slack = 2 * (x.shape[1] + 4) * FLOAT32_UNIT_ROUNDOFF * (squared.sqrt() + self.max_norms[c]) ** 2
        log_sums, means, uncertified = self.candidate_sums(x, squared, scores, slack, lo, self.n_candidates, with_means)
        if bool(uncertified.any()):
            rows = torch.nonzero(uncertified).squeeze(1)
            x_rows, squared_rows, scores_rows, slack_rows = x[rows], squared[rows], scores[rows], slack[rows]
            # Every image whose score is within the margin of the row's best, so the rest cannot matter.
            margin = 2 * self.sigma**2 * (math.log(hi - lo) - math.log(self.tail_tolerance)) + 2 * slack_rows + 1e-6
            near = scores_rows <= scores_rows.min(1, keepdim=True).values + margin.unsqueeze(1).float()
            k = min(int(near.sum(1).max()) + 1, hi - lo)
            again = self.candidate_sums(x_rows, squared_rows, scores_rows, slack_rows, lo, k, with_means)
            if bool(again[2].any()):  # only float rounding could leave one: then sum the whole class
                again = self.candidate_sums(x_rows, squared_rows, scores_rows, slack_rows, lo, hi - lo, with_means)
            log_sums[rows] = again[0]
            if means is not None and again[1] is not None:
                means[rows] = again[1]
        return log_sums, means

    def candidate_sums(
        self,
        x: torch.Tensor,
        squared: torch.Tensor,
        scores: torch.Tensor,
        slack: torch.Tensor,
        lo: int,
        k: int,
        with_means: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Float64 sums over each row's k best-ranked images of the class starting at ``lo``: the
        log sums (N,), the weighted means (N, D) if asked, and which rows they do not certify."""
        n = scores.shape[1]
        k = min(k, n)
        ranked, candidates = scores.topk(min(k + 1, n), dim=1, largest=False, sorted=True)
        candidates = candidates[:, :k] + lo
        log_sums, means = [], []
        # Rows in groups, so that the gathered candidates stay under ~64 MB whatever k is.
        for rows in torch.arange(len(x), device=x.device).split(max(1, 2**23 // (k * x.shape[1]))):
            points = self.points.index_select(0, candidates[rows].flatten()).view(len(rows), k, x.shape[1]).double()
            products = torch.bmm(points, x[rows].unsqueeze(2)).squeeze(2)
            distances = squared[rows].unsqueeze(1) - 2 * products + self.squared_norms[candidates[rows]]
            exponents = distances.clamp_min(0) / (-2 * self.sigma**2)
            log_sums.append(torch.logsumexp(exponents, 1))
            if with_means:
                weights = (exponents - log_sums[-1].unsqueeze(1)).exp()
                means.append(torch.bmm(weights.unsqueeze(1), points).squeeze(1))
        log_sum = torch.cat(log_sums)
        if k < n:
            # Every omitted image ranks after candidate k + 1, whose float32 score may be off by the slack.
            bound = (ranked[:, k].double() + squared - slack).clamp_min(0)
            log_tail = math.log(n - k) - bound / (2 * self.sigma**2)
            uncertified = log_tail - log_sum > math.log(self.tail_tolerance)
        else:
            uncertified = torch.zeros_like(log_sum, dtype=torch.bool)
        return log_sum, torch.cat(means) if with_means else None, uncertified


class _LogLikelihoods(torch.autograd.Function):
    """The KDE's log-likelihoods with the closed-form input gradient ``(m_y - x) / sigma^2``."""

    @staticmethod
    def forward(ctx, flat: torch.Tensor, kde: GaussianKDE) -> torch.Tensor:
        log_likelihoods, means = kde.log_likelihoods(flat, with_means=True)
        ctx.save_for_backward(flat, means)
        ctx.sigma = kde.sigma
        return log_likelihoods.to(flat.dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        if torch.is_grad_enabled():  # create_graph=True: a silent zero second derivative would be wrong
            raise RuntimeError("GaussianKDE has no second derivatives: its input gradient is not differentiable")
        flat, means = ctx.saved_tensors
        weights = grad_output.double()
        pulled = torch.bmm(weights.unsqueeze(1), means).squeeze(1) - weights.sum(1, keepdim=True) * flat.double()
        return (pulled / ctx.sigma**2).to(flat.dtype), None


@register_arch("gaussian_kde", training_data=True)
def gaussian_kde(
    dataset: str = "mnist",
    sigma: float = 0.3,
    data_root: str | None = None,
    train_images: torch.Tensor | None = None,
    train_labels: torch.Tensor | None = None,
) -> GaussianKDE:
    """Build from explicit training tensors (tests) or the training split under the data root."""
    if train_images is None or train_labels is None:
        from controversial.data import load_uint8

        images, train_labels = load_uint8(dataset, "train", data_root)
        train_images = images.float().div_(255.0)
    return GaussianKDE(train_images, train_labels, sigma)
