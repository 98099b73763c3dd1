"""Which folders the app may load a policy from: its runs folder, the models shipped with the package, the model it
was started with, and the folders named at its start (`app.py --models DIR ...`).

The app's model picker and its shared links take a path from whoever opens the page. `AllowedFolders.check`
refuses every other path with one message, the same whether the path exists or not, so the answer tells nothing
about the server's files. The path is resolved first (symbolic links followed, `..` collapsed): a link inside the
runs folder that leads elsewhere is refused like the place it leads to. A command run on one's own machine
(`workbench sample --model ...`) loads any folder; only the app asks.

    allowed = AllowedFolders.of("runs", models=["/data/models"])
    allowed.check("runs/crosses-1")      # -> "runs/crosses-1"
    allowed.check("/etc")                # WorkbenchError: ... is not a folder this app offers ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import WorkbenchError, shorten

SHIPPED = Path(__file__).resolve().parents[1] / "weights"  # the models that ship with the package


def _resolved(path: str | Path) -> Path | None:
    """`path` with its symbolic links followed and `..` collapsed (None when it cannot name a file at all)."""
    try:
        return Path(os.path.realpath(Path(path).expanduser()))
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a name too long, a loop in an old Python
        return None


@dataclass(frozen=True)
class AllowedFolders:
    """The folders (resolved) under which the app loads policies; `check` is the one test every path passes."""

    roots: tuple[Path, ...]

    @classmethod
    def of(cls, runs: str | Path = "runs", model: str | Path | None = None,
           models: tuple[str | Path, ...] | list[str | Path] = ()) -> AllowedFolders:
        """The runs folder, the shipped models, the app's own model and the `--models` folders."""
        named = [runs, SHIPPED, *([model] if model else []), *models]
        return cls(tuple(root for root in map(_resolved, named) if root is not None))

    def allows(self, path: str | Path) -> bool:
        resolved = _resolved(path)
        return resolved is not None and any(resolved == root or resolved.is_relative_to(root) for root in self.roots)

    def check(self, path: str) -> str:
        """`path` unchanged when it lies in an allowed folder; else one WorkbenchError, the same for a path that
        exists, one that does not, a loop of links and a path that cannot exist."""
        if not self.allows(path):
            raise WorkbenchError(f"{shorten(str(path), 200)} is not a folder this app offers: pick a run or a model "
                                 "from the list (the app loads runs from its runs folder, the shipped models and "
                                 "the folders named at its start with --models)")
        return path
