"""The address space every ``invperm`` command needs besides its tensors, checked against
``ulimit -v`` (``RLIMIT_AS``) before the command imports torch: below it torch's import aborts, or
numpy's OpenBLAS exits the process when it cannot map its buffer (``OpenBLAS error: Memory
allocation still failed after 10 retries``). Above it ``memory.available_memory`` leaves
``memory.ADDRESS_SPACE_RESERVE`` for what maps after a command's first check. Torch-free: reads
``os`` and ``resource`` only."""

from __future__ import annotations

import os
import resource

#: ``VmPeak`` of each command's smallest job on one OpenBLAS thread, the largest (torch 2.13 on a
#: CPU: 838 MiB for ``invperm demo --d 3``, which trains and analyses; 796 MiB for ``train``, 765 for
#: ``timeline``, 747 for ``analyze --n 64``): torch's libraries (about 490 MiB), numpy's and
#: matplotlib's, thread stacks and malloc arenas, and numpy's OpenBLAS buffer.
FLOOR = 850 * 2**20
#: What each further thread numpy's OpenBLAS starts on import maps (its stack and buffer: 40-41 MiB
#: more in every command's peak on two threads than on one).
PER_BLAS_THREAD = 40 * 2**20
OPENBLAS_MAX_THREADS = 64  # numpy's wheels build OpenBLAS for at most this many threads


def blas_threads() -> int:
    """Threads numpy's OpenBLAS starts: ``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS`` or
    ``OMP_NUM_THREADS`` (the first set), otherwise one per CPU this process may use; at most that
    many CPUs and ``OPENBLAS_MAX_THREADS`` (OpenBLAS's rule)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    asked = [int(v) for v in (os.environ.get(name, "").strip() for name in (
        "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")) if v.isdigit() and int(v) > 0]
    return max(1, min(asked[0] if asked else cpus, cpus, OPENBLAS_MAX_THREADS))


def floor() -> int:
    """Bytes of address space a command maps besides its tensors: :data:`FLOOR`, and
    :data:`PER_BLAS_THREAD` per further :func:`blas_threads`."""
    return FLOOR + PER_BLAS_THREAD * (blas_threads() - 1)


def check_address_space() -> None:
    """A one-line ``ValueError`` when ``ulimit -v`` is below :func:`floor`, naming what to raise it
    to (and, on several OpenBLAS threads, what one thread saves)."""
    soft, need = resource.getrlimit(resource.RLIMIT_AS)[0], floor()
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    threads = blas_threads()
    fewer = (f", or set OPENBLAS_NUM_THREADS=1 ({_mib(PER_BLAS_THREAD * (threads - 1))} less than "
             f"on its {threads} threads)" if threads > 1 else "")
    raise ValueError(f"the address-space limit (ulimit -v {soft // 1024}) is {_mib(soft)}, below the "
                     f"{_mib(need)} invperm maps besides its tensors (torch, numpy and its OpenBLAS "
                     f"buffers, matplotlib); raise it to at least ulimit -v {-(-need // 1024)}{fewer}")


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"
