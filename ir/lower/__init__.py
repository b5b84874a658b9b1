"""Lowering: the scheduled block program -> plain loops over flat buffers.

The pipeline, in order (each pass is IR -> IR, in a file of its own):
  1. guards          block predicates of imperfect splits become `if`s
  2. reduction_init  reduction inits run on the first reduction iteration
  3. blocks_to_loops iteration variables replaced by their bindings
  4. compact         intermediates allocated inside the loop that uses them, at tile size
  5. flatten         n-d buffer accesses become row-major offsets
  6. simplify        constant folding, linear index forms, range-aware rules
  7. partition       loops under an imperfect-tile guard split into a guard-free
                     main part and a guarded tail
Codegen compiles the result, and the tuner's features read the same program.
"""

from __future__ import annotations

from collections.abc import Callable

from ir.build import check_bound
from ir.lower.blocks_to_loops import blocks_to_loops
from ir.lower.compact import compact_buffers
from ir.lower.flatten import flatten
from ir.lower.guards import insert_guards
from ir.lower.partition import partition_loops
from ir.lower.reduction_init import lower_reduction_init
from ir.lower.simplify import simplify
from ir.program import Program

PASSES: tuple[Callable[[Program], Program], ...] = (
    insert_guards,
    lower_reduction_init,
    blocks_to_loops,
    compact_buffers,
    flatten,
    simplify,
    partition_loops,
)


def lower(program: Program) -> Program:
    check_bound(program)
    for p in PASSES:
        program = p(program)
    return program
