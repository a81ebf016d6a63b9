"""Exact count-weighted sums as int8 matrix products: the bootstrap's resampled sums.

A bootstrap resample gives each stimulus an integer count; the sums it needs are counts @ a fixed float64 table.
Split into base-256 digits, the table becomes int8 and the product exact in int32 (``torch._int_mm``, AVX-512
VNNI on a CPU): 18x the float32 product's speed on this project's CPU, with no rounding until the digits are
recombined. Measured: docs/benchmarks.md (the analysis bootstrap).
"""

from __future__ import annotations

import numpy as np


def integer_counts(weights: np.ndarray) -> np.ndarray:
    """Count weights as integers (integer arrays as they are), refusing fractional weights: every product
    below is exact only for integers."""
    weights = np.asarray(weights)
    if weights.dtype.kind in "iu":
        return weights
    if not np.array_equal(weights, np.rint(weights)):
        raise ValueError("count weights must be whole numbers")
    return weights.astype(np.int64)


class CountProduct:
    """(B, N) integer counts @ a fixed float64 (N, F) table, as int8 matrix products (``torch._int_mm``).

    Why: every resample's sums are count-weighted sums over stimuli, and an int8 x int8 -> int32 product
    (AVX-512 VNNI here) runs many times faster than a float32 or float64 one, and it is exact. Each
    column j becomes integers q = T_j / unit_j, less an offset o_j (the middle of their range), split
    into signed base-256 digits (int8); the sums are recombined in float64 as sum_i 256**i (c @ digit_i)
    + o_j sum(c). A column whose entries are multiples of a power of two and span at most 2**55 of them
    (ratings on a grid, their squares and cross-products: one digit) gives its sums exactly, the same
    numbers as an exact float64 product. Any other column (model probabilities) is rounded to 2**-54 of
    its largest magnitude first (seven digits), and its sums are then exact, so they differ from a
    float64 product only by that product's own rounding (a few units in the 16th digit).
    """

    BITS = 55  # |q - o| < 2**55: seven signed 8-bit digits at most
    COLUMNS = 512  # digit columns per product: a (1000, 512) int32 result stays in cache (2.5x slower at 2,048)
    ROWS = (2**31 - 1) // 2**14  # stimuli per product: |count digit| x |digit| <= 2**14, so int32 sums cannot overflow

    def __init__(self, table: np.ndarray) -> None:
        import torch  # here, not at module import: the analysis loads without paying for torch until it runs

        table = np.asarray(table, dtype=np.float64)
        N, F = table.shape
        top = np.abs(table).max(axis=0)
        mantissa, exponent = np.frexp(table)
        integer = (mantissa * 2.0**53).astype(np.int64)  # table = integer * 2**(exponent - 53), exactly
        low_bit = np.log2(np.where(integer != 0, integer & -integer, 1))  # of the integer's lowest set bit
        lowest = np.where(integer != 0, exponent - 53 + low_bit, np.inf)
        grid = np.where(top > 0, 2.0 ** lowest.min(axis=0), 1.0)  # the finest power of two in each column
        self.exact = top / grid < 2.0 ** (self.BITS - 1)  # columns held exactly as integer multiples of grid
        rounded = 2.0 ** (np.frexp(top)[1] - self.BITS + 1)  # top < 2**frexp(top)[1]: |q| <= 2**54
        self.unit = np.where(self.exact, grid, rounded)
        q = np.rint(table / self.unit).astype(np.int64)
        self.offset = (q.max(axis=0) + q.min(axis=0)) // 2
        q -= self.offset
        bits = np.frexp(np.abs(q).max(axis=0).astype(np.float64))[1] + 1  # signed bits of each column
        self.n_digits = np.maximum(1, -(-bits // 8)).astype(int)
        # One int8 table, transposed (the product runs 1.3x faster with the counts on the right): for each
        # digit count d, its columns' digits as rows, digit-major (row i * n + f is digit i of column f).
        # The sums come out in the same group order: column j is row position[j] of :meth:`transposed`.
        self.groups: list[tuple[np.ndarray, int, int, int]] = []  # (columns, digits, first digit row, first sum row)
        rows, at, done = [], 0, 0
        for d in np.unique(self.n_digits).tolist():
            columns = np.flatnonzero(self.n_digits == d)
            rows.append(self.digits(q[:, columns].T, d).reshape(d * len(columns), N))
            self.groups.append((columns, d, at, done))
            at += d * len(columns)
            done += len(columns)
        self.position = np.empty(F, dtype=np.intp)
        self.position[np.concatenate([columns for columns, _, _, _ in self.groups])] = np.arange(F)
        self.table = np.concatenate([*rows, np.ones((1, N), dtype=np.int8)])  # last row: each resample's count
        self.slices = [slice(start, start + self.ROWS) for start in range(0, N, self.ROWS)]
        self.pieces = [np.ascontiguousarray(self.table[:, s]) for s in self.slices]
        self.N, self.F = N, F
        self.offsets, self.units = (
            [torch.from_numpy(x[columns].astype(np.float64)[:, None]) for columns, _, _, _ in self.groups]
            for x in (self.offset, self.unit)
        )

    @staticmethod
    def digits(q: np.ndarray, n: int) -> np.ndarray:
        """int64 array -> (n, ...) int8 signed base-256 digits, least significant first (sum 256**i d_i = q)."""
        out = np.empty((n, *q.shape), dtype=np.int8)
        for i in range(n):
            digit = ((q + 128) & 255) - 128
            out[i] = digit
            q = (q - digit) >> 8
        if np.any(q):
            raise ValueError(f"integers need more than {n} base-256 digits")
        return out

    def __call__(self, stimulus_counts: np.ndarray) -> np.ndarray:
        """(B, N) integer counts -> (B, F) float64 count-weighted column sums, columns in table order."""
        return self.transposed(np.ascontiguousarray(integer_counts(stimulus_counts).T))[0][self.position].T

    def transposed(self, counts_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, B) integer counts, stimuli by rows (int8 ones are taken as they are) -> (F, B) float64
        count-weighted column sums, by rows in group order (column j is row ``position[j]``), and (B,) int64
        total counts (a row of ones in the product: no pass over the counts).

        Why this layout: the int8 product gives the sums by rows, and the caller reads them by rows, so
        neither the counts nor the sums are transposed (a copy of 6.5 MB per 1,000 resamples, out of cache)."""
        import torch  # here, not at module import: the analysis loads without paying for torch until it runs

        c = counts_t if counts_t.dtype == np.int8 else integer_counts(counts_t)
        B, top = c.shape[1], int(np.abs(c).max(initial=0)) if c.dtype != np.int8 else 127
        c = np.ascontiguousarray(c)
        if top <= 127:
            count_digits = [c.astype(np.int8, copy=False)]
        else:
            count_digits = list(self.digits(c, -(-top.bit_length() // 8) + 1))
        sums: np.ndarray | int = 0
        for e, cd in enumerate(count_digits):
            for rows, piece in zip(self.slices, self.pieces):
                part = torch._int_mm(torch.from_numpy(piece), torch.from_numpy(cd[rows])).numpy()
                if len(count_digits) == len(self.pieces) == 1:
                    sums = part
                else:  # several products: add them in int64
                    sums = sums + (part.astype(np.int64) << (8 * e))
        assert isinstance(sums, np.ndarray)
        # Horner from the top digit, in torch (its mixed int32/float64 kernels run 1.2x faster than numpy's),
        # each step one pass (digit + 256 x total; x 256 is exact, so fused or not, the same numbers): exact
        # while a column's sums fit 53 bits, as every one-digit column's do. While |digit sums| < 2**31 / 257
        # (non-negative counts: |digit sum| <= 128 x the resample's count), digits pair up exactly in int32,
        # d0 + 256 d1, and Horner runs in base 65,536: half the float64 passes, and fewer roundings.
        digit_sums, out = torch.from_numpy(sums), torch.empty((self.F, B), dtype=torch.float64)
        count = sums[-1].astype(np.int64)
        # offset x count: one number per column where every resample has the same count (a stratified bootstrap)
        totals = torch.from_numpy(count[:1] if len(count) and count.min() == count.max() else count).double()
        paired = sums.dtype == np.int32 and int(c.min(initial=0)) >= 0 and 128 * 257 * int(count.max(initial=0)) < 2**31
        for (columns, d, first, at), offset, unit in zip(self.groups, self.offsets, self.units):
            block = digit_sums[first : first + d * len(columns)].view(d, len(columns), B)
            total = out[at : at + len(columns)]
            if d == 1:
                total.copy_(block[0])
            else:
                if paired:
                    pair = [
                        torch.add(block[i], block[i + 1], alpha=256) if i + 1 < d else block[i] for i in range(0, d, 2)
                    ]
                    total.copy_(pair[-1])
                    for p in pair[-2::-1]:
                        torch.add(p, total, alpha=65536.0, out=total)
                else:
                    total.copy_(block[d - 1])
                    for i in range(d - 2, -1, -1):
                        torch.add(block[i], total, alpha=256.0, out=total)
            total.add_(offset * totals).mul_(unit)
        return out.numpy(), count
