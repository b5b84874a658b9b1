"""codegen/threadpool.py: parallel loops on a persistent pool, in the JIT and in a library.

The pool is real (its workers are counted in /proc), forked children are real
processes, and every kernel is checked against numpy.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from codegen import threadpool
from codegen.emit import emit_module
from codegen.host import host_target
from codegen.jit import compile_ir, compile_object, link_shared_library
from codegen.kernel import Kernel, compile_program
from ir.lower import lower
from ir.task import Task, library_task
from tests.codegen.loopkit import with_loop
from workers.verify import empty_outputs, verify

ROOT = Path(__file__).resolve().parents[2]


def parallel_kernel(op: str, params: dict[str, int], threads: int) -> tuple[Task, Kernel]:
    task = library_task(op, params)
    return task, compile_program(with_loop(task.program, "i", "parallel"), host_target(threads))


def run_checked(task: Task, kernel: Kernel) -> list[np.ndarray]:
    inputs = task.make_inputs(seed=1)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    assert verify(outputs, task.reference(inputs), task.output_names, task.reduction_length) is None
    return outputs


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def in_child(check: Callable[[], None], timeout: float = 30) -> None:
    """Run `check` in a forked child of this process; fail if it raises, crashes or hangs."""
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            signal.alarm(int(timeout))
            check()
            code = 0
        except BaseException as exc:  # reported through the exit status
            print(f"child: {exc!r}", file=sys.stderr)
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout + 5
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, "the forked child failed"
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung")


# -- the kernel's side -------------------------------------------------------------------


@pytest.mark.parametrize(("m", "threads"), [(3, 5), (11, 4)])
def test_more_threads_than_cores_and_rows(m: int, threads: int) -> None:
    # 3 rows over 5 tasks (two empty), 11 over 4 (3, 3, 3, 2): workers beyond the CPUs.
    task, kernel = parallel_kernel("gelu", {"m": m, "n": 33}, threads)
    for _ in range(3):
        run_checked(task, kernel)


def test_a_failed_chunk_on_a_worker_fails_the_kernel() -> None:
    """The body's status of every chunk is checked: make only chunks not starting at row 0
    (run on pool workers) fail, and the kernel returns -1; the pool still works after."""
    task = library_task("gelu", {"m": 6, "n": 4})
    text = emit_module(lower(with_loop(task.program, "i", "parallel")), "k", num_threads=2)
    body = re.search(r'define internal i32 @"k\.body\d+"\(([^)]*)\)\n\{.*?\n\}\n', text, re.S)
    assert body is not None
    start = body.group(1).split(", ")[-2].split()[-1]  # the chunk's first row
    failing = body.group(0).replace(
        "ret i32 0",
        f'%"fail" = icmp sgt i64 {start}, 0\n  %"rc" = zext i1 %"fail" to i32\n  ret i32 %"rc"',
    )
    module = compile_ir(text.replace(body.group(0), failing), host_target(2))
    fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)(module.address("k"))
    x, y = task.make_inputs(seed=0)[0], np.zeros((6, 4), np.float32)
    assert fn(x.ctypes.data, y.ctypes.data) == -1
    run_checked(*parallel_kernel("gelu", {"m": 6, "n": 4}, 2))


def test_the_pool_is_persistent() -> None:
    """Counted in a forked child, whose only other threads are the pool's: in the test
    process other tests' threads (OpenBLAS, executors) may start or end meanwhile."""
    task, kernel = parallel_kernel("gelu", {"m": 16, "n": 8}, 2)

    def child() -> None:
        run_checked(task, kernel)
        threads = os_threads()
        assert threads > 1, "the parallel kernel ran no pool thread"
        for _ in range(200):
            run_checked(task, kernel)
        assert os_threads() == threads, "a thread per call"

    in_child(child)


# -- two callers ---------------------------------------------------------------------------


