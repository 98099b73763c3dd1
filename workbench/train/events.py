"""What the trainer tells its subscribers (the run store, trackers, the CLI, notebooks): events and the summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from workbench.core.files import clean_json

EVENT_KINDS = ("started", "iteration", "samples", "eval_samples", "checkpoint", "finished", "stopped", "failed")


@dataclass
class TrainerEvent:
    """Something the trainer did. `data`: started {config, resumed_from}; iteration {metrics}; samples
    {prompts, grid (PIL image)}; eval_samples {prompts, guidance, grid: a row per guidance scale}; checkpoint
    {weights, optimizer (state dict)}; finished / stopped {summary}; failed {error, type}."""

    kind: str  # one of EVENT_KINDS
    iteration: int
    data: dict = field(default_factory=dict)


@dataclass
class RunSummary:
    run_dir: str | None  # None when the run has no folder
    state: str  # finished, stopped or failed
    iterations: int  # completed iterations
    first_reward_mean: float | None
    last_reward_mean: float | None
    first_eval_reward: float | None  # before training (iteration 0)
    last_eval_reward: float | None
    seconds: float

    def to_dict(self) -> dict:
        return clean_json(asdict(self))
