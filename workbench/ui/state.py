"""Per-user data of the app (kept in `gr.State`); the Chunks tab edits schedules with `rl.chunking`.

Two browser sessions each get their own `Session`, so one never sees the other's group, credit or
chunk schedule. Sessions are replaced, not mutated, so a failed edit leaves the last valid one intact.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl.chunking import CHUNKERS
from workbench.rl.credit import Credit, Z
from workbench.rl.credit_compare import CreditComparison

BASE = "base"  # the model picker's key of the model the app was started with
EMBEDDED = "embedded"  # the model picker's key of the embedded model, whatever the app was started with
LESSON = "lesson"  # the model picker's key of the crosses lesson's result shipped with the package (its server
# path stays off the page: the picker's choices are in the page's config)
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
    compared: str | None = None  # the picker key of that second policy (a shared link reopens the comparison)
    # (the continuation rewards of the credit it was set against, the StepComparison of "Compare advantages")
    steps_compared: tuple | None = None

    @property
    def steps(self) -> int:
        """T the chunk schedule covers: the group's steps, else the default."""
        return self.group.num_steps if self.group is not None else sum(self.sizes)

    def with_group(self, group: TrajectoryGroup, reward_spec: str, rewards: torch.Tensor,
                   advantages: torch.Tensor) -> Session:
        """A new group replaces the old one and its credit; the schedule is kept when it still fits T."""
        sizes = self.sizes if sum(self.sizes) == group.num_steps else CHUNKERS.get("temporal")(group.num_steps)
        return replace(self, group=group, reward_spec=reward_spec, rewards=rewards, advantages=advantages,
                       credit=None, reference=None, comparison=None, steps_compared=None, sizes=sizes)

    def with_source(self, source: str) -> Session:
        """Another policy: the group and everything measured on it belonged to the old one and are dropped."""
        return replace(self, source=source, group=None, rewards=None, advantages=None, credit=None, reference=None,
                       comparison=None, steps_compared=None)

    def step_comparison(self):
        """The per-step advantages compared against the group's current Monte-Carlo credit, or None: a new group, a
        new measurement or a refinement leaves the last comparison behind (it was set against other numbers)."""
        if self.steps_compared is None or self.reference is None:
            return None
        against, comparison = self.steps_compared
        return comparison if against is self.reference.continuation_rewards else None  # a re-chunk keeps them

    def with_sizes(self, sizes: list[int]) -> Session:
        """The session under a new (already valid) schedule; the stored credit is re-chunked, not re-sampled."""
        credit = self.credit.rechunk(sizes) if self.credit is not None else None
        reference = self.reference.rechunk(sizes) if self.reference is not None else None
        comparison = self.comparison.rechunk(sizes) if self.comparison is not None else None
        return replace(self, sizes=list(sizes), credit=credit, reference=reference, comparison=comparison)


def format_sizes(sizes: list[int]) -> str:
    """[2, 3, 4, 7] -> "2,3,4,7" (the text the chunk-spec box shows)."""
    return ",".join(str(s) for s in sizes)
