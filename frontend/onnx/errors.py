"""The importer's errors: ModelError (from ir.errors) and UnsupportedOperatorError."""

from __future__ import annotations

from collections.abc import Iterable

from ir.errors import ModelError

__all__ = ["ModelError", "UnsupportedOperatorError"]


class UnsupportedOperatorError(ModelError):
    """An ONNX operator the importer does not map to graph ops; names it and what is supported."""

    def __init__(self, op_type: str, node_name: str, supported: Iterable[str]) -> None:
        self.op_type = op_type
        self.node_name = node_name
        listed = ", ".join(sorted(supported))
        super().__init__(
            f"unsupported ONNX operator {op_type} (node {node_name!r}); supported: {listed}"
        )
