"""A comparison of two policies in one sentence: the reward's change and whether any credit change is established.

The table under it (`viz.credit_view.comparison_text`) lists every rate; a newcomer reads this line first. A change
counts as established when it is more than two standard errors from zero (the table's ±, which overstates the error
of two groups that share their noise: docs/methods.md "Before and after"); with one group per policy most are not.
"""

from __future__ import annotations

import math

from workbench.rl.credit import Z

NAMES = {"misattributed": "share of misattributed cells", "determined": "share of determined cells",
         "mass_against": "credit mass against the advantage"}


def reward_change(comparison) -> tuple[float, float]:
    """(mean reward after - before, its standard error over the images' paired differences: image i of both groups
    starts from the same noise)."""
    before, after = (c.rewards.double() for c in comparison.credits)  # (G,) each
    diff = after - before  # (G,)
    se = float(diff.std() / math.sqrt(diff.numel())) if diff.numel() > 1 else math.nan
    return float(diff.mean()), se


def headline(comparison, z: float = Z) -> str:
    """One sentence, in plain words, naming both policies."""
    before, after = comparison.labels
    change, se = reward_change(comparison)
    rewards = [float(c.rewards.mean()) for c in comparison.credits]
    shown = f"{change:+.3f}" + ("" if se != se else f" ± {se:.3f}")
    settled = se == se and abs(change) > 2 * se
    reward = (f"the mean reward is {rewards[1]:.3f} under **{after}** and {rewards[0]:.3f} under **{before}** "
              f"({shown}: {'a change larger than two standard errors' if settled else 'within noise'})")
    found = [d for d in comparison.differences(z) if d.se == d.se and d.se > 0 and abs(d.diff) > 2 * d.se]
    if not found:
        credit = ("no change in credit is established by these two groups: every rate's difference is within two "
                  "standard errors, or one side has too few determined cells to have one")
    else:
        credit = "established: " + "; ".join(
            f"the {d.unit}s' {NAMES[d.rate]} {'rises' if d.diff > 0 else 'falls'} by {100 * abs(d.diff):.1f} points "
            f"(± {100 * d.se:.1f})" for d in found)
    return f"**In one sentence:** on the same prompt and noise, {reward}; {credit}."


def images_label(comparison) -> str:
    """The caption of the two rows of images, naming each policy."""
    before, after = comparison.labels
    return f"Final images, same noise: top row {before}, bottom row {after}"
