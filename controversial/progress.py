"""Progress that suits a terminal and a log file: a tqdm bar on a terminal, a plain line every so often otherwise.

With output redirected (SLURM, nohup) a bar's every refresh would be kept; plain lines at a fixed
interval keep a log short and still show that the job is alive.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Self, TextIO

from tqdm import tqdm

LOG_INTERVAL_S = 30.0


class Progress:
    """``update``/``set_postfix``/``close`` like tqdm; usable as a context manager."""

    def __init__(
        self,
        total: int,
        desc: str,
        enabled: bool = True,
        stream: TextIO | None = None,
        interval_s: float = LOG_INTERVAL_S,
    ) -> None:
        self.stream = stream or sys.stderr
        self.total, self.desc, self.n, self.postfix = total, desc, 0, ""
        self.interval_s, self.last = interval_s, time.monotonic()
        self.bar = (
            tqdm(total=total, desc=desc, leave=False, file=self.stream) if enabled and self.stream.isatty() else None
        )
        self.plain = enabled and self.bar is None

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.plain and time.monotonic() - self.last >= self.interval_s:
            self.last = time.monotonic()
            print(f"{self.desc}: {self.n}/{self.total}{self.postfix}", file=self.stream, flush=True)

    def set_postfix(self, **values: Any) -> None:
        if self.bar is not None:
            self.bar.set_postfix(values, refresh=False)
        self.postfix = "".join(f", {k}={v}" for k, v in values.items())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
