"""Reward hacking in a run's held-out evaluations: the reward rises while the images' quality falls.

Every held-out evaluation (`train/evaluation.py`) records the reward and the images' checkerboard share
(`core/imaging.py` `checkerboard_share`) of fixed prompts and noise. A window of evaluations in which the reward
rises while the checkerboard share rises by at least `RISE` is reward hacking: the policy learns texture its
reward pays for, not the pictures the reward stands for (docs/methods.md "Reward hacking"). The Fine-tune and Runs
tabs say the verdict under the run's held-out figure.

    verdict = detect_reward_hacking([0, 10, 20], [0.2, 0.4, 0.6], [0.03, 0.10, 0.25])
    verdict.flagged, verdict.text   # True, "Reward hacking: from iteration 0 to 20 ..."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WINDOW = 3  # evaluations a verdict spans: the lesson evaluates every 10 iterations, so its last 20 iterations
RISE = 0.10  # rise of the checkerboard share over the window that counts as the quality falling: before training
# the crosses lesson's held-out images score 0.03, after 80 iterations without a KL term 0.48 (docs/methods.md
# "Reward hacking")
HELD_BACK = 0.10  # a last checkerboard share below this, with no window flagged, is texture held back: the base
# model's held-out images score 0.03 (no CFG) and 0.04 (its CFG); the crosses lesson's settings are chosen by it
QUALITY_KEY = "checkerboard"  # the metric's name in each evaluation space: eval/checkerboard, eval_cfg/checkerboard


@dataclass
class HackingVerdict:
    """The verdict on one window of held-out evaluations."""

    flagged: bool  # the reward rose and the checkerboard share rose by at least `rise`
    start: int  # first iteration of the window
    end: int  # last iteration of the window
    reward: tuple[float, float]  # the held-out reward at start and end
    checkered: tuple[float, float]  # the checkerboard share at start and end
    rise: float  # the threshold used

    @property
    def text(self) -> str:
        """One sentence for a learner."""
        change = (f"from iteration {self.start} to {self.end} the held-out reward went {self.reward[0]:.2f} -> "
                  f"{self.reward[1]:.2f} while the share of checkered pixel blocks went {100 * self.checkered[0]:.0f} %"
                  f" -> {100 * self.checkered[1]:.0f} %")
        if self.flagged:
            return (f"Reward hacking: {change}. Part of the reward is paying for a texture nobody asked for, "
                    "beside or instead of better pictures: compare Before and Now.")
        return (f"No sign of reward hacking: {change} (flagged when the reward rises while that share rises by "
                f"{100 * self.rise:.0f} points or more).")


def detect_reward_hacking(iterations: Sequence[int], reward: Sequence[float], checkered: Sequence[float],
                          window: int = WINDOW, rise: float = RISE) -> HackingVerdict | None:
    """The first window of `window` consecutive evaluations in which the reward rises (end > start) while the
    checkerboard share rises by `rise` or more; else the verdict on the last window. None with fewer than two
    evaluations. Sequences of equal length, one entry per evaluation, in iteration order."""
    if not len(iterations) == len(reward) == len(checkered):
        raise ValueError(f"one reward and one checkerboard share per evaluation: got {len(iterations)} iterations, "
                         f"{len(reward)} rewards and {len(checkered)} shares")
    if len(iterations) < 2:
        return None
    width = min(window, len(iterations))
    verdicts = [_verdict(iterations, reward, checkered, a, a + width - 1, rise)
                for a in range(len(iterations) - width + 1)]
    return next((v for v in verdicts if v.flagged), verdicts[-1])


def _verdict(iterations, reward, checkered, a: int, b: int, rise: float) -> HackingVerdict:
    flagged = reward[b] > reward[a] and checkered[b] - checkered[a] >= rise
    return HackingVerdict(flagged, int(iterations[a]), int(iterations[b]), (reward[a], reward[b]),
                          (checkered[a], checkered[b]), rise)


def run_verdict(rows: Sequence[dict], space: str = "eval", window: int = WINDOW,
                rise: float = RISE) -> HackingVerdict | None:
    """`detect_reward_hacking` over a run's metric rows: the evaluations in `space` (eval: no CFG, eval_cfg: the
    model's CFG) that recorded both the reward and the checkerboard share."""
    reward_key, quality_key = f"{space}/reward_mean", f"{space}/{QUALITY_KEY}"
    rows = [r for r in rows if isinstance(r.get(reward_key), (int, float)) and isinstance(r.get(quality_key),
                                                                                          (int, float))]
    return detect_reward_hacking([r["iteration"] for r in rows], [r[reward_key] for r in rows],
                                 [r[quality_key] for r in rows], window, rise)


def texture_held_back(rows: Sequence[dict], spaces: Sequence[str] = ("eval", "eval_cfg"),
                      share: float = HELD_BACK) -> bool:
    """Whether the checkerboard texture did not dominate a run: in every space its verdict flags no window and its
    last evaluation's share is below `share` (docs/methods.md "Reward hacking"). False without evaluations."""
    for space in spaces:
        key = f"{space}/{QUALITY_KEY}"
        shares = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        verdict = run_verdict(rows, space)
        if not shares or verdict is None or verdict.flagged or shares[-1] >= share:
            return False
    return True
