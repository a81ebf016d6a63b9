"""Thread defaults that stay fair on a shared CPU; set before torch or numpy load their thread pools.

OpenMP's default wait policy spins idle threads at full speed. Next to another busy process the spinning
threads steal the cores the working threads need, and a parallel region waits for its slowest thread,
which is descheduled: the job slows down many times over. Passive waiting yields the core instead.
Every value the user set in the environment wins; ``CONTROVERSIAL_THREADS=N`` sets the thread count.
"""

from __future__ import annotations

import os

THREADS_ENV = "CONTROVERSIAL_THREADS"
POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. a SLURM or container allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """CONTROVERSIAL_THREADS if set, else OMP_NUM_THREADS if set, else every available core."""
    for variable in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = os.environ.get(variable, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return available_cores()


def apply_thread_defaults() -> int:
    """Passive OpenMP waiting and one thread count for every pool, unless the environment says otherwise."""
    threads = default_threads()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for variable in POOL_VARIABLES:
        os.environ.setdefault(variable, str(threads))
    return threads
