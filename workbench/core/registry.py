"""Named registries: the extension points (objectives, advantage estimators, rewards, chunkers).

    OBJECTIVES = Registry("objective")

    @OBJECTIVES.register("step_grpo")
    def step_grpo(...): ...

    OBJECTIVES.get("nope")  # WorkbenchError: unknown objective 'nope'; valid objectives: step_grpo

A registration may carry a description of what it registers (`register(name, info=...)`, read back with
`info(name)`), so every other place reads one record instead of keeping its own table.
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
        self._info: dict[str, object] = {}

    def register(self, name: str, info: object = None) -> Callable[[F], F]:
        """Decorator registering fn under `name`, with an optional description `info`."""
        def decorator(fn: F) -> F:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = fn
            self._info[name] = info
            return fn
        return decorator

    def add(self, fn: F, name: str, info: object = None) -> F:
        """`register` as a call after the definition (`OBJECTIVES.add(step_grpo, "step_grpo", info=...)`): the form
        of flow/, rl/, train/ and rewards/, whose functions mutmut mutates only when they carry no decorator
        (docs/mutation.md)."""
        return self.register(name, info)(fn)

    def unregister(self, name: str) -> None:
        """Remove `name` (tests that register a temporary entry clean up with it)."""
        self.get(name)
        del self._items[name], self._info[name]

    def info(self, name: str):
        """The description registered with `name` (None if none was given)."""
        self.get(name)
        return self._info.get(name)

    def get(self, name: str) -> F:
        if name not in self._items:
            raise WorkbenchError(f"unknown {self.kind} '{name}'; valid {self.kind}s: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items
