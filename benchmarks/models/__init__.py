"""Whole models against ONNX Runtime and PyTorch: ``python -m benchmarks models`` (see run.py)."""
