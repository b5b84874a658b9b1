"""What machine a measurement ran on, and how numpy's threads are limited.

A run time means little without the CPU, core count and library versions
behind it, so every measurement batch records a `MachineInfo`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import threadpoolctl

# Keys of threadpoolctl's per-library record worth keeping: enough to tell
# which BLAS numpy used, with how many threads, tuned for which core.
_BLAS_KEYS = ("internal_api", "version", "num_threads", "architecture", "corearch")


@dataclass(frozen=True)
class MachineInfo:
    """The host a measurement ran on.

    Attributes:
        cpu_model: CPU model name ("model name" in /proc/cpuinfo).
        logical_cores: logical CPUs in the machine.
        usable_cores: logical CPUs this process may run on (its affinity
            mask; smaller than `logical_cores` in a container or under taskset).
        python: Python version.
        numpy: numpy version.
        blas: one dict per thread-pool library numpy loaded (internal_api,
            version, num_threads, and architecture/corearch when known).
        llvm: LLVM version llvmlite was built against, or "unknown".
        llvmlite: llvmlite version, or "unknown".
    """

    cpu_model: str
    logical_cores: int
    usable_cores: int
    python: str
    numpy: str
    blas: list[dict[str, Any]]
    llvm: str
    llvmlite: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (deep: the cached instance stays untouched)."""
        return asdict(self)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass  # not Linux: fall back below
    return platform.processor() or platform.machine() or "unknown"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity API (macOS, Windows)
        return os.cpu_count() or 1


def _blas_info() -> list[dict[str, Any]]:
    # threadpoolctl only sees libraries already loaded: the caller imports
    # numpy first.
    return [
        {key: lib[key] for key in _BLAS_KEYS if key in lib}
        for lib in threadpoolctl.threadpool_info()
    ]


def _llvm_versions() -> tuple[str, str]:
    """(LLVM version, llvmlite version); imported lazily, as codegen is optional here."""
    try:
        import llvmlite
        import llvmlite.binding as llvm
    except ImportError:
        return "unknown", "unknown"
    return ".".join(str(part) for part in llvm.llvm_version_info), llvmlite.__version__


@functools.cache
def machine_info() -> MachineInfo:
    """Describe this host; computed once per process since it cannot change."""
    import numpy

    llvm_version, llvmlite_version = _llvm_versions()
    return MachineInfo(
        cpu_model=_cpu_model(),
        logical_cores=os.cpu_count() or 1,
        usable_cores=_usable_cores(),
        python=platform.python_version(),
        numpy=numpy.__version__,
        blas=_blas_info(),
        llvm=llvm_version,
        llvmlite=llvmlite_version,
    )


@contextlib.contextmanager
def limit_numpy_threads(n: int) -> Iterator[None]:
    """Limit numpy's BLAS thread pools to `n` threads inside the block.

    A kernel timed on k threads is compared with numpy on k threads, not with
    a BLAS that silently uses every core.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    with threadpoolctl.threadpool_limits(limits=n):
        yield
