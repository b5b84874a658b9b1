"""Lowered programs to native code through LLVM (llvmlite)."""
