"""``python -m benchmarks lowp``: the int8 / bf16 benchmark (tensor instructions).

Each low-precision workload is tuned from a fresh database by the tuning
benchmark's loop (`benchmarks.tune.tuning.tune_one`); its best kernel is then
verified against the operator's numpy reference and timed interleaved, in one
process at one thread, with numpy's float32 version of the same shapes (the
operator's float twin: the honest baseline) and PyTorch's int8 and bf16 paths
(`benchmarks.tune.torch_ref.lowp_paths`). Whether the best kernel after 16
trials is already tensorized is read from its trace. AMX paths the CPU lacks
are listed as not measured.
"""
