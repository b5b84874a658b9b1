"""codegen/heap.py: a kernel's scratch stays in the C heap between calls, whatever the
process allocated before (each case in a fresh interpreter, its heap set to map every
block over 128 KB, as glibc does before its threshold adapts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import ctypes, json, resource
import numpy as np
ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: map blocks over 128 KB
from codegen.kernel import compile_program
from ir import compute as te
from ir.build import build_program
a = te.placeholder((1024, 1024), "float32", "A")
t = te.compute((1024, 1024), lambda i, j: a[i, j] * 2.0, "T")  # 4 MB of scratch per call
c = te.compute((1024, 1024), lambda i, j: t[i, j] + 1.0, "C")
kernel = compile_program(build_program(te.Workload("scratch", (a,), (c,))))
x = np.ones((1024, 1024), np.float32)
y = np.empty_like(x)
for _ in range(3):
    kernel(x, y)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    kernel(x, y)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20
print(json.dumps({"faults": faults, "right": bool((y == 3.0).all())}))
"""


def _faults_per_call(keep: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOOMTUNE_KEEP_SCRATCH": "1" if keep else "0"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_scratch_is_not_faulted_in_again_on_every_call() -> None:
    kept, mapped = _faults_per_call(keep=True), _faults_per_call(keep=False)
    assert kept["right"] and mapped["right"]
    # 4 MB is 1,024 pages: mapped per call they all fault again; kept, none do
    assert mapped["faults"] > 500, mapped
    assert kept["faults"] < 50, kept
