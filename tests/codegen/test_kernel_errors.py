"""A compiled kernel checks its arrays before any native code runs; symbolic sizes are bound first.

Every refusal is a KernelArgumentError naming the buffer at fault, so a wrong
call can never scribble over memory.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from codegen.kernel import Kernel, KernelArgumentError, compile_program
from ir import compute as te
from ir.build import bind, build_program, check_bound
from ir.compute import Workload
from ir.errors import IRError, UnboundShapeError
from ir.library.matmul import build_matmul

M, N, K = 8, 6, 4


@pytest.fixture(scope="module")
def kernel() -> Kernel:
    return compile_program(build_program(build_matmul(M, N, K)))


def _arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    return a, b, c


def test_good_call_is_correct(kernel: Kernel) -> None:
    a, b, c = _arrays()
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    assert [p.name for p in kernel.params] == ["A", "B", "C"]
    assert [p.is_output for p in kernel.params] == [False, False, True]


def test_wrong_number_of_arrays(kernel: Kernel) -> None:
    a, b, c = _arrays()
    with pytest.raises(KernelArgumentError) as info:
        kernel(a, b)
    msg = str(info.value)
    assert "3" in msg and "2" in msg
    assert "A, B, C" in msg
    with pytest.raises(KernelArgumentError, match="got 4"):
        kernel(a, b, c, c)


def _expect(kernel: Kernel, arrays: tuple[np.ndarray, ...], name: str, word: str) -> None:
    before = [x.copy() for x in arrays]
    with pytest.raises(KernelArgumentError) as info:
        kernel(*arrays)
    msg = str(info.value)
    assert msg.startswith(f"{name}:"), msg
    assert word in msg, msg
    # Refused before running: nothing was written.
    for x, y in zip(arrays, before):
        np.testing.assert_array_equal(x, y)


def test_wrong_shape(kernel: Kernel) -> None:
    a, b, c = _arrays()
    _expect(kernel, (a, np.zeros((N, K), np.float32), c), "B", "shape")
    _expect(kernel, (a, b, np.zeros((M, N + 1), np.float32)), "C", "shape")
    _expect(kernel, (a.reshape(-1), b, c), "A", "shape")


def test_wrong_dtype(kernel: Kernel) -> None:
    a, b, c = _arrays()
    _expect(kernel, (a.astype(np.float64), b, c), "A", "float64")
    _expect(kernel, (a, b, c.astype(np.float64)), "C", "float64")


def test_not_an_array(kernel: Kernel) -> None:
    a, b, c = _arrays()
    _expect(kernel, (a.tolist(), b, c), "A", "list")  # type: ignore[arg-type]


def test_transposed_view_is_refused(kernel: Kernel) -> None:
    a, b, c = _arrays()
    at = np.ascontiguousarray(a.T).T  # shape (M, K), Fortran order
    assert at.shape == a.shape and not at.flags.c_contiguous
    _expect(kernel, (at, b, c), "A", "contiguous")


def test_strided_slice_is_refused(kernel: Kernel) -> None:
    a, b, _ = _arrays()
    big = np.zeros((2 * M, N), np.float32)
    strided = big[::2]
    assert strided.shape == (M, N) and not strided.flags.c_contiguous
    _expect(kernel, (a, b, strided), "C", "contiguous")
    np.testing.assert_array_equal(big, 0)


def test_read_only_output_is_refused(kernel: Kernel) -> None:
    a, b, c = _arrays()
    c.flags.writeable = False
    _expect(kernel, (a, b, c), "C", "read-only")


def test_read_only_input_is_fine(kernel: Kernel) -> None:
    a, b, c = _arrays()
    a.flags.writeable = False
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_bind_call_checks_once(kernel: Kernel) -> None:
    a, b, c = _arrays()
    with pytest.raises(KernelArgumentError, match=r"^B:"):
        kernel.bind_call(a, b.astype(np.float64), c)
    call = kernel.bind_call(a, b, c)
    assert call() == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# symbolic sizes


def _symbolic_matmul(size_name: str = "n", reduce_name: str = "r") -> Workload:
    """C[8, n] = A[8, 4] @ B[4, n], with the reduction axis named `reduce_name`."""
    n = te.size_var(size_name)
    A = te.placeholder((M, K), "float32", "A")
    B = te.placeholder((K, n), "float32", "B")
    r = te.reduce_axis(K, reduce_name)
    C = te.compute((M, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), "C")
    return Workload("mm_sym", (A, B), (C,))


def test_unbound_size_is_refused_naming_it() -> None:
    program = build_program(_symbolic_matmul())
    with pytest.raises(UnboundShapeError) as info:
        compile_program(program)
    msg = str(info.value)
    assert re.search(r"\bn\b", msg), msg
    assert "B" in msg  # the first buffer with a symbolic shape
    with pytest.raises(UnboundShapeError):
        check_bound(program)


def test_bound_program_compiles_and_is_correct() -> None:
    program = bind(build_program(_symbolic_matmul()), {"n": 5})
    check_bound(program)
    kern = compile_program(program)
    assert [p.shape for p in kern.params] == [(M, K), (K, 5), (M, 5)]
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (K, 5)).astype(np.float32)
    c = np.full((M, 5), np.nan, np.float32)
    kern(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_bind_when_a_loop_has_the_size_name() -> None:
    """`reduce_axis(extent)` names its axis "k" by default; a size called "k" must not clash.

    Binding the size k must not replace the loop variable that happens to be
    called k: the bound program compiles and computes the product.
    """
    k = te.size_var("k")
    A = te.placeholder((M, k), "float32", "A")
    B = te.placeholder((k, N), "float32", "B")
    r = te.reduce_axis(k)  # default name "k"
    C = te.compute((M, N), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), "C")
    program = bind(build_program(Workload("mm_k", (A, B), (C,))), {"k": 3})
    kern = compile_program(program)
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (M, 3)).astype(np.float32)
    b = rng.uniform(-1, 1, (3, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    kern(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_bind_unknown_name_is_refused() -> None:
    program = build_program(_symbolic_matmul())
    with pytest.raises(IRError, match="'q'"):
        bind(program, {"q": 5})


@pytest.mark.parametrize(
    "value", [0, -2, 2.0, True, "5"], ids=["zero", "negative", "float", "bool", "str"]
)
def test_bind_non_positive_or_non_integer_is_refused(value: object) -> None:
    program = build_program(_symbolic_matmul())
    with pytest.raises(IRError) as info:
        bind(program, {"n": value})  # type: ignore[dict-item]
    msg = str(info.value)
    assert re.search(r"\bn\b", msg), msg
    assert repr(value) in msg, msg
