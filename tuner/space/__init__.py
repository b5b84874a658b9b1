"""Design spaces: where candidate traces come from (see base.py for the contract, space.py for the design)."""

from tuner.space.base import DesignSpace, SpaceRejected
from tuner.space.context import SpaceContext
from tuner.space.mutators import DEFAULT_MUTATORS, MUTATORS, Mutator
from tuner.space.postprocs import DEFAULT_POSTPROCS, POSTPROCS, Postproc
from tuner.space.registry import Registry, RegistryError
from tuner.space.rules import DEFAULT_RULES, RULES, ScheduleRule
from tuner.space.space import MARKER, RuleSpace, default_space

__all__ = [
    "DEFAULT_MUTATORS",
    "DEFAULT_POSTPROCS",
    "DEFAULT_RULES",
    "MARKER",
    "MUTATORS",
    "POSTPROCS",
    "RULES",
    "DesignSpace",
    "Mutator",
    "Postproc",
    "Registry",
    "RegistryError",
    "RuleSpace",
    "ScheduleRule",
    "SpaceContext",
    "SpaceRejected",
    "default_space",
]
