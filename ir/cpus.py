"""The x86-64 CPU names LLVM knows and the ISA features each implies, as data.

llvmlite reports the features of the host only (``get_host_cpu_features``);
it cannot list CPUs nor say what a named CPU has. So a short target
(``--target znver3``) is expanded from this table, transcribed from LLVM's
``X86.td`` (its ``ProcessorFeatures`` lists) and written with the feature
names host detection reports, closed under implication (``avx2`` brings
``avx``, ``sse4.2``, …), so that a worker's detected features can be compared
with it. Tuning flags and features host detection never reports (``x87``,
``nopl``, ``ermsb``, ``fsrm``, ``evex512``) are left out.
"""

from __future__ import annotations

import difflib

__all__ = ["closest_cpus", "cpu_features", "known_cpus"]

# Features implied by a feature (LLVM's SubtargetFeature implications).
_IMPLIES: dict[str, tuple[str, ...]] = {
    "sse2": ("sse",),
    "sse3": ("sse2",),
    "ssse3": ("sse3",),
    "sse4.1": ("ssse3",),
    "sse4.2": ("sse4.1",),
    "sse4a": ("sse3",),
    "avx": ("sse4.2",),
    "avx2": ("avx",),
    "fma": ("avx",),
    "f16c": ("avx",),
    "fma4": ("avx", "sse4a"),
    "xop": ("fma4",),
    "aes": ("sse2",),
    "pclmul": ("sse2",),
    "sha": ("sse2",),
    "gfni": ("sse2",),
    "vaes": ("aes", "avx"),
    "vpclmulqdq": ("pclmul", "avx"),
    "cx16": ("cx8",),
    "xsaveopt": ("xsave",),
    "xsavec": ("xsave",),
    "xsaves": ("xsave",),
    "avxvnni": ("avx2",),
    "avxifma": ("avx2",),
    "avxneconvert": ("avx2",),
    "avxvnniint8": ("avx2",),
    "avxvnniint16": ("avx2",),
    "sha512": ("avx2",),
    "sm3": ("avx",),
    "sm4": ("avx2",),
    "avx512f": ("avx2", "f16c", "fma"),
    "avx512bw": ("avx512f",),
    "avx512cd": ("avx512f",),
    "avx512dq": ("avx512f",),
    "avx512vl": ("avx512f",),
    "avx512ifma": ("avx512f",),
    "avx512vbmi": ("avx512bw",),
    "avx512vbmi2": ("avx512bw",),
    "avx512bitalg": ("avx512bw",),
    "avx512bf16": ("avx512bw",),
    "avx512vnni": ("avx512f",),
    "avx512vpopcntdq": ("avx512f",),
    "avx512vp2intersect": ("avx512f",),
    "avx512fp16": ("avx512bw", "avx512dq", "avx512vl"),
    "amx-int8": ("amx-tile",),
    "amx-bf16": ("amx-tile",),
    "amx-fp16": ("amx-tile",),
    "amx-complex": ("amx-tile",),
    "widekl": ("kl",),
    "kl": ("sse2",),
}

