"""Named registries: the extension points (objectives, advantage estimators, rewards, chunkers).

    OBJECTIVES = Registry("objective")

    @OBJECTIVES.register("step_grpo")
    def step_grpo(...): ...

    OBJECTIVES.get("nope")  # WorkbenchError: unknown objective 'nope'; valid objectives: step_grpo
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from workbench.core.errors import WorkbenchError

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """A name -> function map whose unknown-name error lists the valid names."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def decorator(fn: F) -> F:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = fn
            return fn
        return decorator

    def get(self, name: str) -> F:
        if name not in self._items:
            raise WorkbenchError(f"unknown {self.kind} '{name}'; valid {self.kind}s: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items
