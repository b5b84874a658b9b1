"""`loomtune export`: kernels a C program links, checked by a real C program.

The .so tests export through the real CLI, compile a C driver against the
written header with the system `cc`, run it and compare what it prints with
numpy; `ldd` and `nm` check that the library needs only libc, libm and
libpthread. Outputs are filled with NaN by the driver before the call, so a
kernel that writes nothing cannot pass.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from loopkit import with_loop

from codegen.export import ExportError, c_header, check_symbol, export_kernel
from codegen.host import host_target
from ir.task import library_task

HAS_CC = shutil.which("cc") is not None
needs_cc = pytest.mark.skipif(not HAS_CC, reason="no system C compiler `cc` on PATH")
needs_binutils = pytest.mark.skipif(
    shutil.which("ldd") is None or shutil.which("nm") is None, reason="needs ldd and nm"
)

SCHEDULE_LINE = "exporting the default loop nest (no stored record, no trace given)"

# Shared objects a kernel library may pull in: the C library, libm, libpthread,
# the kernel's virtual DSO and the dynamic loader itself.
ALLOWED_DEPENDENCIES = ("libc.so", "libm.so", "libpthread.so", "linux-vdso.so", "ld-linux")

# Weak references every `cc -shared` library carries from the C runtime's own
# start-up object (crtbeginS.o), never from the kernel.
CRT_WEAK = {
    "__cxa_finalize",
    "__gmon_start__",
    "_ITM_deregisterTMCloneTable",
    "_ITM_registerTMCloneTable",
}


# ---------------------------------------------------------------------------
# Helpers


def loomtune(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The CLI in a fresh process, as a user runs it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOOMTUNE_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """A user error: exit 2, nothing on stdout, exactly one stderr line, no traceback."""
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def driver_source(
    header: str, symbol: str, inputs: list[tuple[str, int, str]], outputs: list[tuple[str, int]]
) -> str:
    """A C program: fill inputs by `expr` of i, outputs with NaN, call, print rc and outputs."""
    lines = [
        "#include <math.h>",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        f'#include "{header}"',
        "",
    ]
    lines.append("int main(void) {")
    args = []
    for k, (ctype, n, expr) in enumerate(inputs):
        lines.append(f"    {ctype}* in{k} = ({ctype}*)malloc({n} * sizeof({ctype}));")
        lines.append(f"    for (long i = 0; i < {n}; i++) in{k}[i] = ({ctype})({expr});")
        args.append(f"in{k}")
    for k, (ctype, n) in enumerate(outputs):
        lines.append(f"    {ctype}* out{k} = ({ctype}*)malloc({n} * sizeof({ctype}));")
        lines.append(f"    for (long i = 0; i < {n}; i++) out{k}[i] = ({ctype})NAN;")
        args.append(f"out{k}")
    lines.append(f"    int rc = {symbol}({', '.join(args)});")
    lines.append('    printf("rc=%d\\n", rc);')
    for k, (_, n) in enumerate(outputs):
        lines.append(f'    for (long i = 0; i < {n}; i++) printf("%.9g\\n", (double)out{k}[i]);')
    lines.append("    return rc == 0 ? 0 : 1;")
    lines.append("}")
    return "\n".join(lines) + "\n"


def build_and_run(
    folder: Path, source: str, lib: str, *, compiler: str = "cc", suffix: str = ".c"
) -> np.ndarray:
    """Compile `source` against `lib<lib>.so` in `folder`, run it, return the printed values."""
    driver = folder / f"driver{suffix}"
    driver.write_text(source)
    exe = folder / "driver"
    build = subprocess.run(
        [
            compiler,
            "-Wall",
            "-Wextra",
            "-Werror",
            str(driver),
            f"-L{folder}",
            f"-l{lib}",
            f"-Wl,-rpath,{folder}",
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    first, *values = ran.stdout.split()
    assert first == "rc=0"
    return np.array([float(v) for v in values])


def dependencies(so: Path) -> list[str]:
    """The shared objects `ldd` says `so` loads (basenames)."""
    done = subprocess.run(["ldd", str(so)], capture_output=True, text=True, check=False)
    if "statically linked" in done.stdout:  # no DT_NEEDED at all: the kernel calls nothing
        return []
    assert done.returncode == 0, done.stderr
    return [Path(line.split()[0]).name for line in done.stdout.splitlines() if line.strip()]


def dynamic_symbols(so: Path, which: str) -> list[tuple[str, str]]:
    """(nm type, name without @version) of the undefined or defined dynamic symbols."""
    done = subprocess.run(
        ["nm", "-D", f"--{which}-only", str(so)], capture_output=True, text=True, check=True
    )
    out = []
    for line in done.stdout.splitlines():
        *_, kind, name = line.split()
        out.append((kind, name.split("@")[0]))
    return out


def check_links_only_system_libraries(so: Path, symbol: str) -> set[str]:
    """ldd and nm agree the library needs libc/libm/libpthread only; returns the strong imports."""
    for dep in dependencies(so):
        assert dep.startswith(ALLOWED_DEPENDENCIES), f"{so.name} depends on {dep}"
    system = [ctypes.CDLL(ctypes.util.find_library(name)) for name in ("c", "m", "pthread")]
    strong = set()
    for kind, name in dynamic_symbols(so, "undefined"):
        if kind in ("w", "v"):
            assert name in CRT_WEAK, f"unexpected weak import {name}"
            continue
        assert any(hasattr(lib, name) for lib in system), f"{name} is not from libc/libm/libpthread"
        strong.add(name)
    exported = {name for _, name in dynamic_symbols(so, "defined")} - {"_init", "_fini"}
    assert exported == {symbol}, f"exports {sorted(exported)}"  # outlined helpers stay internal
    return strong


def matmul_inputs(m: int, n: int, k: int) -> tuple[str, str, np.ndarray, np.ndarray]:
    """The same deterministic inputs as C expressions and as numpy arrays (exact in float32)."""
    a_expr, b_expr = "(float)((i * 7) % 13 - 6) / 8", "(float)((i * 5) % 11 - 5) / 4"
    a = ((np.arange(m * k) * 7) % 13 - 6).astype(np.float32) / 8
    b = ((np.arange(k * n) * 5) % 11 - 5).astype(np.float32) / 4
    return a_expr, b_expr, a.reshape(m, k), b.reshape(k, n)


# ---------------------------------------------------------------------------
# A C program links and runs the exported library


@needs_cc
@needs_binutils
def test_matmul_so_runs_from_c(tmp_path: Path) -> None:
    m, n, k = 37, 19, 23
    done = loomtune(
        "export",
        "matmul",
        f"m={m}",
        f"n={n}",
        f"k={k}",
        "--format",
        "so",
        "-o",
        str(tmp_path / "libmm.so"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert SCHEDULE_LINE in done.stderr.splitlines()
    assert done.stdout == ""
    header = (tmp_path / "libmm.h").read_text()
    assert "int matmul(const float* A, const float* B, float* C);" in header
    assert 'extern "C"' in header and "#include <stdint.h>" in header
    for doc in (
        "A  input   float32[37][23]",
        "B  input   float32[23][19]",
        "C  output  float32[37][19]",
    ):
        assert doc in header
    assert "Returns 0 on success" in header

    a_expr, b_expr, a, b = matmul_inputs(m, n, k)
    source = driver_source(
        "libmm.h",
        "matmul",
        [("float", m * k, a_expr), ("float", k * n, b_expr)],
        [("float", m * n)],
    )
    got = build_and_run(tmp_path, source, "mm")
    assert got.shape == (m * n,)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).ravel()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert np.abs(ref).max() > 1  # the inputs are not trivially zero

    check_links_only_system_libraries(tmp_path / "libmm.so", "matmul")


@needs_cc
@needs_binutils
def test_parallel_gelu_so_runs_from_c(tmp_path: Path) -> None:
    m, n = 37, 19  # 37 rows over 2 threads: an uneven split
    program = with_loop(library_task("gelu", {"m": m, "n": n}).program, "i", "parallel")
    written = export_kernel(
        program, host_target(2), symbol="gelu_par", fmt="so", output=tmp_path / "libgelu.so"
    )
    assert written == [tmp_path / "libgelu.so", tmp_path / "libgelu.h"]
    assert "int gelu_par(const float* X, float* Y);" in (tmp_path / "libgelu.h").read_text()

    x_expr = "(float)((i * 7) % 61 - 30) / 10"
    source = driver_source("libgelu.h", "gelu_par", [("float", m * n, x_expr)], [("float", m * n)])
    got = build_and_run(tmp_path, source, "gelu")
    x = (((np.arange(m * n) * 7) % 61 - 30).astype(np.float32) / 10).astype(np.float64)
    ref = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    # DESIGN.md's bound with K = 1
    assert np.all(np.abs(got - ref) <= 1e-4 * np.abs(ref) + 1e-5 * np.abs(ref).max())

    imports = check_links_only_system_libraries(tmp_path / "libgelu.so", "gelu_par")
    # the check above saw real calls: the thread pool starts workers and sleeps on futexes
    assert {"pthread_create", "syscall"} <= imports


@needs_cc
@needs_binutils
def test_name_changes_the_symbol(tmp_path: Path) -> None:
    m, n, k = 5, 6, 7
    done = loomtune(
        "export",
        "matmul",
        f"m={m}",
        f"n={n}",
        f"k={k}",
        "--name",
        "my_kernel",
        "--format",
        "so",
        "-o",
        str(tmp_path / "libmy.so"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    header = (tmp_path / "libmy.h").read_text()
    assert "int my_kernel(const float* A, const float* B, float* C);" in header
    assert "int matmul(" not in header
    assert {name for _, name in dynamic_symbols(tmp_path / "libmy.so", "defined")} >= {"my_kernel"}
    assert "matmul" not in {name for _, name in dynamic_symbols(tmp_path / "libmy.so", "defined")}

    a_expr, b_expr, a, b = matmul_inputs(m, n, k)
    source = driver_source(
        "libmy.h",
        "my_kernel",
        [("float", m * k, a_expr), ("float", k * n, b_expr)],
        [("float", m * n)],
    )
    np.testing.assert_allclose(
        build_and_run(tmp_path, source, "my"), (a @ b).ravel(), rtol=1e-5, atol=1e-6
    )


@needs_cc
def test_custom_workload_header_works_in_cpp_with_bool_and_keyword_names(tmp_path: Path) -> None:
    # A tensor called `int` cannot be a C parameter name: it is declared argN,
    # and its real name stays in the comment. bool is one byte (uint8_t).
    definition = {
        "format": "loomtune.workload/1",
        "name": "pick",
        "sizes": {"n": 9},
        "inputs": [
            {"name": "int", "shape": ["n"], "dtype": "float32"},
            {"name": "flag", "shape": ["n"], "dtype": "bool"},
        ],
        "computes": [
            {
                "name": "out",
                "shape": ["n"],
                "axes": ["i"],
                "body": [
                    "select",
                    ["load", "flag", "i"],
                    ["mul", ["load", "int", "i"], 2.0],
                    ["load", "int", "i"],
                ],
            }
        ],
        "outputs": ["out"],
    }
    path = tmp_path / "pick.workload.json"
    path.write_text(json.dumps(definition))
    done = loomtune(
        "export",
        "--workload",
        str(path),
        "--format",
        "so",
        "-o",
        str(tmp_path / "libpick.so"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    header = (tmp_path / "libpick.h").read_text()
    assert "int pick(const float* arg0, const uint8_t* flag, float* out);" in header
    assert "(tensor 'int')" in header

    compiler = shutil.which("c++")
    compiler, suffix = (compiler, ".cpp") if compiler else ("cc", ".c")
    source = driver_source(
        "libpick.h",
        "pick",
        [("float", 9, "(float)i - 4"), ("uint8_t", 9, "i % 3 == 0")],
        [("float", 9)],
    )
    got = build_and_run(tmp_path, source, "pick", compiler=compiler, suffix=suffix)
    x = np.arange(9, dtype=np.float64) - 4
    np.testing.assert_array_equal(got, np.where(np.arange(9) % 3 == 0, 2 * x, x))


@needs_cc
def test_header_compiles_as_strict_c_for_every_integer_type(tmp_path: Path) -> None:
    program = library_task("matmul_int8", {"m": 3, "n": 4, "k": 5}).program
    header = c_header(program, "mm8")
    assert "int mm8(const uint8_t* A, const int8_t* B, int32_t* C);" in header
    (tmp_path / "mm8.h").write_text(header)
    # Included twice: the include guard must hold.
    (tmp_path / "use.c").write_text(
        '#include "mm8.h"\n#include "mm8.h"\nint main(void) { return 0; }\n'
    )
    done = subprocess.run(
        [
            "cc",
            "-std=c99",
            "-pedantic",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            str(tmp_path / "use.c"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------
# The other formats


@pytest.mark.parametrize("fmt", ["obj", "ll", "asm"])
def test_other_formats_write_one_non_empty_file(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"kernel.{fmt}"
    done = loomtune(
        "export", "matmul", "m=8", "n=9", "k=10", "--format", fmt, "-o", str(out), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert SCHEDULE_LINE in done.stderr.splitlines()
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no header, no temporary left
    if fmt == "obj":
        assert out.read_bytes()[:4] == b"\x7fELF"
    elif fmt == "ll":
        text = out.read_text()
        assert re.search(r"define .*@matmul\(", text)
        assert "target triple" in text
    else:
        assert re.search(r"^matmul:", out.read_text(), re.MULTILINE)


def test_cross_target_asm_uses_that_targets_registers(tmp_path: Path) -> None:
    out = tmp_path / "k.s"
    done = loomtune(
        "export",
        "gelu",
        "m=4",
        "n=64",
        "--target",
        "llvm -mcpu=x86-64 -mattr=+sse2",
        "--format",
        "asm",
        "-o",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "not this machine's CPU" in done.stderr
    text = out.read_text()
    assert "gelu:" in text and "ymm" not in text and "zmm" not in text


# ---------------------------------------------------------------------------
# User errors: exit 2, one line, nothing written


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--name", "9bad", "--format", "so"], "9bad"),
        (["--name", "free", "--format", "obj"], "free"),
        (["--format", "zip"], "zip"),
        (["--trace", "x.json", "--format", "so"], "trace"),
        (["--threads", "2", "--target", "host -num-threads=3", "--format", "obj"], "--threads"),
    ],
)
def test_user_errors_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    done = loomtune(
        "export",
        "matmul",
        "m=4",
        "n=4",
        "k=4",
        *args,
        "-o",
        str(tmp_path / "libx.so"),
        cwd=tmp_path,
    )
    assert needle in one_error_line(done)
    assert list(tmp_path.iterdir()) == []


def test_missing_output_directory_is_one_line(tmp_path: Path) -> None:
    done = loomtune(
        "export", "matmul", "--format", "ll", "-o", str(tmp_path / "nope" / "k.ll"), cwd=tmp_path
    )
    assert "does not exist" in one_error_line(done)


def test_without_cc_a_so_says_what_to_do(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done = loomtune(
        "export",
        "matmul",
        "m=4",
        "n=4",
        "k=4",
        "--format",
        "so",
        "-o",
        str(tmp_path / "libx.so"),
        cwd=tmp_path,
        env={"PATH": str(empty)},
    )
    line = one_error_line(done)
    assert "`cc`" in line and "--format obj" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


@pytest.mark.parametrize(
    "bad", ["9bad", "a-b", "int", "class", "__x", "_Bad", "free", "main", "", "é"]
)
def test_check_symbol_refuses_names_c_cannot_use(bad: str) -> None:
    with pytest.raises(ExportError, match="invalid symbol name"):
        check_symbol(bad)


def test_export_kernel_refuses_unknown_format(tmp_path: Path) -> None:
    program = library_task("transpose", {"m": 2, "n": 3}).program
    with pytest.raises(ExportError, match="unknown export format 'dll'"):
        export_kernel(program, host_target(), symbol="t", fmt="dll", output=tmp_path / "t.dll")
    check_symbol("my_kernel")  # an ordinary name passes
