"""The text of the Learn tab: short, and true to what the code measures (METHODS.md sections 3 and 5)."""

from __future__ import annotations

INTRO = """
### Why chunks? Two loaves of bread

Two bakers each bake a loaf in 16 steps. **Loaf A** comes out good, but its baker made one mistake:
the oven ran too hot for one step. **Loaf B** comes out worse, yet one of its steps was excellent.
Judge every step by the final loaf alone and you praise the too-hot oven of A and blame the excellent
step of B.

**Step GRPO judges steps this way.** Each image of a group gets one advantage
A = (reward - group mean) / group std, and every denoising step of that image is pushed up or down by
the same A.

**What the workbench measures.** From every intermediate state it samples K continuations and averages
their rewards: the value of that state. A step's *credit* is the value after the step minus the value
before it; the credits of one image add up to its reward minus the group mean. A cell is
*misattributed* (marked x) when its credit has the opposite sign of the image's advantage.

**What chunking changes.** Chunk-GRPO (GCPO, arXiv 2510.21583) groups consecutive steps into chunks,
e.g. 2,3,4,7, and gives each chunk one importance ratio (the geometric mean of its steps' ratios).
Summing credit over a chunk can cancel opposite-sign steps. With a single chunk the credit is exactly
reward minus mean, which always agrees with A: 0 % misattribution by construction, but nothing tells
the steps apart any more. Chunk sizes trade resolution for agreement.
"""

EXAMPLE = """
The button samples 8 images of *"a large red circle in the top left on a white background"* with the
loaded model (the embedded one by default; 16 steps), scores them with the `adherence` reward and
measures credit with K=4 continuations per state (up to a minute or two on a CPU). The group then also
appears in the Attribution and Chunks tabs, where you can change the chunks yourself.
"""
