"""The `loomtune` command line as a user meets it: the real console script in a subprocess.

DESIGN.md "The command line" is the contract: `--json` prints exactly one JSON
object on stdout; every failure prints one line naming what was wrong to stderr,
exits non-zero and shows no traceback. Workloads are tiny so each call is fast.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ir.task import library_task

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "tanh_matmul.workload.json"

DESIGN_OPS = [
    "matmul",
    "batch_matmul",
    "dense",
    "conv2d_nhwc",
    "conv2d_nchw",
    "depthwise_conv2d_nhwc",
    "max_pool2d",
    "avg_pool2d",
    "softmax",
    "layer_norm",
    "reduce_sum",
    "reduce_max",
    "gelu",
    "transpose",
    "matmul_int8",
    "dense_int8",
    "conv2d_nhwc_int8",
    "matmul_bf16",
    "dense_bf16",
    "batch_matmul_bf16",
]

RUN_FIELDS = {
    "op",
    "params",
    "workload_key",
    "target",
    "threads",
    "correct",
    "latency_ms",
    "gflops",
    "numpy_ms",
    "speedup_vs_numpy",
    "baseline",
}


def loomtune(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOOMTUNE_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_json_object(proc: subprocess.CompletedProcess) -> dict:
    """The whole of stdout must be exactly one JSON object (json.loads refuses trailing text)."""
    assert proc.stdout.strip(), f"nothing on stdout; stderr: {proc.stderr}"
    obj = json.loads(proc.stdout)
    assert isinstance(obj, dict)
    return obj


# ---------------------------------------------------------------------------
# ops


def test_ops_json_lists_the_library_in_design_order() -> None:
    proc = loomtune("ops", "--json")
    assert proc.returncode == 0, proc.stderr
    obj = one_json_object(proc)
    assert set(obj) == {"ops"}
    ops = obj["ops"]
    assert [o["name"] for o in ops] == DESIGN_OPS
    for o in ops:
        assert set(o) - {"doc"} == {"name", "params", "inputs", "outputs", "flops"}, o["name"]
        assert isinstance(o["params"], dict) and o["params"], o["name"]
        for pname, default in o["params"].items():
            assert isinstance(pname, str)
            assert type(default) is int, (o["name"], pname)
        for key in ("inputs", "outputs"):
            assert isinstance(o[key], list) and o[key], (o["name"], key)
            for t in o[key]:
                assert set(t) == {"name", "shape", "dtype"}, (o["name"], t)
                assert isinstance(t["name"], str)
                assert all(type(s) is int and s > 0 for s in t["shape"]), (o["name"], t)
                assert t["dtype"] in {
                    "float32",
                    "float64",
                    "bfloat16",
                    "int8",
                    "uint8",
                    "int16",
                    "int32",
                    "int64",
                    "bool",
                }
        assert o["flops"] is None or type(o["flops"]) is int, o["name"]
    by_name = {o["name"]: o for o in ops}
    mm = by_name["matmul"]
    m, n, k = mm["params"]["m"], mm["params"]["n"], mm["params"]["k"]
    assert set(mm["params"]) == {"m", "n", "k"}
    assert mm["inputs"] == [
        {"name": "A", "shape": [m, k], "dtype": "float32"},
        {"name": "B", "shape": [k, n], "dtype": "float32"},
    ]
    assert mm["outputs"] == [{"name": "C", "shape": [m, n], "dtype": "float32"}]
    assert mm["flops"] == 2 * m * n * k
    assert by_name["transpose"]["flops"] is None
    assert set(by_name["dense"]["params"]) == {"m", "n", "k", "bias", "relu"}
    i8 = by_name["matmul_int8"]
    assert [t["dtype"] for t in i8["inputs"]] == ["uint8", "int8"]
    assert [t["dtype"] for t in i8["outputs"]] == ["int32"]
    q8 = by_name["dense_int8"]
    assert [t["dtype"] for t in q8["inputs"]] == ["uint8", "int8", "int32", "float32"]
    assert [t["dtype"] for t in q8["outputs"]] == ["uint8"]
    bf = by_name["matmul_bf16"]
    assert [t["dtype"] for t in bf["inputs"] + bf["outputs"]] == ["bfloat16"] * 2 + ["float32"]


# ---------------------------------------------------------------------------
# run --json


def _check_run_fields(r: dict) -> None:
    assert set(r) == RUN_FIELDS, set(r) ^ RUN_FIELDS
    assert re.fullmatch(r"[0-9a-f]{64}", r["workload_key"]), r["workload_key"]
    assert r["target"].startswith("llvm -mcpu="), r["target"]
    assert r["target"].endswith("-num-threads=1"), r["target"]
    assert r["threads"] == 1
    assert r["correct"] is True
    assert isinstance(r["latency_ms"], float) and r["latency_ms"] > 0
    assert isinstance(r["numpy_ms"], float) and r["numpy_ms"] > 0
    if r["baseline"] == "evaluator":  # a custom workload: the DSL evaluator is not numpy's speed
        assert r["speedup_vs_numpy"] is None
        return
    assert r["baseline"] == "numpy" and isinstance(r["speedup_vs_numpy"], float)
    assert r["speedup_vs_numpy"] == pytest.approx(r["numpy_ms"] / r["latency_ms"], rel=1e-9)


def test_run_matmul_json_contract() -> None:
    proc = loomtune("run", "matmul", "m=16", "n=8", "k=4", "--json")
    assert proc.returncode == 0, proc.stderr
    r = one_json_object(proc)
    _check_run_fields(r)
    assert r["op"] == "matmul"
    assert r["params"] == {"m": 16, "n": 8, "k": 4}
    assert isinstance(r["gflops"], float)
    assert r["gflops"] == pytest.approx(2 * 16 * 8 * 4 / (r["latency_ms"] * 1e-3) / 1e9, rel=1e-9)
    # The workload key is a content hash: the same in this process as in the CLI's.
    assert r["workload_key"] == library_task("matmul", {"m": 16, "n": 8, "k": 4}).key
    assert r["workload_key"] != library_task("matmul", {"m": 16, "n": 8, "k": 5}).key
    # Canonical target: the features of -mattr are sorted.
    mattr = re.search(r"-mattr=(\S+)", r["target"])
    if mattr:
        feats = mattr.group(1).split(",")
        assert feats == sorted(feats)


def test_run_transpose_has_null_gflops() -> None:
    proc = loomtune("run", "transpose", "m=3", "n=5", "--json")
    assert proc.returncode == 0, proc.stderr
    r = one_json_object(proc)
    _check_run_fields(r)
    assert r["op"] == "transpose"
    assert r["params"] == {"m": 3, "n": 5}
    assert r["gflops"] is None


def test_run_custom_workload_file_with_size_override() -> None:
    proc = loomtune("run", "--workload", str(EXAMPLE), "m=5", "--json")
    assert proc.returncode == 0, proc.stderr
    r = one_json_object(proc)
    _check_run_fields(r)
    assert r["op"] == "tanh_matmul"
    assert r["params"]["m"] == 5
    assert r["params"] == {"m": 5, "n": 48, "k": 32}
    assert r["gflops"] is None  # a custom workload has no FLOP count
    assert r["baseline"] == "evaluator"


def test_run_human_output_says_correct() -> None:
    proc = loomtune("run", "matmul", "m=8", "n=8", "k=8")
    assert proc.returncode == 0, proc.stderr
    assert "correct: True" in proc.stdout
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------
# user errors: exit 2, one stderr line naming the culprit, no traceback


def _bad_format(tmp: Path) -> list[str]:
    f = tmp / "other.json"
    f.write_text(json.dumps({"format": "someone.else/7", "name": "x"}))
    return ["run", "--workload", str(f)]


def _corrupt(tmp: Path) -> list[str]:
    f = tmp / "corrupt.json"
    f.write_text('{"format":')
    return ["run", "--workload", str(f)]


def _unknown_body_op(tmp: Path) -> list[str]:
    d = json.loads(EXAMPLE.read_text())
    d["computes"][1]["body"] = ["frobnicate", ["load", "C", "i", "j"]]
    f = tmp / "badop.json"
    f.write_text(json.dumps(d))
    return ["run", "--workload", str(f)]


def _not_utf8(tmp: Path) -> list[str]:
    f = tmp / "latin1.json"
    f.write_bytes(b'{"format": "loomtune.workload/1", "name": "caf\xe9"}')
    return ["run", "--workload", str(f)]


def _too_deep(tmp: Path) -> list[str]:
    f = tmp / "deep.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    return ["run", "--workload", str(f)]


ERROR_CASES = [
    # id, argv (or a function of tmp_path), extra env, substrings the line must contain
    ("unknown-op", ["run", "foo"], {}, ["'foo'"]),
    ("unknown-param", ["run", "matmul", "q=1"], {}, ["'q'"]),
    ("negative", ["run", "matmul", "m=-3"], {}, ["parameter m", "-3"]),
    ("zero", ["run", "matmul", "m=0"], {}, ["parameter m", "0"]),
    ("float", ["run", "matmul", "m=1.5"], {}, ["parameter m", "1.5"]),
    ("text", ["run", "matmul", "m=abc"], {}, ["parameter m", "abc"]),
    ("dense-bias-2", ["run", "dense", "bias=2"], {}, ["bias", "2"]),
    ("missing-file", ["run", "--workload", "no/such/workload.json"], {}, ["no/such/workload.json"]),
    ("corrupt-json", _corrupt, {}, ["corrupt.json"]),
    ("unknown-format", _bad_format, {}, ["format", "someone.else/7"]),
    ("unknown-body-op", _unknown_body_op, {}, ["$.computes[1].body", "frobnicate"]),
    (
        "over-default-limit",
        ["run", "matmul", "m=100000", "n=100000", "k=100000"],
        {},
        ["LOOMTUNE_MAX_BYTES"],
    ),
    (
        "over-env-limit",
        ["run", "matmul", "m=64", "n=64", "k=64"],
        {"LOOMTUNE_MAX_BYTES": "1000"},
        ["LOOMTUNE_MAX_BYTES", "1000"],
    ),
    (
        "empty-conv-output",
        ["run", "conv2d_nhwc", "h=2", "w=2", "kh=5", "kw=5", "pad=0"],
        {},
        ["conv2d_nhwc", "output"],
    ),
    ("threads-0", ["run", "matmul", "--threads", "0"], {}, ["--threads"]),
    ("threads-text", ["run", "matmul", "--threads", "abc"], {}, ["--threads", "abc"]),
    ("empty-value", ["run", "matmul", "k="], {}, ["'k='"]),
    ("no-name", ["run", "matmul", "=3"], {}, ["'=3'"]),
    ("duplicate", ["run", "matmul", "m=3", "m=4"], {}, ["m", "twice"]),
    ("no-operator", ["run"], {}, ["operator"]),
    ("params-only", ["run", "m=3"], {}, ["operator"]),
    ("custom-zero", ["run", "--workload", str(EXAMPLE), "m=0"], {}, ["m", "0"]),
    ("custom-unknown-size", ["run", "--workload", str(EXAMPLE), "q=3"], {}, ["'q'"]),
    # Corrupt files the JSON parser itself chokes on in other ways than JSONDecodeError.
    ("not-utf8", _not_utf8, {}, ["latin1.json"]),
    ("too-deep", _too_deep, {}, ["deep.json"]),
]


@pytest.mark.parametrize(
    ("argv", "env", "needles"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_user_error_is_one_line(
    tmp_path: Path, argv, env: dict[str, str], needles: list[str]
) -> None:
    args = argv(tmp_path) if callable(argv) else argv
    proc = loomtune(*args, "--json", env=env)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("loomtune: error:"), line
    for needle in needles:
        assert needle in line, (needle, line)
    assert proc.stdout == ""  # no half-written JSON object for a failed command
