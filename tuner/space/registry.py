"""Name registries for the design space's plug-ins: rules, postprocessors, mutators.

A plug-in is a class registered under a name; a space is built from names, so
users add their own without touching the space or the search:

    @RULES.register("my-rule")
    class MyRule(ScheduleRule): ...

    default_space(program, target, rules=[*DEFAULT_RULES, "my-rule"])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ir.errors import LoomtuneError

T = TypeVar("T")


class RegistryError(LoomtuneError):
    """An unknown plug-in name, or a name registered twice."""


class Registry(Generic[T]):
    """Classes by name, in registration order; `create` instantiates one."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._classes: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: register under `name` and set the class's `name` attribute."""
        if not isinstance(name, str) or not name:
            raise RegistryError(f"a {self.kind} name must be a non-empty string, got {name!r}")

        def decorate(cls: type[T]) -> type[T]:
            known = self._classes.get(name)
            if known is not None and known is not cls:
                raise RegistryError(
                    f"{self.kind} {name!r} is already registered (by {known.__module__}.{known.__qualname__})"
                )
            cls.name = name  # type: ignore[attr-defined]
            self._classes[name] = cls
            return cls

        return decorate

    def get(self, name: str) -> type[T]:
        try:
            return self._classes[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; known: {', '.join(self._classes)}"
            ) from None

    def create(self, name: str, **options: Any) -> T:
        return self.get(name)(**options)

    def names(self) -> list[str]:
        return list(self._classes)

    def __contains__(self, name: object) -> bool:
        return name in self._classes
