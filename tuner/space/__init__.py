"""Design spaces: where candidate traces come from (see base.py for the contract)."""

from tuner.space.base import DesignSpace, SpaceRejected

__all__ = ["DesignSpace", "SpaceRejected"]
