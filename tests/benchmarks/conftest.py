"""Every test here appends to a record of its own: never to the committed benchmarks/results.jsonl."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import common


@pytest.fixture(autouse=True)
def record(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path_factory.mktemp("record") / "results.jsonl"
    monkeypatch.setattr(common, "RECORD", path)
    return path
