"""Measurement: timing protocol, verification, measurement processes."""
