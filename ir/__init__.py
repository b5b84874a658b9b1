"""The tensor program: compute DSL, loop-nest IR, lowering passes and the workload library."""
