"""The ONNX importer: `load_onnx` reads a model into an `ir.graph.Graph`, folding what is
known at import (shape arithmetic, BatchNormalization) and keeping ONNX's NCHW layout."""

from frontend.onnx.convert import SUPPORTED, load_onnx
from frontend.onnx.errors import ModelError, UnsupportedOperatorError

__all__ = ["SUPPORTED", "ModelError", "UnsupportedOperatorError", "load_onnx"]
