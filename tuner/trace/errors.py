"""Trace errors: what was wrong with a trace, naming the instruction."""

from ir.errors import LoomtuneError


class TraceError(LoomtuneError):
    """A trace that cannot be read or replayed (corrupt, stale decision, unknown instruction)."""
