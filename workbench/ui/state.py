"""Per-user data of the app (kept in `gr.State`) and the chunk-schedule edits of the Chunks tab.

Two browser sessions each get their own `Session`, so one never sees the other's group, credit or
chunk schedule. Sessions are replaced, not mutated, so a failed edit leaves the last valid one intact.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl.chunking import CHUNKERS, check_sizes, chunk_boundaries
from workbench.rl.credit import Credit, Z
from workbench.rl.credit_compare import CreditComparison

BASE = "base"  # the model picker's key of the model the app was started with
EMBEDDED = "embedded"  # the model picker's key of the embedded model, whatever the app was started with
DEFAULT_STEPS = 16  # T of the chunk editor before any group exists (the papers' 16 trained steps)


@dataclass
class Session:
    """What one browser session has made so far."""

    group: TrajectoryGroup | None = None  # the last sampled group (Generate tab)
    reward_spec: str = "adherence"  # reward that scored the group, reused by the credit measurement
    rewards: torch.Tensor | None = None  # (G,) rewards of the group's final images
    advantages: torch.Tensor | None = None  # (G,) GRPO advantages of those rewards
    credit: Credit | None = None  # measured credit of the group (any estimator), re-chunked on every edit
    reference: Credit | None = None  # the group's latest Monte-Carlo credit, which cheap estimators are set against
    z: float = Z  # errors a cell's credit must clear to count as determined (Attribution tab)
    sizes: list[int] = field(default_factory=lambda: CHUNKERS.get("temporal")(DEFAULT_STEPS))  # last valid
    run_id: str | None = None  # the fine-tuning run this session started
    source: str = BASE  # the policy every tab uses: a picker key (BASE, a run or checkpoint folder, a model folder)
    comparison: CreditComparison | None = None  # the group's credit under this policy and a second one

    @property
    def steps(self) -> int:
        """T the chunk schedule covers: the group's steps, else the default."""
        return self.group.num_steps if self.group is not None else sum(self.sizes)

    def with_group(self, group: TrajectoryGroup, reward_spec: str, rewards: torch.Tensor,
                   advantages: torch.Tensor) -> Session:
        """A new group replaces the old one and its credit; the schedule is kept when it still fits T."""
        sizes = self.sizes if sum(self.sizes) == group.num_steps else CHUNKERS.get("temporal")(group.num_steps)
        return replace(self, group=group, reward_spec=reward_spec, rewards=rewards, advantages=advantages,
                       credit=None, reference=None, comparison=None, sizes=sizes)

    def with_source(self, source: str) -> Session:
        """Another policy: the group and everything measured on it belonged to the old one and are dropped."""
        return replace(self, source=source, group=None, rewards=None, advantages=None, credit=None, reference=None,
                       comparison=None)

    def with_sizes(self, sizes: list[int]) -> Session:
        """The session under a new (already valid) schedule; the stored credit is re-chunked, not re-sampled."""
        credit = self.credit.rechunk(sizes) if self.credit is not None else None
        reference = self.reference.rechunk(sizes) if self.reference is not None else None
        comparison = self.comparison.rechunk(sizes) if self.comparison is not None else None
        return replace(self, sizes=list(sizes), credit=credit, reference=reference, comparison=comparison)


def format_sizes(sizes: list[int]) -> str:
    """[2, 3, 4, 7] -> "2,3,4,7" (the text the chunk-spec box shows)."""
    return ",".join(str(s) for s in sizes)


def split_at(sizes: list[int], step: int) -> list[int]:
    """Cut the chunk that contains `step` so that a new chunk starts at `step` (1 <= step <= T - 1)."""
    sizes = check_sizes(sizes)
    total = sum(sizes)
    if not 1 <= step <= total - 1:
        raise WorkbenchError(f"a chunk can start at steps 1..{total - 1}, not at step {step}; move the slider")
    cuts = chunk_boundaries(sizes)
    if step in cuts:
        raise WorkbenchError(f"a chunk already starts at step {step} (boundaries: {cuts}); choose another step")
    cuts = sorted([*cuts, step])
    edges = [0, *cuts, total]
    return [b - a for a, b in zip(edges, edges[1:])]


def merge_at(sizes: list[int], step: int) -> list[int]:
    """Remove the boundary at `step`, merging the chunks on either side of it."""
    sizes = check_sizes(sizes)
    cuts = chunk_boundaries(sizes)
    if step not in cuts:
        where = f"boundaries are at steps {cuts}" if cuts else "there is only one chunk"
        raise WorkbenchError(f"no chunk boundary at step {step} to merge; {where}")
    edges = [0, *[c for c in cuts if c != step], sum(sizes)]
    return [b - a for a, b in zip(edges, edges[1:])]


def toggle_boundary(sizes: list[int], after: int) -> list[int]:
    """Add or remove the chunk boundary after step `after` (0 <= after <= T - 2).

    The boundary after step t lies between steps t and t + 1, where the curve draws a dashed line at
    t + 0.5: with it a chunk starts at step t + 1 (`split_at(sizes, t + 1)`), without it steps t and
    t + 1 share a chunk (`merge_at(sizes, t + 1)`). [2, 3, 4, 7] toggled after 1 gives [5, 4, 7].
    """
    sizes = check_sizes(sizes)
    last = sum(sizes) - 1
    if not 0 <= after < last:
        raise WorkbenchError(f"a boundary can follow steps 0..{last - 1}, not step {after}"
                             + (" (the last step ends the last chunk)" if after == last else "")
                             + "; click an earlier step")
    cut = after + 1
    return merge_at(sizes, cut) if cut in chunk_boundaries(sizes) else split_at(sizes, cut)