def test_two_python_threads_call_two_parallel_kernels_at_once() -> None:
    """ctypes drops the GIL, so the regions overlap; one of them finds the pool busy and
    runs its chunks on its own thread. Every result must still be exact."""
    kernels = [
        parallel_kernel("gelu", {"m": 37, "n": 64}, 2),
        parallel_kernel("matmul", {"m": 30, "n": 24, "k": 16}, 3),
    ]
    expected = [run_checked(task, kernel) for task, kernel in kernels]
    failures: list[str] = []

    def hammer(which: int) -> None:
        task, kernel = kernels[which]
        inputs = task.make_inputs(seed=1)
        for _ in range(300):
            outputs = empty_outputs(task.output_specs())
            kernel(*inputs, *outputs)
            if not all(np.array_equal(a, b) for a, b in zip(outputs, expected[which])):
                failures.append(f"{task.op} differs")
                return

    threads = [threading.Thread(target=hammer, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not failures


# -- fork ------------------------------------------------------------------------------------


def test_a_forked_child_starts_its_own_pool_even_mid_region() -> None:
    """The parent's pool is in use (its lock held half the time by another thread) when
    it forks: the child finds a fresh pool, starts its own workers and keeps them."""
    task2, kernel2 = parallel_kernel("gelu", {"m": 9, "n": 40}, 2)
    task3, kernel3 = parallel_kernel("matmul", {"m": 10, "n": 8, "k": 8}, 3)
    run_checked(task2, kernel2)
    stop = threading.Event()
    call = kernel2.bind_call(*task2.make_inputs(0), *empty_outputs(task2.output_specs()))

    def keep_busy() -> None:
        while not stop.is_set():
            call()

    busy = threading.Thread(target=keep_busy)
    busy.start()

    def child() -> None:
        assert os_threads() == 1
        run_checked(task2, kernel2)
        assert os_threads() == 2  # one worker, started here
        run_checked(task3, kernel3)
        assert os_threads() == 3
        for _ in range(50):
            run_checked(task3, kernel3)
        assert os_threads() == 3

    try:
        for _ in range(3):
            in_child(child)
    finally:
        stop.set()
        busy.join()
    run_checked(task3, kernel3)  # and the parent's pool still works


def run_script(body: str) -> None:
    """`body` in a fresh interpreter (no thread has exited there, so glibc has no cached
    thread stack to reuse); it prints ok."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body) + "\nprint('ok')\n"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_thread_that_cannot_start_leaves_its_chunk_to_the_caller() -> None:
    run_script(
        """
        import re, resource
        from pathlib import Path
        from tests.codegen.test_threadpool import os_threads, parallel_kernel, verify
        from workers.verify import empty_outputs
        task, kernel = parallel_kernel("gelu", {"m": 12, "n": 16}, 3)
        inputs = task.make_inputs(seed=1)
        outputs = empty_outputs(task.output_specs())
        reference = task.reference(inputs)
        before = os_threads()
        status = Path("/proc/self/status").read_text()
        size = int(re.search(r"VmSize:\\s+(\\d+) kB", status)[1]) * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        # room for the pool's state, not for a thread's 8 MiB stack
        resource.setrlimit(resource.RLIMIT_AS, (size + 2**21, hard))
        kernel(*inputs, *outputs)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        assert os_threads() == before, "no worker started"
        assert verify(outputs, reference, task.output_names, task.reduction_length) is None
        """
    )


def test_without_wipe_on_fork_the_child_tells_by_its_process_id() -> None:
    """Kernels older than Linux 4.14 refuse MADV_WIPEONFORK: the state then records its
    creator's process id. Made to refuse here with an invalid advice value."""
    run_script(
        """
        from codegen import threadpool
        threadpool._MADV_WIPEONFORK = 12345  # EINVAL
        from tests.codegen.test_threadpool import in_child, os_threads, parallel_kernel, run_checked
        task, kernel = parallel_kernel("gelu", {"m": 9, "n": 40}, 2)
        run_checked(task, kernel)
        def child():
            assert os_threads() == 1
            run_checked(task, kernel)
            assert os_threads() == 2
        in_child(child)
        run_checked(task, kernel)
        """
    )


# -- a library's pool ------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("nm") is None, reason="needs cc, nm")
def test_a_library_of_two_parallel_kernels_links_one_hidden_pool(tmp_path: Path) -> None:
    """Each kernel object carries the runtime in a COMDAT group: the library keeps one copy,
    hidden, never unloaded; loaded here beside the JIT's own pool, both work."""
    kernels = {
        "lt_gelu": (library_task("gelu", {"m": 13, "n": 24}), 2),
        "lt_mm": (library_task("matmul", {"m": 17, "n": 8, "k": 5}), 3),
    }
    objects = []
    for name, (task, threads) in kernels.items():
        text = emit_module(
            lower(with_loop(task.program, "i", "parallel")), name, num_threads=threads
        )
        path = tmp_path / f"{name}.o"
        path.write_bytes(compile_object(text, host_target(threads)))
        objects.append(path)
    so = link_shared_library(
        objects, tmp_path / "libpar.so", exports=list(kernels), thread_pool=True
    )
    symbols = subprocess.run(["nm", str(so)], capture_output=True, text=True, check=True).stdout
    defined = [line.split()[-1] for line in symbols.splitlines() if " U " not in line]
    assert defined.count(threadpool.ENTRY) == 1 and defined.count("loomtune_pool.worker") == 1
    dynamic = subprocess.run(
        ["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True
    ).stdout
    assert {line.split()[-1] for line in dynamic.splitlines()} == set(kernels)
    dynamic_section = subprocess.run(
        ["readelf", "-d", str(so)], capture_output=True, text=True, check=True
    ).stdout
    assert "NODELETE" in dynamic_section

    lib = ctypes.CDLL(str(so))
    for _ in range(20):
        for name, (task, _threads) in kernels.items():
            inputs = task.make_inputs(seed=2)
            outputs = empty_outputs(task.output_specs())
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int32
            assert fn(*[ctypes.c_void_p(a.ctypes.data) for a in (*inputs, *outputs)]) == 0
            reference = task.reference(inputs)
            assert verify(outputs, reference, task.output_names, task.reduction_length) is None
