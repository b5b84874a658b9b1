"""Index arithmetic simplification: folds that hold, and folds that must not happen."""

from __future__ import annotations

import numpy as np

from ir.arith import bound
from ir.evaluate import eval_expr
from ir.expr import Const, Var, render
from ir.lower.simplify import simplify_expr

i, j, k = Var("i"), Var("j"), Var("k")
ENV = {i: (0, 15), j: (0, 7), k: (0, 99)}


def s(e) -> str:
    return render(simplify_expr(e, ENV))


def test_linear_forms_are_canonical() -> None:
    assert s(j + i * 8) == s(i * 8 + j) == "i * 8 + j"
    assert s((i + 1) * 4 - 4) == "i * 4"
    assert s(i - i) == "0"
    assert s(i * 1 + 0) == "i"


def test_split_index_folds_with_ranges() -> None:
    assert s((i * 8 + j) // 8) == "i"
    assert s((i * 8 + j) % 8) == "j"
    assert s((i * 8 + j + 3) // 8) != "i"  # j + 3 may reach 8: must not fold


def test_a_finer_split_folds_through_a_coarser_divisor() -> None:
    """(g*q + f) // c with g dividing c and 0 <= f < g: a row split by 4 read through
    64-row blocks (AMX's packed layout)."""
    r = Var("r")
    env = {k: (0, 191), r: (0, 3)}
    assert render(simplify_expr((k * 4 + r) // 64, env)) == "k // 16"
    assert render(simplify_expr((k * 4 + r) % 64, env)) == "k % 16 * 4 + r"
    assert "(" in render(simplify_expr((k * 4 + r + 2) // 64, env))  # r + 2 may reach 4
    assert render(simplify_expr((k * 4 + r) // 6, env)) == "(k * 4 + r) // 6"  # 4 ∤ 6


def test_folded_divisions_agree_with_the_unfolded_on_every_point() -> None:
    r = Var("r")
    env = {k: (0, 40), r: (0, 3)}
    kv, rv = (a.ravel() for a in np.meshgrid(np.arange(41), np.arange(4), indexing="ij"))
    at = {k: kv, r: rv}
    mask = np.ones(kv.shape, dtype=bool)
    for c in (8, 12, 64):
        for e in ((k * 4 + r) // c, (k * 4 + r) % c):
            folded = simplify_expr(e, env)
            assert folded != e
            want = eval_expr(e, at, {}, mask)
            np.testing.assert_array_equal(eval_expr(folded, at, {}, mask), want)


def test_divmod_without_range_information_is_kept() -> None:
    n = Var("n")
    assert "//" in render(simplify_expr((n * 8 + k) // 8, {}))


def test_always_true_guards_fold() -> None:
    assert simplify_expr(i < 16, ENV) == Const(True, "bool")
    assert simplify_expr(i * 8 + j < 128, ENV) == Const(True, "bool")
    assert simplify_expr(i * 8 + j < 100, ENV) != Const(True, "bool")
    assert simplify_expr(i >= 16, ENV) == Const(False, "bool")


def test_bound() -> None:
    assert bound(i * 8 + j, ENV) == (0, 127)
    assert bound((i * 8 + j) // 4, ENV) == (0, 31)
    assert bound(k % 10, ENV) == (0, 9)
    assert bound(Var("free"), ENV) is None


def test_float_arithmetic_is_not_reassociated() -> None:
    x = Var("x", "float32")
    e = (x + 1.0) - 1.0
    assert simplify_expr(e, ENV) == e


def test_strides_in_agrees_with_linear_in_for_every_variable() -> None:
    from ir.arith import linear_in, strides_in

    cases = [
        i * 8 + j,
        (i * 8 + j) // 4 + k * 3,
        i - i + k,
        Const(5, "int64"),
        i * j + k * 2,
        (k + i) % 7 - j,
    ]
    for e in cases:
        assert strides_in(e, [i, j, k]) == [linear_in(e, v)[0] for v in (i, j, k)], render(e)
    assert strides_in(i * 8 + j, [i, j, k]) == [8, 1, 0]
    assert strides_in((i * 8 + j) // 4 + k * 3, [i, j, k]) == [None, None, 3]
