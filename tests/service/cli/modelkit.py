"""What the model CLI tests share: the `run --model` JSON contract and a JSON-running helper."""

from __future__ import annotations

import json

import pytest

from service.cli.main import main

RUN_FIELDS = {
    "model",
    "model_key",
    "target",
    "threads",
    "tasks",
    "tuned_tasks",
    "kernels",
    "correct",
    "latency_ms",
    "onnxruntime_ms",
    "speedup_vs_onnxruntime",
    "max_abs_err",
}
"""`loomtune run --model --json`'s fields (shared/DESIGN.md, "Models")."""


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    """Run the CLI in-process; its exit code and the JSON object it printed ({} if none)."""
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}
