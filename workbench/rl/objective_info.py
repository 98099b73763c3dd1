"""What an objective is, in one record on its registration (`OBJECTIVES.register(name, info=ObjectiveInfo(...))`).

Every other place reads this record instead of keeping its own table: the trainer (whether the objective
needs chunks, which per-step advantages it trains with), the training config (its chunk settings), the
explainer (the paired advantage estimator), the formula panel (the closed form of the gradient weight), the
presets (one preset per objective that names overrides) and the app's menu (the order). Adding an objective
is then its function, its record and its test (docs/methods.md "Objectives").

    @OBJECTIVES.register("my_step", info=ObjectiveInfo(unit="step", formula=STEP_FORMULA, order=50))
    def my_step(inputs, settings): ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError

UNITS = ("step", "chunk", "sequence")
STEP_CREDITS = ("critic", "lookahead")


@dataclass(frozen=True)
class Formula:
    """docs/methods.md "Gradient weights": w_{i,t} of an unclipped trained step, in LaTeX and as numbers.

    w = -A * (ratio if ratio_symbol else 1) / prod(denominator counts); the counts are named by the symbols
    B (trajectories with a trained step), T (steps), T_i (trained steps of i), N (trained steps of the batch),
    K_i (trained chunks of i), |c| (trained steps of the step's chunk).
    """

    ratio_symbol: str | None  # LaTeX symbol of the ratio the objective uses (None: no ratio, e.g. GPG)
    latex: str  # LaTeX of w for an unclipped unit
    denominator: tuple[str, ...]  # the count symbols whose product divides A * ratio
    per_step_advantage: bool = False  # the advantage is A_{i,t} (one per step), not A_i


@dataclass(frozen=True)
class ObjectiveInfo:
    """One objective's description (see the module doc)."""

    unit: str = "step"
    """What one ratio covers: a step, a chunk of steps or the whole sequence."""
    needs_chunks: bool = False
    """The objective reads ObjectiveSettings.chunks (TrainConfig.chunks over the trained steps)."""
    advantage: str = "grpo"
    """The advantage estimator (ADVANTAGES) it is trained with, and its preset sets."""
    step_credit: str | None = None
    """Per-step advantages the trainer computes for it: 'critic' (GAE over a learned value, PPO) or
    'lookahead' (per-step gains of a look-ahead reward, TP-GRPO); None = one advantage per trajectory."""
    formula: Formula | None = None
    """Closed form of the gradient weight for the formula panel; None = autograd value only."""
    companions: Callable[[object], dict] | None = None
    """Settings the objective always runs with, from a base TrainConfig: config -> overrides (GPG: one update
    per rollout; DAPO: dynamic sampling and clip-higher). Experiments that compare objectives apply these."""
    preset: dict | None = None
    """Further TrainConfig overrides of the preset named after the objective, e.g. its paper's clip range
    (None = no such preset)."""
    order: int = 100
    """Position in the app's objective menu (lower first)."""
    label: str = ""
    """One line for menus and reports: the paper or what it changes."""

    def __post_init__(self):
        if self.unit not in UNITS:
            raise WorkbenchError(f"unit must be one of {', '.join(UNITS)}, got '{self.unit}'")
        if self.step_credit is not None and self.step_credit not in STEP_CREDITS:
            raise WorkbenchError(f"step_credit must be None or one of {', '.join(STEP_CREDITS)}, "
                                 f"got '{self.step_credit}'")
        if self.step_credit is not None and self.unit != "step":
            raise WorkbenchError("per-step advantages need a per-step ratio: step_credit requires unit='step'")


STEP_FORMULA = Formula(r"\rho_{i,t}", r"-\frac{A_i\,\rho_{i,t}}{B\,T_i}", ("B", "T_i"))
PER_STEP_FORMULA = Formula(r"\rho_{i,t}", r"-\frac{A_{i,t}\,\rho_{i,t}}{B\,T_i}", ("B", "T_i"),
                           per_step_advantage=True)
