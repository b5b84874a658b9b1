"""The CPU a program is compiled for, as a record and as a canonical string.

A target string is ``host`` or ``llvm -mcpu=<cpu> -mattr=<+f1,+f2,...>
-num-threads=<N>`` (flags in any order; ``-mattr`` and ``-num-threads``
optional). The canonical form lists only the enabled features, sorted, so two
spellings of one machine give one string: records are keyed by it.

Pure data: ``host`` is resolved by whoever knows the machine (see
:func:`codegen.host.parse_target`), so the tuner can reason about targets
without LLVM.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from ir.cpus import closest_cpus, cpu_features
from ir.errors import LoomtuneError

__all__ = ["Target", "TargetError", "parse_short"]


class TargetError(LoomtuneError, ValueError):
    """A target string or record that cannot describe a machine."""


# An LLVM CPU or feature name: letters, digits and a few separators.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _normalise_features(features: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Sorted, de-duplicated ``+name`` entries; anything else is an error."""
    out: set[str] = set()
    for feature in features:
        if not isinstance(feature, str) or not feature.startswith("+"):
            raise TargetError(f"feature {feature!r} must be written +name")
        if not _NAME.match(feature[1:]):
            raise TargetError(f"bad feature name {feature!r}")
        out.add(feature)
    return tuple(sorted(out))


@dataclass(frozen=True)
class Target:
    """A CPU (LLVM name), its enabled features (``+name``) and a thread count.

    Equality is structural: features are sorted and de-duplicated on
    construction, so equal machines compare equal however they were spelled.
    """

    cpu: str
    features: tuple[str, ...] = ()
    num_threads: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.cpu, str) or not self.cpu or not _NAME.match(self.cpu):
            raise TargetError(f"bad -mcpu value {self.cpu!r}")
        # bool is an int; a thread count of True is a bug, not 1.
        if (
            not isinstance(self.num_threads, int)
            or isinstance(self.num_threads, bool)
            or self.num_threads < 1
        ):
            raise TargetError(f"-num-threads must be a positive integer, got {self.num_threads!r}")
        object.__setattr__(self, "features", _normalise_features(tuple(self.features)))

    @classmethod
    def parse(cls, text: str, host: Callable[[int], Target] | None = None) -> Target:
        """Read ``host`` or ``llvm -mcpu=... [-mattr=...] [-num-threads=N]``.

        ``host`` may be followed by ``-num-threads=N`` only and is resolved by
        ``host(num_threads)``; without a resolver it is an error. In
        ``-mattr``, ``-name`` entries are accepted and dropped: a target is the
        set of features it has.
        """
        if not isinstance(text, str):
            raise TargetError(f"a target must be a string, got {type(text).__name__}")
        words = text.split()
        if not words:
            raise TargetError("empty target string (expected 'host' or 'llvm -mcpu=...')")
        kind, flags = words[0], words[1:]
        if kind not in ("host", "llvm"):
            raise TargetError(f"target must start with 'host' or 'llvm', got {kind!r}")

        values: dict[str, str] = {}
        allowed = ("-num-threads",) if kind == "host" else ("-mcpu", "-mattr", "-num-threads")
        for flag in flags:
            name, eq, value = flag.partition("=")
            if name not in allowed:
                if kind == "host" and name in ("-mcpu", "-mattr"):
                    raise TargetError(
                        f"'host' takes its CPU from this machine: {flag!r} not allowed"
                    )
                raise TargetError(f"unknown target flag {flag!r}")
            if not eq or not value:
                raise TargetError(f"target flag {name} needs a value ({name}=...)")
            if name in values:
                raise TargetError(f"target flag {name} given twice")
            values[name] = value

        threads = _parse_threads(values.get("-num-threads", "1"))
        if kind == "host":
            if host is None:
                raise TargetError(
                    "'host' names the machine this runs on: resolve it with "
                    "codegen.host.parse_target"
                )
            return host(threads)
        if "-mcpu" not in values:
            raise TargetError(f"missing -mcpu=<cpu> in target {text.strip()!r}")
        features = _parse_mattr(values["-mattr"]) if "-mattr" in values else ()
        return cls(values["-mcpu"], features, threads)

    def canonical(self) -> str:
        """``llvm -mcpu=C [-mattr=+a,+b] -num-threads=N``; parses back to ``self``."""
        parts = ["llvm", f"-mcpu={self.cpu}"]
        if self.features:
            parts.append("-mattr=" + ",".join(self.features))
        parts.append(f"-num-threads={self.num_threads}")
        return " ".join(parts)

    def __str__(self) -> str:
        return self.canonical()

    def display(self) -> str:
        """``znver3 (59 features), 1 thread(s)``: the canonical string is too long to read."""
        return f"{self.cpu} ({len(self.features)} features), {self.num_threads} thread(s)"

    def has_feature(self, name: str) -> bool:
        """Whether ``name`` (``avx2`` or ``+avx2``) is enabled."""
        return ("+" + name.removeprefix("+")) in self.features

    def with_threads(self, num_threads: int) -> Target:
        """The same CPU with another thread count."""
        return replace(self, num_threads=num_threads)

    @property
    def vector_bits(self) -> int:
        """Width of the widest float vector register in bits (512, 256 or 128).

        Read from the listed features only: a target written without
        ``-mattr`` counts as 128 whatever its CPU.
        """
        if self.has_feature("avx512f"):
            return 512
        if self.has_feature("avx") or self.has_feature("avx2"):
            return 256
        return 128


