"""What a chunker is, in one record on its registration (`CHUNKERS.register(name, info=ChunkerInfo(...))`).

Every other place reads this record instead of keeping its own table: the Chunks tab (its menu, the label and
minimum of its one option field), the `workbench chunks` command (--method's choices and one flag per option),
chunk specs (`chunking.schedule`: "temporal" or "uniform:size=4" wherever sizes such as "2,3,4,7" are accepted,
so a training run names a chunker with TrainConfig.chunks) and the chunkers a run can use (those that do not
read the L1_rel curve, which a run does not measure).

    @CHUNKERS.register("halves", info=ChunkerInfo("two halves"))
    def halves(num_steps, l1_rel=None): ...
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.core.errors import WorkbenchError


@dataclass(frozen=True)
class ChunkOption:
    """One keyword option of a chunker: an integer of at least `minimum`, or (kind str) a text such as sizes."""

    name: str
    """The chunker function's keyword, also the CLI flag (--max-size) and the spec key (adaptive:max_size=3)."""
    label: str
    """What it sets, for menus and help: 'chunk size', 'largest chunk'."""
    default: int | None = None
    """Its value when not given (None: required)."""
    minimum: int = 1
    """The smallest value the chunker accepts."""
    kind: type = int
    """int, or str for a text option (the fixed chunker's sizes)."""


@dataclass(frozen=True)
class ChunkerInfo:
    """One chunker's description (see the module doc)."""

    label: str
    """One line for menus and help: the paper or what it does."""
    options: tuple[ChunkOption, ...] = ()
    """Its keyword options, each a ChunkOption."""
    needs_curve: bool = False
    """It cuts by the L1_rel curve (T,) of the model's trajectories: the app and `workbench chunks` measure it,
    a training run does not, so a run cannot name it."""
    in_menu: bool = True
    """Listed in the Chunks tab's chunker menu (fixed is not: typed sizes have their own box)."""
    order: int = 100
    """Position in menus and choices (lower first)."""

    def __post_init__(self):
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise WorkbenchError(f"chunker options must have distinct names, got {names}")
        if self.in_menu and (len(self.options) > 1 or any(o.kind is not int for o in self.options)):
            raise WorkbenchError("the Chunks tab has one number field: a chunker in its menu takes at most one "
                                 "integer option (register it with in_menu=False otherwise)")

    def option(self) -> ChunkOption | None:
        """The one option the Chunks tab's number field sets, or None."""
        return self.options[0] if self.options else None