# name: (parent or "", features added). Order matters: parents come first.
_LINEAGE: tuple[tuple[str, str, str], ...] = (
    ("generic", "", "64bit cx8"),
    ("x86-64", "generic", "cmov mmx sse2 fxsr"),
    ("x86-64-v2", "x86-64", "cx16 sahf crc32 popcnt sse4.2"),
    ("x86-64-v3", "x86-64-v2", "avx2 bmi bmi2 f16c fma lzcnt movbe xsave"),
    ("x86-64-v4", "x86-64-v3", "avx512f avx512bw avx512cd avx512dq avx512vl"),
    ("core2", "x86-64", "ssse3 cx16 sahf"),
    ("penryn", "core2", "sse4.1"),
    ("nehalem", "x86-64-v2", ""),
    ("corei7", "nehalem", ""),
    ("westmere", "nehalem", "pclmul"),
    ("sandybridge", "westmere", "avx xsave xsaveopt"),
    ("corei7-avx", "sandybridge", ""),
    ("ivybridge", "sandybridge", "rdrnd f16c fsgsbase"),
    ("core-avx-i", "ivybridge", ""),
    ("haswell", "ivybridge", "avx2 bmi bmi2 fma invpcid lzcnt movbe"),
    ("core-avx2", "haswell", ""),
    ("broadwell", "haswell", "adx rdseed prfchw"),
    ("skylake", "broadwell", "aes xsavec xsaves clflushopt"),
    (
        "skylake-avx512",
        "skylake",
        "avx512f avx512cd avx512dq avx512bw avx512vl pku clwb",
    ),
    ("skx", "skylake-avx512", ""),
    ("cascadelake", "skylake-avx512", "avx512vnni"),
    ("cooperlake", "cascadelake", "avx512bf16"),
    (
        "cannonlake",
        "skylake",
        "avx512f avx512cd avx512dq avx512bw avx512vl pku avx512vbmi avx512ifma sha",
    ),
    (
        "icelake-client",
        "cannonlake",
        "avx512bitalg vaes avx512vbmi2 avx512vnni vpclmulqdq avx512vpopcntdq gfni rdpid",
    ),
    ("rocketlake", "icelake-client", ""),
    ("icelake-server", "icelake-client", "pconfig clwb wbnoinvd"),
    ("tigerlake", "icelake-client", "avx512vp2intersect clwb movdiri movdir64b shstk"),
    (
        "sapphirerapids",
        "icelake-server",
        "amx-tile amx-int8 amx-bf16 avx512bf16 serialize cldemote waitpkg ptwrite "
        "avx512fp16 avxvnni tsxldtrk enqcmd shstk movdiri movdir64b uintr",
    ),
    ("emeraldrapids", "sapphirerapids", ""),
    ("graniterapids", "sapphirerapids", "amx-fp16 prefetchi"),
    ("graniterapids-d", "graniterapids", "amx-complex"),
    ("atom", "x86-64", "ssse3 cx16 movbe sahf"),
    ("bonnell", "atom", ""),
    ("silvermont", "atom", "sse4.2 crc32 popcnt pclmul prfchw rdrnd"),
    ("slm", "silvermont", ""),
    (
        "goldmont",
        "silvermont",
        "aes sha rdseed xsave xsaveopt xsavec xsaves clflushopt fsgsbase",
    ),
    ("goldmont-plus", "goldmont", "ptwrite rdpid"),
    ("tremont", "goldmont-plus", "clwb gfni"),
    (
        "alderlake",
        "tremont",
        "serialize pconfig shstk widekl invpcid adx fma vaes vpclmulqdq f16c bmi bmi2 "
        "lzcnt avxvnni pku hreset cldemote movdiri movdir64b waitpkg",
    ),
    ("raptorlake", "alderlake", ""),
    ("meteorlake", "alderlake", ""),
    ("gracemont", "alderlake", ""),
    (
        "sierraforest",
        "alderlake",
        "cmpccxadd avxifma avxneconvert enqcmd uintr avxvnniint8",
    ),
    ("grandridge", "sierraforest", ""),
    ("arrowlake", "sierraforest", ""),
    ("arrowlake-s", "sierraforest", "avxvnniint16 sha512 sm3 sm4"),
    ("lunarlake", "arrowlake-s", ""),
    ("pantherlake", "arrowlake-s", "prefetchi"),
    ("clearwaterforest", "arrowlake-s", "prefetchi usermsr"),
    (
        "knl",
        "x86-64",
        "cx16 crc32 popcnt pclmul xsave xsaveopt sahf aes rdrnd f16c fsgsbase avx512f "
        "avx512cd adx rdseed movbe lzcnt bmi bmi2 fma prfchw",
    ),
    ("knm", "knl", "avx512vpopcntdq"),
    ("barcelona", "x86-64", "sse4a cx16 prfchw lzcnt popcnt sahf"),
    ("amdfam10", "barcelona", ""),
    ("btver1", "x86-64", "ssse3 sse4a cx16 prfchw lzcnt popcnt sahf"),
    ("btver2", "btver1", "avx aes crc32 pclmul bmi f16c movbe xsave xsaveopt"),
    (
        "bdver1",
        "x86-64",
        "xop cx16 aes crc32 prfchw pclmul lzcnt popcnt xsave lwp sahf",
    ),
    ("bdver2", "bdver1", "f16c bmi tbm fma"),
    ("bdver3", "bdver2", "xsaveopt fsgsbase"),
    ("bdver4", "bdver3", "avx2 bmi2 movbe rdrnd mwaitx"),
    (
        "znver1",
        "x86-64",
        "adx aes avx2 bmi bmi2 clflushopt clzero cx16 crc32 f16c fma fsgsbase sahf lzcnt "
        "movbe mwaitx pclmul popcnt prfchw rdrnd rdseed sha sse4a xsave xsavec xsaveopt "
        "xsaves",
    ),
    ("znver2", "znver1", "clwb rdpid rdpru wbnoinvd"),
    ("znver3", "znver2", "invpcid pku vaes vpclmulqdq"),
    (
        "znver4",
        "znver3",
        "avx512f avx512cd avx512dq avx512bw avx512vl avx512vbmi avx512vbmi2 avx512ifma "
        "avx512vnni avx512bitalg gfni avx512bf16 shstk avx512vpopcntdq",
    ),
    ("znver5", "znver4", "avxvnni movdiri movdir64b avx512vp2intersect prefetchi"),
)


def _closure(features: set[str]) -> frozenset[str]:
    todo, seen = list(features), set()
    while todo:
        feature = todo.pop()
        if feature not in seen:
            seen.add(feature)
            todo.extend(_IMPLIES.get(feature, ()))
    return frozenset(seen)


def _table() -> dict[str, frozenset[str]]:
    table: dict[str, frozenset[str]] = {}
    for name, parent, added in _LINEAGE:
        table[name] = _closure(set(table.get(parent, frozenset())) | set(added.split()))
    return table


_FEATURES = _table()


def known_cpus() -> tuple[str, ...]:
    """Every CPU name a short target may use, sorted."""
    return tuple(sorted(_FEATURES))


def cpu_features(cpu: str) -> tuple[str, ...] | None:
    """LLVM's features of `cpu` as sorted ``+name`` entries; None for a CPU not in the table."""
    features = _FEATURES.get(cpu)
    return None if features is None else tuple(sorted(f"+{f}" for f in features))


def closest_cpus(cpu: str, n: int = 3) -> list[str]:
    """The known CPU names closest in spelling to `cpu` (for an error's suggestion)."""
    return difflib.get_close_matches(cpu.lower(), known_cpus(), n=n, cutoff=0.5)
