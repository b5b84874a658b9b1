"""Error types of the IR layer: each names what was wrong so a user can act on it."""

from __future__ import annotations


class LoomtuneError(Exception):
    """Base of every user-facing error; the CLI prints its message as one line."""


class IRError(LoomtuneError):
    """An ill-formed expression or program (mismatched dtypes, wrong arity, ...)."""


class WorkloadError(LoomtuneError):
    """An unknown operator or parameter, or a parameter value that is not allowed."""


class DefinitionError(LoomtuneError):
    """A corrupt or unknown JSON workload definition or serialised program."""


class UnboundShapeError(LoomtuneError):
    """A symbolic shape variable was left unbound where concrete sizes are needed."""


class BufferTooLargeError(LoomtuneError):
    """The buffers of a workload exceed LOOMTUNE_MAX_BYTES; refused before allocating."""


class GraphError(LoomtuneError):
    """An ill-formed model graph: an undefined value, an unknown op, a bad attribute or shape."""


class GraphInputError(LoomtuneError):
    """A graph was run with a missing input or one of the wrong shape or dtype."""


class ModelError(LoomtuneError):
    """A model file that cannot be used: unreadable, not a model, missing data, dynamic shapes."""
