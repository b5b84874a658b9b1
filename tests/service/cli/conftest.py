"""Fixtures of the CLI tests: a fresh SQLite database per test and small ONNX models."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from tests.models import mlp, res_block
from tests.sqlite import fresh_sqlite


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, migrated_sqlite: Path) -> str:
    """A fresh SQLite database (empty, at the current schema), made the default through
    LOOMTUNE_DATABASE_URL."""
    url = fresh_sqlite(migrated_sqlite, tmp_path / "loomtune.db")
    monkeypatch.setenv("LOOMTUNE_DATABASE_URL", url)
    return url


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    onnx.save(mlp(), path)
    return path


@pytest.fixture(scope="module")
def res_block_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "res_block.onnx"
    onnx.save(res_block(), path)
    return path
