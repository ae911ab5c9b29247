"""Be a good neighbour on a shared machine: waiting OpenMP and OpenBLAS threads sleep at once.

GNU OpenMP's waiting threads spin 300 000 times before they sleep, and OpenBLAS's for 2²⁸
cycles (≈ 0.1 s) after every call: on a busy machine they starve every other process, and on
2 cores the spinning threads of one library halve the next call of the other. Measured with
benchmarks/bench_contention.py (2026-12-06, 2-core AMD EPYC): a small model's training step
beside two others ran at 30.6 steps/s with these settings and 9.5 without (a share of 0.34
against 0.10; fair is 0.33), alone at 0.96× the speed.

The ``idaudit`` command applies them first thing (``_entry.main``), and every process it
starts inherits them. ``import idaudit`` does **not** change a library user's process: call
:func:`share_cpu` before torch or numpy load their thread pools to opt in (idaudit's own test
suite and benchmarks do). A value the user set wins.
"""

from __future__ import annotations

import os

__all__ = ["SETTINGS", "share_cpu"]

#: the variables and the values :func:`share_cpu` gives them where they are not set
SETTINGS = {"GOMP_SPINCOUNT": "2000",  # GNU OpenMP: spin briefly (unless OMP_WAIT_POLICY)
            "KMP_BLOCKTIME": "1",  # Intel's OpenMP runtime: 1 ms
            "OPENBLAS_THREAD_TIMEOUT": "4"}  # OpenBLAS: 2⁴ cycles


def share_cpu() -> dict[str, str]:
    """Make waiting OpenMP and OpenBLAS threads sleep at once, in this process and those it
    starts. Effective only for the libraries that load their runtime after the call (torch,
    numpy, SciPy, numba): call it before importing them.

    Returns:
        The variables set now (a variable the environment holds already is left, and
        ``GOMP_SPINCOUNT`` is not set where ``OMP_WAIT_POLICY`` says how to wait).

    Example:
        >>> import os
        >>> os.environ["KMP_BLOCKTIME"] = "5"
        >>> "KMP_BLOCKTIME" in share_cpu(), os.environ["KMP_BLOCKTIME"]
        (False, '5')
    """
    done = {}
    for name, value in SETTINGS.items():
        if name in os.environ or (name == "GOMP_SPINCOUNT" and "OMP_WAIT_POLICY" in os.environ):
            continue
        os.environ[name] = done[name] = value
    return done
