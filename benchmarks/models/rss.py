"""One engine's memory for one model, in a process of its own: load, one inference, RSS.

    python -m benchmarks.models.rss ENGINE MODEL FILE.onnx [--quick] [--threads N] [--seed S]

prints one JSON object: ``base_mb`` (resident after the engine's imports, before the
model), ``peak_mb`` (the process's high-water mark, /proc/self/status VmHWM: the load's
transient copies included), ``rss_mb`` (resident after the inference: what the loaded
model holds, plus the imports), ``load_s``. A process per engine and model, so one
engine's allocations never count against another's. loomtune loads the ONNX file with
`loomtune.load_model` (stored schedules, else default loop nests); ONNX Runtime builds
a session with the benchmark's options; PyTorch builds the module from its definition
with the same seeded weights (it never reads the ONNX file).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

ENGINES = ("loomtune", "onnxruntime", "torch")


def status_mb(field: str) -> float | None:
    """A /proc/self/status figure (VmRSS, VmHWM) in MiB; None where it is missing."""
    try:
        text = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return None


def _loader(engine: str, args: argparse.Namespace) -> Any:
    """Import the engine now (counted in base_mb); a function that loads and runs the model."""
    import numpy as np

    from benchmarks.models import definitions

    spec = definitions.spec(args.model, args.quick)
    inputs = spec.inputs(spec.config, np.random.default_rng(args.seed))
    if engine == "loomtune":
        import loomtune
        from codegen.host import host_target
        from frontend.onnx import load_onnx  # noqa: F401  (imported before the baseline)
        from service.db.store import open_database
        from service.model import compile_model  # noqa: F401

        host_target()  # LLVM initialised and the database opened before the baseline too
        open_database()

        def load_and_run() -> object:
            model = loomtune.load_model(args.file, threads=args.threads)
            return model, model(*inputs)

        return load_and_run
    if engine == "onnxruntime":
        from benchmarks.models.run import onnxruntime_session

        def load_and_run() -> object:
            session = onnxruntime_session(args.file, args.threads)
            return session, session.run(None, dict(zip(spec.input_names, inputs)))

        return load_and_run
    import torch

    torch.set_num_threads(args.threads)

    def load_and_run() -> object:
        module = definitions.build(spec, args.seed)
        with torch.inference_mode():
            return module, module(*definitions.torch_inputs(spec, inputs))

    return load_and_run


def measure(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    load_and_run = _loader(engine, args)
    gc.collect()
    base = status_mb("VmRSS")
    start = time.perf_counter()
    held = load_and_run()
    load_s = time.perf_counter() - start
    gc.collect()
    peak, rss = status_mb("VmHWM"), status_mb("VmRSS")
    out = {
        "engine": engine,
        "base_mb": base,
        "peak_mb": peak,
        "rss_mb": rss,
        "held_mb": None if rss is None or base is None else rss - base,
        "load_s": load_s,
    }
    del held
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.models.rss", description=__doc__)
    parser.add_argument("engine", choices=ENGINES)
    parser.add_argument("model")
    parser.add_argument("file", type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.engine, args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