def _parse_threads(value: str) -> int:
    try:
        threads = int(value, 10)
    except ValueError:
        raise TargetError(f"-num-threads must be a positive integer, got {value!r}") from None
    if threads < 1:
        raise TargetError(f"-num-threads must be a positive integer, got {value!r}")
    return threads


def _parse_mattr(value: str) -> tuple[str, ...]:
    enabled: list[str] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            raise TargetError(f"empty entry in -mattr={value}")
        if item[0] not in "+-":
            raise TargetError(f"-mattr entry {item!r} must start with + or -")
        if not _NAME.match(item[1:]):
            raise TargetError(f"bad feature name {item!r} in -mattr")
        if item[0] == "+":
            enabled.append(item)
    return tuple(enabled)


def parse_short(text: str) -> Target | None:
    """The target a short form names, else None (the text is ``host`` or a full target).

    A short form is a bare CPU name (``znver3``, optionally ``-num-threads=N``)
    or ``llvm -mcpu=CPU`` without ``-mattr``: users write the CPU, not its
    feature list, so the features are LLVM's for that CPU (:mod:`ir.cpus`).
    An unknown CPU is an error naming the closest known ones, since a target
    no machine has would otherwise wait forever.
    """
    if not isinstance(text, str):
        raise TargetError(f"a target must be a string, got {type(text).__name__}")
    words = text.split()
    if not words or words[0] == "host":
        return None
    if words[0] != "llvm":
        if words[0].startswith("-"):
            return None  # Target.parse says what is wrong
        if cpu_features(words[0]) is None:
            raise TargetError(
                f"unknown CPU {words[0]!r}: a target starts with 'host' or 'llvm', or is an "
                f"LLVM x86-64 CPU name ({_cpu_hint(words[0])})"
            )
        text = " ".join(["llvm", f"-mcpu={words[0]}", *words[1:]])
        if any(w.startswith("-mattr") for w in words[1:]):
            raise TargetError(f"write -mattr in a full target: 'llvm -mcpu={words[0]} -mattr=...'")
    elif any(w.startswith("-mattr") for w in words[1:]):
        return None
    parsed = Target.parse(text)
    features = cpu_features(parsed.cpu)
    if features is None:
        raise TargetError(
            f"unknown CPU {parsed.cpu!r} (LLVM x86-64 names; {_cpu_hint(parsed.cpu)})"
        )
    return replace(parsed, features=features)


def _cpu_hint(name: str) -> str:
    close = closest_cpus(name)
    return (
        f"did you mean {', '.join(close)}?" if close else "e.g. x86-64-v3, skylake-avx512, znver4"
    )
