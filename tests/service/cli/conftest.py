"""Fixtures of the CLI tests: a fresh SQLite database per test and a small ONNX model."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from tests.models import mlp


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh SQLite database, made the default through LOOMTUNE_DATABASE_URL."""
    url = f"sqlite:///{tmp_path / 'loomtune.db'}"
    monkeypatch.setenv("LOOMTUNE_DATABASE_URL", url)
    return url


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    onnx.save(mlp(), path)
    return path
