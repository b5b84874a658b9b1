"""This machine as LLVM sees it: CPU name, features, and ``host`` targets.

The :class:`ir.target.Target` record is pure data; resolving ``host`` needs
llvmlite's CPU detection, which lives here.
"""

from __future__ import annotations

import functools

import llvmlite.binding as llvm

from ir.target import Target, parse_short

__all__ = [
    "host_cpu_disabled_features",
    "host_cpu_features",
    "host_cpu_name",
    "host_target",
    "is_host",
    "llvm_version",
    "parse_target",
    "parse_user_target",
]


@functools.cache
def host_cpu_name() -> str:
    """LLVM's name for this machine's CPU (``znver3``, ``skylake-avx512``, ...)."""
    return str(llvm.get_host_cpu_name())


@functools.cache
def _host_feature_map() -> dict[str, bool]:
    # Host detection reads CPUID once; the answer cannot change in a process.
    return dict(llvm.get_host_cpu_features())


def host_cpu_features() -> tuple[str, ...]:
    """The features this CPU has enabled, sorted, each as ``+name``."""
    return tuple(sorted(f"+{name}" for name, on in _host_feature_map().items() if on))


def host_cpu_disabled_features() -> tuple[str, ...]:
    """Features LLVM knows but this CPU lacks (``-name``), sorted.

    Needed because a CPU name implies features a hypervisor may hide; see
    :func:`codegen.jit.create_target_machine`.
    """
    return tuple(sorted(f"-{name}" for name, on in _host_feature_map().items() if not on))


def llvm_version() -> str:
    """The version of the LLVM llvmlite was built with, e.g. ``22.1.0``."""
    return ".".join(str(part) for part in llvm.llvm_version_info)


def host_target(num_threads: int = 1) -> Target:
    """This machine, as LLVM detects it."""
    return Target(host_cpu_name(), host_cpu_features(), num_threads)


def parse_target(text: str) -> Target:
    """:meth:`Target.parse` with ``host`` resolved to this machine."""
    return Target.parse(text, host=host_target)


def parse_user_target(text: str) -> Target:
    """A target a user typed: short forms too (``znver3``, ``llvm -mcpu=znver3``).

    A short form naming this machine's CPU is this machine (its detected
    features, which a hypervisor may have trimmed), so ``--target znver3`` on
    a znver3 host finds the records tuned here; any other CPU gets LLVM's
    features for it (:func:`ir.target.parse_short`).
    """
    short = parse_short(text)
    if short is None:
        return parse_target(text)
    if short.cpu == host_cpu_name():
        return host_target(short.num_threads)
    return short


def is_host(target: Target) -> bool:
    """Whether `target` names this machine's CPU with exactly its features."""
    return target.cpu == host_cpu_name() and target.features == host_cpu_features()
