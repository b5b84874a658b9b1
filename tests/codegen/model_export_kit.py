"""What the exported-model tests share: a C program that runs a model's library on inputs
from files and writes its outputs to files, built with the system `cc` against the header."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ir import dtype as dt
from service.model import TOLERANCE_ABS, TOLERANCE_REL

C_FLAGS = ("-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic")


def runner_source(header: str, name: str, n_in: int, n_out: int, out_bytes: Sequence[int]) -> str:
    """`runner IN… OUT…`: reads each input file, fills the outputs with 0xFF bytes (NaN, so
    a kernel that writes nothing cannot pass), calls N_run, then N_run_arena on an arena of
    its own and checks both agree bit for bit, and that a NULL or misaligned arena gives -2."""
    args = [f"in{i}" for i in range(n_in)] + [f"out{i}" for i in range(n_out)]
    again = [f"in{i}" for i in range(n_in)] + [f"again{i}" for i in range(n_out)]
    lines = [
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        f'#include "{header}"',
        "",
        "static void* load(const char* path) {",
        '    FILE* f = fopen(path, "rb");',
        "    if (!f) exit(3);",
        "    fseek(f, 0, SEEK_END);",
        "    long n = ftell(f);",
        "    fseek(f, 0, SEEK_SET);",
        "    void* p = malloc(n ? (size_t)n : 1);",
        "    if (fread(p, 1, (size_t)n, f) != (size_t)n) exit(4);",
        "    fclose(f);",
        "    return p;",
        "}",
        "",
        "static void* filled(size_t n) { void* p = malloc(n); memset(p, 0xFF, n); return p; }",
        "",
        "int main(int argc, char** argv) {",
        f"    if (argc != {1 + n_in + n_out}) return 2;",
    ]
    for i in range(n_in):
        lines.append(f"    void* in{i} = load(argv[{1 + i}]);")
    for i, n in enumerate(out_bytes):
        lines.append(f"    void* out{i} = filled({n}); void* again{i} = filled({n});")
    upper = name.upper()
    lines += [
        f"    int rc = {name}_run({', '.join(args)});",
        '    if (rc != 0) { printf("run rc=%d\\n", rc); return 1; }',
        f"    char* arena = aligned_alloc(64, {upper}_ARENA_BYTES);",
        f"    rc = {name}_run_arena(arena, {', '.join(again)});",
        '    if (rc != 0) { printf("run_arena rc=%d\\n", rc); return 1; }',
        f"    if ({name}_run_arena(NULL, {', '.join(again)}) != -2) return 5;",
        f"    if ({name}_run_arena(arena + 8, {', '.join(again)}) != -2) return 6;",
    ]
    for i, n in enumerate(out_bytes):
        lines.append(f"    if (memcmp(out{i}, again{i}, {n}) != 0) return 7;")
        lines.append(f'    FILE* f{i} = fopen(argv[{1 + n_in + i}], "wb");')
        lines.append(f"    fwrite(out{i}, 1, {n}, f{i});")
        lines.append(f"    fclose(f{i});")
    lines += ['    printf("ok\\n");', "    return 0;", "}"]
    return "\n".join(lines) + "\n"


def build_runner(folder: Path, library: Path, name: str, plan_io: tuple[list, list]) -> Path:
    """Compile the runner against `library`'s header with warnings as errors."""
    inputs, outputs = plan_io
    out_bytes = [int(np.prod(t.shape)) * dt.itemsize(t.dtype) for t in outputs]
    source = folder / f"run_{name}.c"
    source.write_text(
        runner_source(library.with_suffix(".h").name, name, len(inputs), len(outputs), out_bytes)
    )
    exe = folder / f"run_{name}"
    lib = library.stem.removeprefix("lib")
    where = library.parent
    build = subprocess.run(
        [
            "cc",
            *C_FLAGS,
            str(source),
            f"-L{where}",
            f"-l{lib}",
            f"-Wl,-rpath,{where}",
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    return exe


def run_library(
    folder: Path, exe: Path, arrays: Sequence[np.ndarray], outputs: Sequence, timeout: float = 60
) -> list[np.ndarray]:
    """Write the inputs to files, run the program, read the outputs back as their types say."""
    ins = []
    for i, a in enumerate(arrays):
        ins.append(folder / f"in{i}.bin")
        np.ascontiguousarray(a).tofile(ins[-1])
    outs = [folder / f"out{i}.bin" for i in range(len(outputs))]
    ran = subprocess.run(
        [str(exe), *map(str, ins), *map(str, outs)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert ran.returncode == 0 and ran.stdout == "ok\n", (ran.returncode, ran.stdout, ran.stderr)
    return [
        np.fromfile(path, dtype=dt.to_numpy(t.dtype)).reshape(t.shape)
        for path, t in zip(outs, outputs)
    ]


def within_tolerance(out: np.ndarray, ref: np.ndarray) -> float:
    """DESIGN's rule, max|out − ref| ≤ 1e-3·max|ref| + 1e-5; returns the error (asserts)."""
    assert out.shape == ref.shape
    err = float(np.abs(out.astype(np.float64) - ref.astype(np.float64)).max())
    bound = TOLERANCE_REL * float(np.abs(ref).max()) + TOLERANCE_ABS
    assert err <= bound, f"max |error| {err:.3g} > {bound:.3g}"
    return err
