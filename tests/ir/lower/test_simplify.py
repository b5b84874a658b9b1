"""Index arithmetic simplification: folds that hold, and folds that must not happen."""

from __future__ import annotations

from ir.arith import bound
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
