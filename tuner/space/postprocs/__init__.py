"""Postprocessors, one module each, registered by name in `POSTPROCS` (see base.py)."""

from tuner.space.postprocs import (  # noqa: F401  (importing registers the built-in postprocessors)
    decompose_reduction,
    rewrite_parallel,
    rewrite_unroll,
    rewrite_vectorize,
    verify,
)
from tuner.space.postprocs.base import POSTPROCS, Postproc

DEFAULT_POSTPROCS = (
    "rewrite-parallel",
    "rewrite-vectorize",
    "rewrite-unroll",
    "decompose-reduction",
    "verify",
)
"""In this order: loop kinds first (the init nests inherit them), then reductions, then the checks."""

__all__ = ["DEFAULT_POSTPROCS", "POSTPROCS", "Postproc"]
