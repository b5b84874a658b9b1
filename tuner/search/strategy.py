"""Search strategies: what to measure next (`propose`) and what was learnt (`observe`).

A strategy is built for one tuning run from a `SearchContext` and a seed; the
only randomness it uses is its own `random.Random(seed)`, so a seeded run
proposes the same traces in any process. Strategies are found by name in
`STRATEGIES` (`--strategy` on the command line, `strategy` in the REST API).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ir.errors import LoomtuneError
from ir.task import Task
from tuner.cost_model.model import XGBCostModel
from tuner.database import Database
from tuner.runner import MeasureResult
from tuner.space.base import DesignSpace
from tuner.trace.trace import Trace


class UnknownStrategyError(LoomtuneError):
    """A strategy name that is not registered."""


@dataclass(frozen=True)
class SearchContext:
    """What a strategy searches: the task's design space on a target, and what is known."""

    task: Task
    target: str
    space: DesignSpace
    database: Database
    pending: frozenset[str] = frozenset()
    """Hashes of traces already waiting to be measured (a resumed job's candidates):
    not proposed again, as if measured."""
    cost_model: XGBCostModel | None = None
    """A cost model shared with the searches of other tasks (one task scheduler run, as
    MetaSchedule's shares one): each task's results then teach the others' search.
    None: a learning strategy trains its own."""

    def is_new(self, trace_hash: str) -> bool:
        """Neither measured for this workload and target nor pending."""
        return trace_hash not in self.pending and not self.database.has_measured(
            self.task.key, self.target, trace_hash
        )


@runtime_checkable
class SearchStrategy(Protocol):
    def propose(self, n: int) -> list[Trace]:
        """Up to n new candidates, none measured before; [] when the space has nothing new."""

    def observe(self, traces: Sequence[Trace], results: Sequence[MeasureResult]) -> None:
        """The results of measuring `traces` (same order)."""


StrategyFactory = Callable[[SearchContext, int], SearchStrategy]
STRATEGIES: dict[str, StrategyFactory] = {}


def register_strategy(name: str) -> Callable[[StrategyFactory], StrategyFactory]:
    def add(factory: StrategyFactory) -> StrategyFactory:
        STRATEGIES[name] = factory
        return factory

    return add


def make_strategy(name: str, context: SearchContext, seed: int) -> SearchStrategy:
    # Strategies register themselves when their module is imported.
    import tuner.search.evolutionary
    import tuner.search.replay  # noqa: F401

    if name not in STRATEGIES:
        known = ", ".join(sorted(STRATEGIES))
        raise UnknownStrategyError(f"unknown search strategy {name!r}; this loomtune has: {known}")
    return STRATEGIES[name](context, seed)


def default_strategy() -> str:
    """Evolutionary search once it exists, replay before (DESIGN.md)."""
    import tuner.search.evolutionary
    import tuner.search.replay  # noqa: F401

    return "evolutionary" if "evolutionary" in STRATEGIES else "replay"
