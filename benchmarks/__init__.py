"""loomtune against numpy, side by side in one run: ``python -m benchmarks``.

``run`` compiles each case of a suite, verifies it against numpy and times it
and numpy interleaved, then writes a JSON result file under
``benchmarks/results/``; ``report`` regenerates README.md's results tables from
the newest committed file of each suite, so every published number can be
traced to a file that records the command, the seed and the machine.

This module imports nothing: ``python -m benchmarks`` imports the package
before ``__main__`` runs, and ``__main__`` must edit the environment before
numpy (and its BLAS) is loaded.
"""
