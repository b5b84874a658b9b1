"""codegen/model_export.py: a model's library, checked by real C programs built with `cc`.

What the CLI tests do not: the library's dependencies and exports (`readelf`, `nm`),
integer inputs, outputs that are an input or a weight, two models' libraries in one
program, concurrent calls on distinct arenas at two threads, the header in C++.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.export import ExportError
from codegen.host import host_target
from codegen.model_export import default_name, export_model
from frontend.onnx import load_onnx
from ir.graph.interpret import run_graph
from ir.graph.plan import build_plan
from service.model import sample_inputs
from tests.codegen.model_export_kit import C_FLAGS, build_runner, run_library, within_tolerance
from tests.models import conv_net, encoder_layer, mlp, res_block

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None or shutil.which("readelf") is None or shutil.which("nm") is None,
    reason="needs cc, readelf and nm",
)

ALLOWED_NEEDED = ("libc.so", "libm.so", "libpthread.so", "ld-linux")


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def _export(path: Path, name: str, threads: int = 1) -> Path:
    lib = path.parent / f"lib{name}.so"
    export_model(
        build_plan(load_onnx(path)), host_target(threads), name=name, output=lib, source=path.name
    )
    return lib


def _io(path: Path) -> tuple[list[np.ndarray], list, list[np.ndarray]]:
    """Seeded inputs, the outputs' types and the interpreter's outputs."""
    graph = load_onnx(path)
    inputs = sample_inputs(graph, seed=2)
    return inputs, [graph.types[v] for v in graph.outputs], run_graph(graph, inputs)


def _embedding_model() -> onnx.ModelProto:
    """int64 token ids → Gather from a table → MatMul: an integer input."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((50, 16)).astype(np.float32), "table")
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
        helper.make_node("MatMul", ["e", "w"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8, 8])],
        [table, w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _edge_model() -> onnx.ModelProto:
    """Outputs that are the input itself, a kernel's result and a weight; names C cannot use."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "W")
    nodes = [
        helper.make_node("Identity", ["onnx::x"], ["same"]),
        helper.make_node("Relu", ["onnx::x"], ["arena"]),
        helper.make_node("Identity", ["W"], ["int"]),
    ]
    outs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
        for n in ("same", "arena", "int")
    ]
    graph = helper.make_graph(
        nodes,
        "edge",
        [helper.make_tensor_value_info("onnx::x", TensorProto.FLOAT, [2, 3])],
        outs,
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_library_needs_only_the_c_runtime_and_exports_two_functions(tmp_path: Path) -> None:
    lib = _export(_save(conv_net(), tmp_path / "conv.onnx"), "conv")
    dynamic = subprocess.run(
        ["readelf", "-d", str(lib)], capture_output=True, text=True, check=True
    )
    needed = [
        line.split("[")[1].rstrip("]") for line in dynamic.stdout.splitlines() if "NEEDED" in line
    ]
    assert needed and all(n.startswith(ALLOWED_NEEDED) for n in needed), needed
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True
    )
    exported = {line.split()[-1] for line in symbols.stdout.splitlines()} - {"_init", "_fini"}
    assert exported == {"conv_run", "conv_run_arena"}  # kernels and weights stay internal


def test_integer_inputs_and_outputs_that_are_inputs_or_weights(tmp_path: Path) -> None:
    for model, name in ((_embedding_model(), "embed"), (_edge_model(), "edge")):
        path = _save(model, tmp_path / f"{name}.onnx")
        lib = _export(path, name)
        inputs, types, refs = _io(path)
        outputs = run_library(
            tmp_path, build_runner(tmp_path, lib, name, (inputs, types)), inputs, types
        )
        for out, ref in zip(outputs, refs):
            within_tolerance(out, ref)
    assert (
        "int embed_run(const int64_t* ids, float* logits);" in (tmp_path / "libembed.h").read_text()
    )
    header = (tmp_path / "libedge.h").read_text()
    # names C cannot take (or the arena's) are argN; the comment keeps the real one
    assert "int edge_run_arena(void* arena, const float* arg0, float* same, float* arg2, " in header
    assert "arg0  input   float32[2][3]  (value 'onnx::x')" in header
    assert "arg2  output  float32[2][3]  (value 'arena')" in header


def test_a_winograd_conv_exports_with_its_weight_transformed_at_load(tmp_path: Path) -> None:
    """The library runs what the plan chose: the block's convs by Winograd, their U
    (4×4 per channel pair, from G g Gᵀ) embedded instead of the 3×3 weights."""
    path = _save(res_block(), tmp_path / "res.onnx")
    plan = build_plan(load_onnx(path)).choose(lambda t: "winograd")
    assert sum(t.implementation == "winograd" for t in plan.tasks) == 2
    lib = tmp_path / "libres.so"
    done = export_model(plan, host_target(1), name="res", output=lib, source=path.name)
    direct = export_model(
        build_plan(load_onnx(path)), host_target(1), name="resd", output=tmp_path / "libresd.so"
    )
    assert done.weight_bytes - direct.weight_bytes == 2 * (16 - 9) * 8 * 8 * 4
    inputs, types, refs = _io(path)
    outputs = run_library(
        tmp_path, build_runner(tmp_path, lib, "res", (inputs, types)), inputs, types
    )
    for out, ref in zip(outputs, refs):
        within_tolerance(out, ref)


def test_two_models_in_one_program_and_the_header_in_cpp(tmp_path: Path) -> None:
    _export(_save(mlp(), tmp_path / "a.onnx"), "a")
    _export(_save(mlp(seed=1), tmp_path / "b.onnx"), "b")
    source = tmp_path / "both.c"
    source.write_text(
        '#include <stdio.h>\n#include "liba.h"\n#include "libb.h"\n'
        "int main(void) {\n    static float x[4 * 64], ya[4 * 10], yb[4 * 10];\n"
        "    for (int i = 0; i < 4 * 64; i++) x[i] = (float)(i % 7) / 7.0f;\n"
        "    if (a_run(x, ya) || b_run(x, yb)) return 1;\n"
        '    for (int i = 0; i < 4 * 10; i++) printf("%.9g %.9g\\n", ya[i], yb[i]);\n'
        "    return 0;\n}\n"
    )
    exe = tmp_path / "both"
    flags = [f"-L{tmp_path}", "-la", "-lb", f"-Wl,-rpath,{tmp_path}"]
    build = subprocess.run(
        ["cc", *C_FLAGS, str(source), *flags, "-o", str(exe)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    got = np.array([[float(v) for v in line.split()] for line in ran.stdout.splitlines()])
    x = (np.arange(4 * 64) % 7).astype(np.float32).reshape(4, 64) / np.float32(7.0)
    for column, model in ((0, mlp()), (1, mlp(seed=1))):
        (ref,) = run_graph(load_onnx(_save(model, tmp_path / "m.onnx")), [x])
        within_tolerance(got[:, column].reshape(4, 10), ref)
    if shutil.which("c++") is not None:
        cpp = tmp_path / "both.cpp"
        cpp.write_text(
            '#include "liba.h"\n#include "libb.h"\nint main() { return a_run(nullptr, nullptr) * 0; }\n'
        )
        done = subprocess.run(
            [
                "c++",
                "-std=c++17",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-c",
                str(cpp),
                "-o",
                str(tmp_path / "cpp.o"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr


def test_distinct_arenas_run_at_the_same_time_at_two_threads(tmp_path: Path) -> None:
    path = _save(encoder_layer(), tmp_path / "enc.onnx")
    _export(path, "enc", threads=2)
    inputs, types, refs = _io(path)
    x = inputs[0]
    source = tmp_path / "threads.c"
    source.write_text(
        "#include <pthread.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
        '#include "libenc.h"\n'
        f"#define N {x.size}\n"
        "static float x[N], y[4][N];\nstatic int rc[4];\n"
        "static void* work(void* p) {\n    long t = (long)p;\n"
        "    void* arena = aligned_alloc(64, ENC_ARENA_BYTES);\n"
        "    for (int r = 0; r < 20 && !rc[t]; r++) rc[t] = enc_run_arena(arena, x, y[t]);\n"
        "    free(arena);\n    return NULL;\n}\n"
        'int main(void) {\n    FILE* f = fopen("in.bin", "rb");\n'
        "    if (!f || fread(x, sizeof x, 1, f) != 1) return 3;\n    fclose(f);\n"
        "    pthread_t th[4];\n"
        "    for (long t = 0; t < 4; t++) pthread_create(&th[t], NULL, work, (void*)t);\n"
        "    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);\n"
        "    for (int t = 0; t < 4; t++) if (rc[t] || memcmp(y[0], y[t], sizeof y[0])) return 4;\n"
        "    fwrite(y[0], sizeof y[0], 1, stdout);\n    return 0;\n}\n"
    )
    exe = tmp_path / "threads"
    flags = [f"-L{tmp_path}", "-lenc", f"-Wl,-rpath,{tmp_path}", "-lpthread"]
    build = subprocess.run(
        ["cc", *C_FLAGS, str(source), *flags, "-o", str(exe)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    x.tofile(tmp_path / "in.bin")
    ran = subprocess.run([str(exe)], cwd=tmp_path, capture_output=True, timeout=60, check=False)
    assert ran.returncode == 0
    within_tolerance(np.frombuffer(ran.stdout, np.float32).reshape(types[0].shape), refs[0])


@pytest.mark.parametrize(
    ("file", "name"),
    [
        ("resnet-18.onnx", "resnet_18"),
        ("bert.opt.onnx", "bert"),
        ("2net.onnx", "model_2net"),
        ("int.onnx", "int_model"),
    ],
)
def test_default_name_is_a_c_identifier_from_the_file_name(file: str, name: str) -> None:
    assert default_name(file) == name


def test_refusals_come_before_compiling(tmp_path: Path) -> None:
    plan = build_plan(load_onnx(_save(mlp(), tmp_path / "m.onnx")))
    with pytest.raises(ExportError, match=r"directory .* does not exist"):
        export_model(plan, host_target(1), name="m", output=tmp_path / "no" / "libm.so")
    with pytest.raises(ExportError, match="invalid symbol name 'mem cpy'"):
        export_model(plan, host_target(1), name="mem cpy", output=tmp_path / "libm.so")
