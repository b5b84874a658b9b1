"""A 3×3, stride-1 convolution as Winograd F(2×2, 3×3) in the compute DSL.

Each 2×2 output tile is A^T [(G g G^T) ⊙ (B^T d B)] A for its 4×4 input tile d and
the 3×3 filter g: 16 multiplications per tile and channel pair instead of 36. As
computes (examples/conv3x3_winograd.workload.json is the same at one shape):

    P  (n, 2·th+2, 2·tw+2, c)      the zero-padded input the tiles read
    Ta (4, 4, n, th, tw, c)        B^T d, by rows           } the input transform
    V  (4, 4, n, th, tw, c)        (B^T d) B                }
    Ua (4, 3, c, k), U (4, 4, c, k)  G g, then (G g) G^T: the weight transform
    M  (4, 4, n, th, tw, k)        Σ_c V·U: 16 matmuls of (tiles × c) by (c × k)
    Ra (2, 4, n, th, tw, k)        A^T M
    Y  (n, oh, ow, k)              (A^T M) A at the output element, left lazy so the
                                   graph's epilogue (bias, residual add, relu) fuses in

U reads only the weight, so in a model it runs once at load (`ir.prepack`). The task
is an alternative implementation of the direct convolution's group: a model plan
offers both and keeps the one whose tuned kernel measured faster (`ir.graph.plan`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ir.expr import Expr, Reduce, eq, logical_and, select
from ir.graph.graph import Graph, Node
from ir.graph.lower_ops import GroupBuilder, Index, Lazy, literal

# F(2×2, 3×3)'s transforms (Lavin and Gray, 2015): input B^T, filter G, output A^T.
BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))

MIN_TILES = 49
"""Fewest 2×2 output tiles (a 14×14 output) for which the plan offers Winograd: below it
the transformed weight U (16/9 of the weight's size) and the transforms outweigh the
matmuls' saving (docs/decisions.md, Models)."""


def winograd_eligible(graph: Graph, node: Node) -> bool:
    """Whether `node` is a float32 NHWC conv that F(2×2, 3×3) computes: a dense 3×3
    kernel at stride and dilation 1 with at least `MIN_TILES` output tiles."""
    if node.op != "conv2d" or node.attr("layout", "NCHW") != "NHWC":
        return False
    if node.attr("groups", 1) != 1 or tuple(node.attr("strides", (1, 1))) != (1, 1):
        return False
    if tuple(node.attr("dilations", (1, 1))) != (1, 1):
        return False
    x, w = (graph.types[v] for v in node.inputs[:2])
    if x.dtype != "float32" or w.dtype != "float32" or w.rank != 4 or x.rank != 4:
        return False
    kh, kw, ci, _ = w.shape
    out = graph.types[node.outputs[0]].shape
    tiles = -(-out[1] // 2) * -(-out[2] // 2)
    return (kh, kw) == (3, 3) and ci == x.shape[3] and tiles >= MIN_TILES


def _combine(row: Sequence[float], term: Callable[[int], Expr], dtype: str) -> Expr:
    """Σ_j row[j]·term(j) with the row's common magnitude factored out: (a + b − c)·0.5."""
    used = [(j, c) for j, c in enumerate(row) if c]
    scale = abs(used[0][1])
    out: Expr | None = None
    for j, c in used:
        t = term(j)
        if out is None:
            out = t if c > 0 else literal(0.0, dtype) - t
        else:
            out = out + t if c > 0 else out - t
    assert out is not None
    return out if scale == 1 else out * literal(float(scale), dtype)


def _by_row(
    axis: Expr, rows: Sequence[Sequence[float]], term: Callable[[int], Expr], dtype: str
) -> Expr:
    """The transform `rows` applied along a tile axis: row `axis` of it, as a select chain."""
    out = _combine(rows[-1], term, dtype)
    for r in range(len(rows) - 2, -1, -1):
        out = select(eq(axis, r), _combine(rows[r], term, dtype), out)
    return out


def lower_winograd(b: GroupBuilder, node: Node, x: Lazy, w: Lazy, out: Sequence[int]) -> Lazy:
    """The conv `node` of `x` (NHWC) by `w` (HWIO) as F(2×2, 3×3); the lazy output Y."""
    n, h, wd, c = x.shape
    k = w.shape[3]
    _, oh, ow, _ = out
    pt, pl, _, _ = node.attr("pads", (0, 0, 0, 0))
    th, tw = -(-oh // 2), -(-ow // 2)
    f = x.dtype

    ph, pw = 2 * th + 2, 2 * tw + 2

    def padded(idx: Index) -> Expr:
        y, z = idx[1], idx[2]
        checks = [
            test
            for test, needed in (
                (y >= pt, pt > 0),
                (y < h + pt, ph - pt > h),
                (z >= pl, pl > 0),
                (z < wd + pl, pw - pl > wd),
            )
            if needed
        ]
        v = b.load(x, (idx[0], y - pt if pt else y, z - pl if pl else z, idx[3]))
        return select(logical_and(*checks), v, literal(0.0, f)) if checks else v

    p = b.materialize(Lazy((n, ph, pw, c), f, padded))

    def ta(i: Index) -> Expr:  # (x, b, n, th, tw, c): row x of B^T d, column b of the tile
        return _by_row(
            i[0], BT, lambda a: b.load(p, (i[2], i[3] * 2 + a, i[4] * 2 + i[1], i[5])), f
        )

    t_a = b.materialize(Lazy((4, 4, n, th, tw, c), f, ta))
    v = b.materialize(
        Lazy(
            (4, 4, n, th, tw, c),
            f,
            lambda i: _by_row(i[1], BT, lambda j: b.load(t_a, (i[0], j, *i[2:])), f),
        )
    )
    u_a = b.materialize(
        Lazy((4, 3, c, k), f, lambda i: _by_row(i[0], G, lambda j: b.load(w, (j, *i[1:])), f))
    )
    u = b.materialize(
        Lazy(
            (4, 4, c, k),
            f,
            lambda i: _by_row(i[1], G, lambda j: b.load(u_a, (i[0], j, i[2], i[3])), f),
        )
    )

    def mm(i: Index) -> Expr:  # (x, y, n, th, tw, k)
        rc = b.reduce_axis(c)
        prod = b.load(v, (*i[:5], rc.var)) * b.load(u, (i[0], i[1], rc.var, i[5]))
        return Reduce("sum", prod, (rc,))

    m = b.materialize(Lazy((4, 4, n, th, tw, k), f, mm, reduces=True))
    r_a = b.materialize(
        Lazy(
            (2, 4, n, th, tw, k),
            f,
            lambda i: _by_row(i[0], AT, lambda j: b.load(m, (j, *i[1:])), f),
        )
    )

    def y(i: Index) -> Expr:  # (n, h, w, k)
        tile = (i[0], i[1] // 2, i[2] // 2, i[3])
        return _by_row(i[2] % 2, AT, lambda j: b.load(r_a, (i[1] % 2, j, *tile)), f)

    return Lazy(tuple(out), f, y)
