"""The tuning benchmark: tune each suite workload for a budget of trials, then time
the best kernel against numpy (and PyTorch where installed) interleaved in one run.

``python -m benchmarks tune [--trials N] [--only NAME,...] [--threads 1,2] [--layers]
[--extras evo_replay,reuse,scheduler]``

Per workload and thread count (``--threads``, default 1 and 2), in a fresh
SQLite tuning database of its own (a temporary folder),
``service.tuning.tune_task`` runs the real loop: the rule-based design space,
the strategy (evolutionary by default), the local pool of measurement
processes (the usable cores cut into slots of that many threads). The curve
is the best-so-far median per trial as the pool measured it while tuning
(``workers.measure.TUNING_CONFIG``, short repeats, the other core busy with
the next candidate). Then, in this process, the best stored kernel is
compiled, verified, and timed interleaved with numpy and PyTorch (both
limited to the same thread count; PyTorch's answer verified too) in one
``time_interleaved`` call, all on arrays numpy allocated as a user's are:
the ratios of the table come from that call only. Then the kernel alone on
``compare.PLACEMENTS`` sets of numpy's arrays and as many 64-byte aligned
copies, many short repeats side by side (the row's ``align_gap``:
``compare.paired_gap``). ``--layers`` adds
BERT-base's and ResNet-18's layer shapes as rows (``suite.LAYERS``).

The extras (each optional, each in the same run; one module each in ``extras/``):

- ``evo_replay``: on every workload of the run (``--only`` narrows it), the
  replay strategy for ``--replay-trials`` (64) trials against the evolutionary
  search, each run in a fresh database, median over ``--seeds`` seeds (the
  main run's curve stands for the first seed's evolutionary run); how many
  workloads the evolutionary median is ahead on at 64 and 256 trials (the
  search goal: at least 5 of the 6);
- ``reuse``: matmul 1000³ tuned for 32 trials in a copy of matmul 1024³'s
  database (the evolutionary search seeds its population with the other
  shape's best, re-derived, and their structural variants) against a cold
  start of 128 trials, judged head to head (both best kernels timed in one
  interleaved call per seed);
- ``scheduler``: ``service.tuning.tune_tasks`` over the six workloads, weights
  1,1,4,4,2,2, one budget of 6 × 128 trials (gradient policy) against 128
  trials each (every workload tuned on its own, fresh databases), with
  round-robin over the shared budget beside; total weighted latency of the
  best kernels, timed head to head.

Modules: ``suite`` (workloads, goals), ``tuning`` (one run of one workload),
``compare`` (the final comparison, head-to-head timings), ``torch_ref``,
``tvm`` (TVM beside loomtune), ``extras/``, ``run`` (the whole run and its
result), ``report`` (tables), ``plot`` (the PNG).

The result goes to ``results/tune-<UTC>.json``, the curves to a PNG of the
same stem next to it (matplotlib, when installed), and one line to the record
``benchmarks/results.jsonl``.
"""
